"""The sr stage's Python API (pipeline.sr.upscale, ImageWorker) and its argument checks (issue 12)."""
import json
from pathlib import Path

import cv2
import numpy as np
import onnx
import pytest
from skimage import data

from pipeline import backends
from pipeline.cli import main
from pipeline.errors import PipelineError
from pipeline.sr import ImageWorker, Summary, discover, upscale

SCALE = 2.5


@pytest.fixture(scope="module", autouse=True)
def _env(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SRDEPLOY_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield


@pytest.fixture(scope="module")
def torch_backend():
    return backends.create("torch", "srcnn", "fp32", threads=1)


def _write(path: Path, pixels) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    assert cv2.imwrite(str(path), pixels)
    return path


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("in")
    astro = np.ascontiguousarray(data.astronaut()[::8, ::8, ::-1])
    _write(root / "a.png", astro)
    _write(root / "sub/b.png", np.ascontiguousarray(data.coffee()[::12, ::12, ::-1]))
    (root / "broken.png").write_bytes(b"not a png")
    return root


def _read(path):
    return cv2.imread(str(path), cv2.IMREAD_UNCHANGED)


def test_a_run_leaves_the_collectors_freeze_as_it_found_it(folder, torch_backend, tmp_path):
    """A folder run keeps the collector off the objects that existed before it (gc.freeze) and hands them back after;
    a process's own freeze (a pre-fork server's) is neither extended nor undone."""
    import gc

    assert gc.get_freeze_count() == 0
    upscale(folder, tmp_path / "a", scale=SCALE, backend=torch_backend, progress=False, log=lambda _m: None)
    assert gc.get_freeze_count() == 0
    gc.freeze()
    try:
        mine = gc.get_freeze_count()
        upscale(folder, tmp_path / "b", scale=SCALE, backend=torch_backend, progress=False, log=lambda _m: None)
        assert gc.get_freeze_count() == mine
    finally:
        gc.unfreeze()


def test_upscale_returns_the_summary_it_writes(folder, torch_backend, tmp_path):
    lines = []
    s = upscale(folder, tmp_path / "out", scale=SCALE, backend=torch_backend, summary=tmp_path / "s.json",
                progress=False, log=lines.append)
    assert isinstance(s, Summary)
    assert s.counts == {"ok": 2, "failed": 1, "skipped": 0, "ignored": 0}
    assert [r.job.rel for r in s.failed] == ["broken.png"] and "not a readable image" in s.failed[0].reason
    assert s.model == "srcnn" and s.backend == torch_backend.describe()
    assert json.loads((tmp_path / "s.json").read_text()) == json.loads(json.dumps(s.to_dict()))
    assert (tmp_path / "out/sub/b.png").is_file()
    # progress=False: the header and the failures, nothing per image
    assert lines[0].startswith(f"sr: srcnn x{SCALE:g} on torch (")
    assert any(ln.startswith("failed broken.png") for ln in lines)
    assert not any(ln.startswith("a.png:") for ln in lines)


def test_image_worker_process_equals_the_folder_run(folder, torch_backend, tmp_path):
    s = upscale(folder / "a.png", tmp_path / "folder.png", scale=SCALE, backend=torch_backend, progress=False,
                log=lambda _: None)
    worker = ImageWorker(torch_backend, "srcnn", SCALE, tile=0)
    job = discover(folder / "a.png", tmp_path / "worker.png").jobs[0]
    rec = worker.process(job)
    assert rec.status == "ok" and rec.out_size == s.records[0].out_size and rec.infer_s > 0
    assert np.array_equal(_read(tmp_path / "worker.png"), _read(tmp_path / "folder.png"))
    bad = worker.process(discover(folder / "broken.png", tmp_path / "bad.png").jobs[0])
    assert bad.status == "failed" and "not a readable image" in bad.reason and not (tmp_path / "bad.png").exists()


def _sr(capsys, *args):
    code = main(["sr", *map(str, args)])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("extra,needle", [
    (["--tile", "-5"], "--tile must be an integer >= 0"),
    (["--tile-overlap", "-3"], "--tile-overlap must be an integer >= 0"),
    (["--jpeg-quality", "500"], "--jpeg-quality must be an integer from 1 to 100"),
    (["--threads", "0"], "--threads must be an integer >= 1"),
    (["--batch", "0"], "--batch must be an integer >= 1"),
])
def test_bad_numbers_are_one_line_before_any_work(folder, tmp_path, capsys, extra, needle):
    code, err = _sr(capsys, folder, tmp_path / "never", "--backend", "torch", *extra)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], err
    assert not (tmp_path / "never").exists()


def test_tile_zero_still_means_never_tile(folder, torch_backend, tmp_path):
    s = upscale(folder, tmp_path / "out", scale=SCALE, backend=torch_backend, tile=0, progress=False,
                log=lambda _: None)
    assert s.tile is None and s.to_dict()["tile"] is None and all(r.tiles == 1 for r in s.ok)


def test_format_that_contradicts_the_output_name_is_an_error(folder, tmp_path, capsys):
    code, err = _sr(capsys, folder / "a.png", tmp_path / "out.jpg", "--format", "png", "--backend", "torch")
    assert code == 2 and "names a jpg file but --format png" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out.jpg").exists()


def test_summary_naming_a_folder_fails_before_any_work(folder, tmp_path, capsys):
    (tmp_path / "taken").mkdir()
    code, err = _sr(capsys, folder, tmp_path / "never", "--backend", "torch", "--summary", tmp_path / "taken")
    assert code == 2 and "is a folder" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "never").exists()


def test_quiet_still_says_which_backend_and_why(folder, tmp_path, capsys):
    code, err = _sr(capsys, folder / "a.png", tmp_path / "a.png", "--backend", "torch", "--threads", "1",
                    "--scale", SCALE, "--quiet")
    lines = err.strip().splitlines()
    assert code == 0 and len(lines) == 1, err
    assert lines[0].startswith(f"sr: srcnn x{SCALE:g} on torch (requested); 1 image -> ")


def test_reference_without_any_match_says_so(folder, torch_backend, tmp_path):
    hr = tmp_path / "hr"
    _write(hr / "a.png", np.zeros((10, 10, 3), np.uint8))   # the right name, the wrong size
    lines = []
    s = upscale(folder, tmp_path / "out", scale=SCALE, backend=torch_backend, reference=hr, progress=False,
                log=lines.append)
    assert s.reference is None
    said = [ln for ln in lines if ln.startswith("reference:")]
    assert len(said) == 1 and "no image" in said[0] and "1 with no file of the same name" in said[0], lines
    reasons = {r.job.rel: r.metrics["reference"] for r in s.ok}
    assert reasons["sub/b.png"] == "missing" and "does not match the output" in reasons["a.png"]


def _onnx_with_model(path: Path, model: str) -> Path:
    g = onnx.helper.make_graph([onnx.helper.make_node("Identity", ["input"], ["y"])], "g",
                               [onnx.helper.make_tensor_value_info("input", onnx.TensorProto.FLOAT, [1])],
                               [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])])
    m = onnx.helper.make_model(g)
    onnx.helper.set_model_props(m, {"model": model})
    onnx.save(m, str(path))
    return path


def test_onnx_model_mismatch_is_one_line(folder, tmp_path, capsys):
    f = _onnx_with_model(tmp_path / "x3.onnx", "srcnn-x3")
    code, err = _sr(capsys, folder, tmp_path / "never", "--onnx", f, "--model", "srcnn")
    assert code == 2 and "exported for model 'srcnn-x3', not 'srcnn'" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "never").exists()


def test_onnx_file_names_the_model(folder, tmp_path):
    """Without --model, the model (and so its scale) comes from the exported file's metadata."""
    from pipeline.export.cached import onnx_for

    path = onnx_for("srcnn-x3", "fp32", "custom")
    s = upscale(folder / "a.png", tmp_path / "a.png", onnx=path, backend="ort", threads=1, progress=False,
                log=lambda _: None)
    assert s.model == "srcnn-x3" and s.scale == 3 and s.counts["ok"] == 1
    assert _read(tmp_path / "a.png").shape[:2] == (3 * 64, 3 * 64)


def test_backend_instance_for_another_model_is_refused(folder, torch_backend, tmp_path):
    with pytest.raises(PipelineError, match="runs model 'srcnn', not 'srcnn-x3'"):
        upscale(folder, tmp_path / "never", model="srcnn-x3", backend=torch_backend, progress=False)
    with pytest.raises(PipelineError, match="cannot change the already-loaded backend"):
        upscale(folder, tmp_path / "never", backend=torch_backend, threads=2, progress=False)
    assert not (tmp_path / "never").exists()


def test_engine_file_names_the_model(tmp_path):
    # `sr --engine F` without --model runs the model the engine's sidecar names (as --onnx does with metadata).
    from pipeline.engine import sidecar_path
    from pipeline.sr.settings import resolve_model

    engine = tmp_path / "m.engine"
    engine.write_bytes(b"plan")
    sidecar_path(engine).write_text(json.dumps({"model": "srcnn-x3", "onnx_metadata": {"model": "srcnn-x3"}}))
    assert resolve_model(None, engine=engine) == "srcnn-x3"
    with pytest.raises(PipelineError, match="built for model 'srcnn-x3', not 'srcnn'"):
        resolve_model("srcnn", engine=engine)


def test_a_streamed_record_log_writes_the_summary_a_kept_one_does(tmp_path):
    """Ray's driver streams records (RecordLog(keep=False): counts kept, records spooled beside --summary); the
    document is the one a run that keeps its records writes, and the spool leaves nothing behind."""
    from pipeline.sr.runner.jobs import Job
    from pipeline.sr.runner.records import Record, RecordLog

    dicts = [{"input": "a.png", "output": "o/a.png", "status": "ok", "in_size": [10, 10], "out_size": [30, 20],
              "mode": "rgb", "bit_depth": 8, "tiles": 1, "time_s": 0.3, "decode_s": 0.1, "infer_s": 0.1,
              "encode_s": 0.1, "psnr": 30.0, "ssim": 0.9, "psnr_bicubic": 29.0, "ssim_bicubic": 0.8},
             {"input": "b.png", "output": "o/b.png", "status": "ok", "in_size": [5, 5], "out_size": [10, 10],
              "mode": "gray", "bit_depth": 16, "tiles": 2, "time_s": 0.3, "decode_s": 0.1, "infer_s": 0.1,
              "encode_s": 0.1, "psnr": 32.0, "ssim": 0.7, "psnr_bicubic": 31.0, "ssim_bicubic": 0.6},
             {"input": "c.png", "output": "o/c.png", "status": "failed", "reason": "empty file"},
             {"input": "d.png", "output": "o/d.png", "status": "skipped", "reason": "output exists"}]
    docs = []
    for keep in (True, False):
        path = tmp_path / ("kept" if keep else "streamed") / "run.json"
        log = RecordLog(keep=keep, spool_beside=path)
        for d in dicts:
            log.add(Record.from_dict(d, Job(Path(d["input"]), Path(d["output"]), d["input"], "png")))
        s = Summary(model="srcnn", scale=3.0, backend="b", backend_choice="c", executor={"name": "x"}, input="i",
                    output="o", tile=None, tile_margin_hr=0, batch=1, workers=1, log=log, ignored=["notes.txt"],
                    wall_s=2.0, process_s=1.0)
        s.write(path)
        log.close()
        assert len(s.records) == (4 if keep else 0) and s.out_mpix == pytest.approx(700 / 1e6)
        assert sorted(p.name for p in path.parent.iterdir()) == ["run.json"]  # the spool left nothing behind
        docs.append(json.loads(path.read_text()))
    kept, streamed = docs
    assert kept == streamed and streamed["images"] == dicts
    assert streamed["counts"] == {"ok": 2, "failed": 1, "skipped": 1, "ignored": 1}
    assert streamed["failures"] == [{"input": "c.png", "reason": "empty file"}] and streamed["ignored"] == ["notes.txt"]
    assert streamed["reference"] == pytest.approx({"psnr": 31.0, "ssim": 0.8, "psnr_bicubic": 30.0,
                                                   "ssim_bicubic": 0.7, "images": 2})
    assert streamed["images_per_s"] == 2.0 and streamed["mpix_per_s"] == 0.001  # rounded to 3 places


@pytest.mark.parametrize("backend", ["ort", "openvino"])
def test_one_sr_run_parses_its_onnx_file_once(folder, tmp_path, capsys, monkeypatch, backend):
    """`sr --onnx F`: the file is opened once (checked, parsed, its metadata read) and that object is handed to
    every layer (model resolution, the backend, the report); onnx.load runs on F once (it still does the work)."""
    import shutil

    from pipeline.export.cached import onnx_for

    f = tmp_path / "m.onnx"  # the plain file alone (no folded siblings): the graph the backend runs is F itself
    shutil.copyfile(onnx_for("srcnn", "fp32", "custom"), f)
    real, loads = onnx.load, []

    def counting(path, *a, **k):
        loads.append(Path(path).resolve())
        return real(path, *a, **k)

    monkeypatch.setattr(onnx, "load", counting)
    monkeypatch.setattr(onnx, "load_model", counting)
    code, err = _sr(capsys, folder / "a.png", tmp_path / "a.png", "--onnx", f, "--backend", backend)
    assert code == 0, err
    assert loads.count(f.resolve()) == 1, loads
