"""Issue 43 item 3: each executor declares the options it takes; the run's plan refuses the others before any
work, the same from Python as from the CLI (which keeps no list of its own)."""
from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from pipeline.cli import main
from pipeline.cluster.runner import RayExecutor
from pipeline.errors import PipelineError
from pipeline.serve.client import TritonExecutor
from pipeline.sr import OPTION_FIELDS, RunOptions, option_flag, run
from pipeline.sr.flow import plan
from pipeline.sr.local import LocalExecutor

NO_SERVER = "http://127.0.0.1:9"  # never contacted: every refusal comes before the executor starts


@pytest.fixture()
def src(tmp_path) -> Path:
    folder = tmp_path / "in"
    folder.mkdir()
    assert cv2.imwrite(str(folder / "a.png"), np.random.default_rng(0).integers(0, 255, (16, 16, 3), np.uint8))
    return folder


def _triton(opts: RunOptions) -> TritonExecutor:
    return TritonExecutor(opts, NO_SERVER, "sr", 2)


def test_every_declaration_names_real_fields():
    for cls in (LocalExecutor, RayExecutor, TritonExecutor):
        assert cls.takes <= OPTION_FIELDS, (cls.name, cls.takes - OPTION_FIELDS)
        assert {"input", "output", "summary", "skip_existing", "log"} <= cls.takes, cls.name
    assert LocalExecutor.takes == OPTION_FIELDS and LocalExecutor.flags == ()
    assert option_flag("tile_overlap") == "--tile-overlap" and option_flag("fmt") == "--format"


def test_triton_from_python_refuses_tile_before_any_server(src, tmp_path):
    opts = RunOptions(src, tmp_path / "out", tile=64)
    executor = _triton(opts)
    with pytest.raises(PipelineError) as e:
        run(opts, executor)
    assert str(e.value) == ("--tile applies only to local runs; with --triton the served model decides, and "
                            "--concurrency the threads here")
    assert executor.clients == [] and not (tmp_path / "out").exists()


@pytest.mark.parametrize(("given", "named"), [
    ({"threads": 1, "tile": 64}, "--threads, --tile apply only to local runs;"),
    ({"backend": "ort"}, "--backend applies only to local runs;"),
    ({"precision": "fp16"}, "--precision applies only to local runs;"),
    ({"batch": 2}, "--batch applies only to local runs;"),
    ({"tile_overlap": 4, "workers": 3}, "--tile-overlap, --workers apply only to local runs;"),
    ({"reference": "hr"}, "--reference applies only to local runs;"),
])
def test_triton_refuses_what_the_served_model_decides(src, tmp_path, given, named):
    opts = RunOptions(src, tmp_path / "out", **given)
    with pytest.raises(PipelineError, match="^" + named):
        plan(opts, _triton(opts))


def test_triton_takes_what_this_process_does(src, tmp_path):
    opts = RunOptions(src, tmp_path / "out", model="srcnn", scale=3, fmt="jpg", jpeg_quality=80, skip_existing=True,
                      summary=tmp_path / "s.json", progress=False, verbose=True, codec="ffv1", crf=None,
                      audio="drop", log=lambda _line: None)
    p = plan(opts, _triton(opts))
    assert p.model is None and [r.job.rel for r in p.todo] == ["a.png"] and p.fmt == "jpg"


def test_ray_refuses_workers_before_the_cluster_starts(src, tmp_path):
    opts = RunOptions(src, tmp_path / "out", workers=2)
    executor = RayExecutor(opts, "local", None)
    with pytest.raises(PipelineError) as e:
        run(opts, executor)
    assert str(e.value) == ("--workers applies only to local runs; with --ray each actor reads and writes one image "
                            "at a time")
    assert executor.cluster is None and not (tmp_path / "out").exists()


def test_ray_refuses_a_loaded_backend_before_the_cluster_starts(src, tmp_path):
    from pipeline import backends

    opts = RunOptions(src, tmp_path / "out", backend=backends.create("ort", "srcnn", threads=1))
    executor = RayExecutor(opts, "local", None)
    with pytest.raises(PipelineError, match="cannot be sent to them; give its name"):
        run(opts, executor)
    assert executor.cluster is None and not (tmp_path / "out").exists()


def test_ray_takes_the_local_options(src, tmp_path):
    (tmp_path / "hr").mkdir()
    opts = RunOptions(src, tmp_path / "out", model="srcnn", threads=1, tile=8, tile_overlap=2, batch=2,
                      reference=tmp_path / "hr", jpeg_quality=90, codec="h264", crf=20, segment_seconds=5.0)
    p = plan(opts, RayExecutor(opts, "local", 2))
    assert p.model.name == "srcnn" and [r.job.rel for r in p.todo] == ["a.png"]


def test_onnx_and_engine_together_from_python(src, tmp_path):
    opts = RunOptions(src, tmp_path / "out", onnx=tmp_path / "m.onnx", engine=tmp_path / "m.engine")
    with pytest.raises(PipelineError, match="^--onnx and --engine both name the model file to run"):
        run(opts, LocalExecutor(opts))


def _cli(capsys, *argv) -> tuple[int, str]:
    code = main([str(a) for a in argv])
    return code, capsys.readouterr().err


def test_cli_refuses_from_the_same_declarations(src, tmp_path, capsys):
    out = tmp_path / "out"
    code, err = _cli(capsys, "sr", src, out, "--triton", NO_SERVER, "--workers", "2")
    assert code == 2 and err.startswith("error: --workers applies only to local runs; with --triton")
    code, err = _cli(capsys, "sr", src, out, "--ray", "--workers", "2")
    assert code == 2 and err == ("error: --workers applies only to local runs; with --ray each actor reads and "
                                 "writes one image at a time\n")
    code, err = _cli(capsys, "sr", src, out, "--triton-model", "sr2")
    assert code == 2 and err == "error: --triton-model applies only to --triton runs\n"
    code, err = _cli(capsys, "sr", src, out, "--ray-actors", "2")
    assert code == 2 and err == "error: --ray-actors applies only to --ray runs\n"
    code, err = _cli(capsys, "sr", src, out, "--triton", NO_SERVER, "--ray-actors", "2")
    assert code == 2 and err == "error: --ray-actors applies only to --ray runs\n"
    code, err = _cli(capsys, "sr", src, out, "--triton", NO_SERVER, "--ray=local")
    assert code == 2 and err == "error: --ray and --triton both say where the run executes: give one of them\n"
    assert not out.exists()
