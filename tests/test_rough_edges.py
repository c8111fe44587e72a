"""Issue 23's rough edges, each as a new user hit it: checks before any work, slow steps that say so, interrupted
runs that say how to resume, one message per checkpoint problem, and README claims that hold."""
from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
from skimage import data

from models.spec import MODELS
from pipeline.cli import main
from pipeline.export.cached import onnx_for
from pipeline.images import imageio
from pipeline.sr import upscale
from pipeline.sr.runner import console as sr_console

ROOT = Path(__file__).resolve().parent.parent


def _env(**extra) -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), **extra}


def _run(capsys, *argv) -> tuple[int, str]:
    code = main([str(a) for a in argv])
    return code, capsys.readouterr().err


def _image(path: Path, side: int = 48, seed: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    rgb = data.astronaut()[::4, ::4][seed:seed + side, :side]
    assert cv2.imwrite(str(path), np.ascontiguousarray(rgb[:, :, ::-1]))
    return path


@pytest.fixture(scope="module")
def srcnn_onnx(session_cache) -> Path:
    """The cached srcnn export (with its folded-x*.onnx siblings), made once for the test session."""
    return onnx_for("srcnn")


# -- a backend accepted that cannot run ----------------------------------------------------------------------

def test_ort_folded_without_its_siblings_is_refused_up_front(srcnn_onnx, tmp_path, capsys):
    lone = tmp_path / "lone"
    lone.mkdir()
    shutil.copy(srcnn_onnx, lone / "srcnn.onnx")  # without folded-x*.onnx
    img = _image(tmp_path / "in" / "a.png")
    out = tmp_path / "out"
    code, err = _run(capsys, "sr", img.parent, out, "--onnx", lone / "srcnn.onnx", "--backend", "ort-folded")
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: ort-folded cannot run: ")
    assert "missing" in err and not out.exists()
    # the same knowledge `backends` reports
    code = main(["backends", "--onnx", str(lone / "srcnn.onnx")])
    assert code == 0 and "folded variants named in srcnn.onnx are missing" in capsys.readouterr().out


# -- writable outputs checked before any work ----------------------------------------------------------------

def test_unwritable_output_summary_and_cache_are_one_line_before_any_work(srcnn_onnx, tmp_path, capsys,
                                                                          monkeypatch):
    img = _image(tmp_path / "in" / "a.png")
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    cases = [
        (["sr", img.parent, blocker / "out", "--onnx", srcnn_onnx], f"OUTPUT {blocker / 'out'} is inside {blocker}"),
        (["sr", img, blocker / "out.png", "--onnx", srcnn_onnx], f"OUTPUT {blocker / 'out.png'}: its folder is a file"),
        (["sr", img.parent, tmp_path / "o1", "--onnx", srcnn_onnx, "--summary", blocker / "s.json"],
         f"--summary {blocker / 's.json'}: its folder is a file"),
        (["sr", img.parent, blocker / "out", "--onnx", srcnn_onnx, "--ray"],  # before any cluster starts
         f"OUTPUT {blocker / 'out'} is inside {blocker}"),
    ]
    for argv, expected in cases:
        code, err = _run(capsys, *argv)
        assert code == 2 and err.count("\n") == 1 and expected in err, err  # no first line: the backend never loaded
    assert not (tmp_path / "o1").exists()
    monkeypatch.setenv("SRDEPLOY_CACHE", str(blocker / "cache"))
    code, err = _run(capsys, "sr", img.parent, tmp_path / "o2", "--backend", "ort")
    assert code == 2 and err.count("\n") == 1 and f"SRDEPLOY_CACHE={blocker / 'cache'}" in err, err
    assert not (tmp_path / "o2").exists()


# -- checks that come late -----------------------------------------------------------------------------------

@pytest.mark.parametrize("flag", ["--backend", "--model"])
def test_demo_checks_model_and_backend_before_writing(flag, tmp_path, capsys):
    code, err = _run(capsys, "demo", "--output", tmp_path / "o", flag, "nope", "--no-bench", "--no-compare")
    assert code == 2 and err.count("\n") == 1 and "'nope'" in err
    assert not (tmp_path / "o").exists()


def test_doctor_refuses_an_unknown_model(tmp_path, capsys):
    code, err = _run(capsys, "doctor", "--model", "nope", "--no-engines", "--output", tmp_path / "d")
    assert code == 2 and err == f"error: unknown model 'nope' (known: all, {', '.join(MODELS)})\n"
    assert not (tmp_path / "d").exists()


# -- slow steps say so; the first line is short; the done line; overwrites; plain progress -------------------

def test_first_run_says_it_exports_and_reports_rate_setup_and_overwrites(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SRDEPLOY_CACHE", str(tmp_path / "fresh-cache"))
    monkeypatch.setattr(sr_console, "PLAIN_EVERY_S", 0.0)  # a progress line at every image (stderr is no terminal)
    src = tmp_path / "in"
    for i in range(3):
        _image(src / f"{i}.png", seed=i)
    out = tmp_path / "out"
    code, err = _run(capsys, "sr", src, out, "--backend", "ort")
    lines = err.splitlines()
    assert code == 0 and lines[0] == f"sr: srcnn x3 on ort (requested); 3 images -> {out}"  # first, always
    assert lines[1].startswith("exporting srcnn ") and "once" in lines[1]  # then what choosing it said, in order
    setup = [i for i, ln in enumerate(lines) if ln.startswith("progress: measuring what the model adds over bicubic")]
    first_image = next(i for i, ln in enumerate(lines) if ln[:7] in ("0.png: ", "1.png: ", "2.png: "))
    assert setup and min(setup) > 1 and max(setup) < first_image  # the fp32 baseline, measured after the export
    assert "\r" not in err and any(ln.startswith("progress: ") for ln in lines[first_image:])
    done = next(ln for ln in lines if ln.startswith("done: "))
    assert "over the whole run (setup " in done and "then " in done
    assert not [ln for ln in lines if "overwrites" in ln]  # a fresh folder
    # rerun into the same folder: the first line counts what it will overwrite; --verbose has the rest
    code, err = _run(capsys, "sr", src, out, "--backend", "ort", "--verbose")
    lines = err.splitlines()
    assert code == 0 and lines[0].endswith("; overwrites 3 existing outputs (--skip-existing keeps them)")
    assert lines[0].count("(") <= 2 and len(lines[0].split(";")[0]) < 80
    assert lines[1].startswith("backend: ort (CPUExecutionProvider") and "why: requested: ort" in lines[1]
    code, err = _run(capsys, "sr", src, out, "--backend", "ort", "--skip-existing", "--quiet")
    assert code == 0 and "overwrites" not in err


def test_auto_first_line_gives_the_reason_in_a_few_words(srcnn_onnx, tmp_path, capsys):
    img = _image(tmp_path / "a.png")
    code, err = _run(capsys, "sr", img, tmp_path / "o.png", "--onnx", srcnn_onnx, "--quiet")
    first = err.splitlines()[0]
    assert code == 0 and first.startswith("sr: srcnn x3 on ort-folded (auto: expected fastest ")
    assert len(first) < 160 and "`" not in first


def test_scale_note_comes_from_a_files_metadata():
    meta = {"model": "x", "architecture": "Compact", "native_scale": "4"}
    assert sr_console.scale_note(meta, 3) == "Compact runs at x4, then resizes to x3"
    assert sr_console.scale_note(meta, 4.0) == "Compact runs at its own x4"
    assert sr_console.scale_note({"model": "srcnn"}, 3) == ""


def test_long_tiled_image_reports_its_tiles(srcnn_onnx, tmp_path, monkeypatch):
    monkeypatch.setattr(sr_console, "TILE_EVERY_S", 0.0)
    img = _image(tmp_path / "big.png", side=96)
    lines: list[str] = []
    s = upscale(img, tmp_path / "o.png", onnx=srcnn_onnx, backend="ort", tile=24, log=lines.append)
    tiles = s.records[0].tiles
    assert tiles > 2 and [ln for ln in lines if ln.startswith("big.png: ") and " tiles in " in ln][-1].startswith(
        f"big.png: {tiles - 1}/{tiles} tiles")


def test_plain_progress_lines_not_carriage_returns():
    lines: list[str] = []
    bar = sr_console.PlainProgress(3, lines.append, every_s=0.0)
    bar.set_postfix_str("1.00 MPix/s")
    for _ in range(3):
        bar.update(1)
    assert lines == [f"progress: {n}/3 image(s) in 0 s, 1.00 MPix/s" for n in (1, 2)]  # the done line says 3/3


def test_eval_reports_progress(capsys):
    from pipeline.analysis.evaluate import evaluate

    lines: list[str] = []
    images = {"astronaut": data.astronaut()[:48, :48], "coffee": data.coffee()[:48, :48]}
    evaluate("srcnn", [2.0, 3.0], images=images, progress=lines.append)
    assert lines == [f"eval srcnn x{s}: {n} ({i}/2)" for s in (2, 3) for i, n in enumerate(images, 1)]


@pytest.mark.parametrize("stage", ["export", "models", "eval", "sr", "backends", "engine", "triton", "doctor", "demo"])
def test_help_does_not_import_pytorch(stage):
    code = ("import sys\nfrom pipeline.cli import main\n"
            f"try:\n    main(['{stage}', '--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('torch', 'spandrel') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=120)
    assert proc.returncode == 0 and "usage:" in proc.stdout and proc.stdout.strip().endswith("[]"), proc.stdout[-300:]


# -- interrupted runs ----------------------------------------------------------------------------------------

def test_interrupted_run_writes_summary_and_says_how_to_resume(srcnn_onnx, tmp_path):
    from pipeline.backends import create

    src = tmp_path / "in"
    for i in range(6):
        _image(src / f"{i}.png", seed=i)
    backend = create("ort", None, onnx=srcnn_onnx)
    real, calls = backend.infer, []

    def infer(batch, scale):  # Ctrl-C arrives during the fourth image's inference
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return real(batch, scale)

    backend.infer = infer
    lines: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        upscale(src, tmp_path / "out", backend=backend, summary=tmp_path / "s.json", workers=1, log=lines.append)
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["interrupted"] is True and s["counts"]["ok"] == 3 and s["counts"]["not_done"] == 3
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["0.png", "1.png", "2.png"]
    assert lines[-1].startswith("interrupted: 3 file(s) written (complete), 3 not done")
    assert "--skip-existing" in lines[-1]


# -- checkpoint messages -------------------------------------------------------------------------------------

class _RunsCode:
    def __reduce__(self):
        return (print, ("unpickled",))


def test_unsafe_pickle_is_our_line_alone(tmp_path):
    evil = tmp_path / "evil.pth"
    with open(evil, "wb") as f:
        pickle.dump({"w": _RunsCode()}, f, protocol=4)  # protocol 4: torch's unpickler warns about it
    proc = subprocess.run([sys.executable, "-m", "pipeline", "models", "--model", str(evil)], capture_output=True,
                          text=True, env=_env(), timeout=120, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith(f"error: refusing {evil}: ")
    assert proc.stderr.count("\n") == 1 and "Warning" not in proc.stderr and "unpickled" not in proc.stdout


def test_truncated_checkpoint_is_one_message_for_model_and_weights(tmp_path, capsys):
    import torch

    from models.lookup import get_spec

    good = tmp_path / "good.pth"
    torch.save(get_spec("srcnn").build().state_dict(), good)
    trunc = tmp_path / "trunc.pth"
    trunc.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    msg = f"error: {trunc} is truncated or corrupt (an incomplete PyTorch checkpoint); save or copy it again\n"
    img = _image(tmp_path / "a.png")
    assert _run(capsys, "models", "--model", trunc) == (2, msg)
    assert _run(capsys, "sr", img, tmp_path / "o", "--backend", "torch", "--weights", trunc) == (2, msg)


# -- srdeploy and python -m pipeline import a factory from the current folder alike ------------------------

def test_console_script_imports_a_factory_from_the_current_folder(tmp_path):
    pkg = tmp_path / "work" / "mypkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "mynet.py").write_text(
        "from torch import nn\n\n\ndef factory():\n"
        "    return nn.Sequential(nn.Conv2d(3, 12, 3, padding=1), nn.PixelShuffle(2)), 2\n")
    script = tmp_path / "bin" / "srdeploy"  # what pip writes for [project.scripts]: its own folder on sys.path
    script.parent.mkdir()
    script.write_text("import sys\nfrom pipeline.cli import main\nsys.exit(main())\n")
    argv = ["models", "--model", "mypkg.mynet:factory"]
    for cmd in ([sys.executable, str(script), *argv], [sys.executable, "-m", "pipeline", *argv]):
        proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=180, cwd=pkg.parent)
        assert proc.returncode == 0 and "mypkg.mynet:factory: factory:Sequential x2" in proc.stdout, proc.stderr[-500:]
    proc = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, env=_env(),
                          timeout=60, cwd=pkg.parent)
    assert proc.stdout.startswith("usage: srdeploy ") and "python -m pipeline" not in proc.stdout


# -- README claims -------------------------------------------------------------------------------------------

def test_bench_onnx_report_has_a_png_plot(tmp_path):
    from pipeline import report
    from pipeline.bench import onnx_file

    lat = {"median": 2.0, "min": 1.5, "p90": 2.5, "mean": 2.0, "p99": 2.6, "max": 2.7}
    doc = {"model": "srcnn", "onnx": "f.onnx", "precision": "fp32", "skipped": [],
           "environment": report.environment(),
           "startup": {"size": 64, "scale": 3, "median_s": 0.5, "runs": 1, "walls_s": [0.5]},
           "rows": [{"sweep": sw, "backend": "ort", "size": n, "scale": 3.0, "latency_ms": lat}
                    for sw, n in (("main", 64), ("size", 128))]}
    paths = onnx_file.write(doc, tmp_path)
    assert (tmp_path / "latency_vs_size.png").stat().st_size > 0
    md = paths["md"].read_text()
    assert "latency_vs_size.png" in md and md.index("CPU") < md.index("| sweep |")


def test_report_folder_flag_refuses_a_file_name(tmp_path, capsys):
    code, err = _run(capsys, "compare", "--output", tmp_path / "x" / "cmp.md")
    assert code == 2 and "names a md file; give a folder" in err and not (tmp_path / "x").exists()


def test_help_texts_tell_the_truth(capsys):
    for stage, needle in (("sr", "checkpoint file or package.module:factory"), ("engine", "--onnx-dir DIR")):
        with pytest.raises(SystemExit):
            main([stage, "--help"])
        assert needle in " ".join(capsys.readouterr().out.split())
    proc = subprocess.run([sys.executable, "scripts/train.py", "--help"], capture_output=True, text=True, cwd=ROOT,
                          env=_env(), timeout=120)
    assert "default: outputs/weights" in " ".join(proc.stdout.split())


def test_no_driver_names_libcuda_once():
    from pipeline.native.cuda_driver import driver

    d = driver()
    if not d.problem.startswith("no NVIDIA driver"):
        pytest.skip("libcuda loads here")
    assert d.problem.count("libcuda.so.1") == 1, d.problem


def test_image_extensions_are_listed_one_way(tmp_path):
    from pipeline.errors import PipelineError
    from pipeline.sr.runner.jobs import known_extensions

    assert known_extensions().startswith(imageio.extensions_text() + "; videos .mp4")

    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.txt").write_text("x")
    for src in (tmp_path / "empty", tmp_path / "notes.txt"):
        with pytest.raises(PipelineError) as e:
            upscale(src, tmp_path / "o", onnx=None, backend="ort")
        assert f"(extensions: {known_extensions()})" in str(e.value)
