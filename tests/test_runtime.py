"""The deploy runtime without PyTorch: an exported file carries everything `sr` and `backends` need.

Each command runs in a fresh interpreter where importing torch (and torchvision, onnxscript) fails, as on a
server with only the runtime dependencies installed."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from pipeline import backends
from pipeline.artifacts.onnx_file import folded_variants, onnx_metadata
from pipeline.artifacts.reference import read_reference
from pipeline.errors import PipelineError

pytest.importorskip("onnxscript", reason="these tests export with torch.onnx, which needs onnxscript (export extra)")
from pipeline.export.core import export_model  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
# Runs `python -m pipeline ARGS` with the export-time packages unimportable; proves it first.
NO_TORCH = """
import runpy, sys
for name in ("torch", "torchvision", "onnxscript"):
    sys.modules[name] = None
try:
    import torch  # noqa: F401
except ImportError:
    pass
else:
    raise SystemExit("torch is importable: the blocker failed")
sys.argv = ["pipeline", *sys.argv[1:]]
runpy.run_module("pipeline", run_name="__main__", alter_sys=True)
"""


def run_without_torch(*args: str, cache: Path) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "SRDEPLOY_CACHE": str(cache), "HOME": str(cache)}
    return subprocess.run([sys.executable, "-c", NO_TORCH, *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """srcnn-x3 and srcnn exported with their siblings (folded variants, reference outputs)."""
    out = tmp_path_factory.mktemp("onnx")
    return {name: export_model(name, out / f"{name}.onnx", verify=False).path for name in ("srcnn-x3", "srcnn")}


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    import cv2

    path = tmp_path_factory.mktemp("img") / "one.png"
    cv2.imwrite(str(path), (np.random.default_rng(0).random((40, 36, 3)) * 255).astype(np.uint8))
    return path


def test_export_writes_what_the_runtime_needs(exported):
    meta = onnx_metadata(exported["srcnn"])
    assert meta["model"] == "srcnn" and meta["dynamic_scale"] == "1" and meta["receptive_radius"] == "6"
    assert (meta["scale_min"], meta["scale_max"], meta["default_scale"]) == ("1", "8", "3")
    assert sorted(folded_variants(exported["srcnn"])) == [2, 3, 4]
    assert list(folded_variants(exported["srcnn-x3"])) == [3]
    ref = read_reference(exported["srcnn"])
    assert ref.scale == 3.0 and set(ref.inputs) == set(ref.outputs)
    for name, x in ref.inputs.items():
        assert ref.outputs[name].shape == (1, 3, x.shape[2] * 3, x.shape[3] * 3)


@pytest.mark.parametrize("backend", ["auto", "ort", "ort-folded"])
def test_sr_from_onnx_without_torch(exported, image, tmp_path, backend):
    out = tmp_path / "out.png"
    proc = run_without_torch("sr", str(image), str(out), "--model", "srcnn-x3", "--onnx", str(exported["srcnn-x3"]),
                             "--backend", backend, "--quiet", cache=tmp_path / "cache")
    assert proc.returncode == 0, proc.stderr[-2000:]
    import cv2

    assert cv2.imread(str(out)).shape == (120, 108, 3)
    assert not (tmp_path / "cache" / "onnx").exists()  # nothing was exported


def test_backends_from_onnx_without_torch(exported, tmp_path):
    proc = run_without_torch("backends", "--onnx", str(exported["srcnn"]), cache=tmp_path / "cache")
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {line.split()[0]: line.split()[1] for line in proc.stdout.splitlines()[2:] if line and line[0] != "-"}
    assert rows["ort"] == "yes" and rows["ort-folded"] == "yes" and rows["torch"] == "no"
    assert "--backend auto -> ort-folded" in proc.stdout


def test_compare_and_bench_from_onnx_without_torch(exported, tmp_path):
    """compare checks every backend against the PyTorch outputs stored at export time; bench times them and the
    start-up, all in a process where torch cannot be imported."""
    import json

    onnx = str(exported["srcnn-x3"])
    proc = run_without_torch("compare", "--onnx", onnx, "--output", str(tmp_path / "cmp"), cache=tmp_path / "cache")
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {r["backend"]: r for r in json.loads((tmp_path / "cmp" / "report.json").read_text())["models"][0]["rows"]}
    assert rows["ort"]["status"] == rows["ort-folded"]["status"] == "pass" and rows["torch"]["status"] == "unavailable"
    assert rows["ort-folded"]["max_abs"] < 1e-4
    proc = run_without_torch("bench", "--onnx", onnx, "--quick", "--sizes", "32", "--iters", "2", "--output",
                             str(tmp_path / "bench"), cache=tmp_path / "cache")
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads((tmp_path / "bench" / "report.json").read_text())
    assert {r["backend"] for r in doc["rows"]} >= {"ort", "ort-folded"} and doc["startup"]["median_s"] > 0
    assert "startup" in (tmp_path / "bench" / "report.md").read_text()


def test_unregistered_model_runs_from_its_metadata(exported, tmp_path):
    """A file of a model this install does not register: the spec comes from the file."""
    src = exported["srcnn"]
    proto = onnx.load(str(src))
    for p in proto.metadata_props:
        if p.key == "model":
            p.value = "my-srcnn"
        if p.key == "scale_max":
            p.value = "4"
    path = tmp_path / "mine.onnx"
    onnx.save(proto, str(path))
    for f in folded_variants(src).values():
        shutil.copy(f, tmp_path / f.name.replace("srcnn.", "mine."))
    b = backends.create("ort", None, onnx=path)
    assert b.model_name == "my-srcnn" and b.spec.scale_range == (1.0, 4.0) and b.spec.dynamic_scale
    x = np.random.default_rng(1).random((1, 3, 10, 12), dtype=np.float32)
    assert b.infer(x, 2.5).shape == (1, 3, 25, 30)
    with pytest.raises(PipelineError, match="out of range"):
        b.infer(x, 6)
    with pytest.raises(PipelineError, match="exported for model 'my-srcnn', not 'srcnn'"):
        backends.create("ort", "srcnn", onnx=path)


def test_folded_from_file_matches_plain_graph(exported):
    x = np.random.default_rng(2).random((1, 3, 24, 20), dtype=np.float32)
    folded = backends.create("ort-folded", None, onnx=exported["srcnn"])
    plain = backends.create("ort", None, onnx=exported["srcnn"])
    for scale in (2, 3, 4, 2.5):
        y = folded.infer(x, scale)
        assert folded.last_path == (f"folded x{scale}" if scale != 2.5 else "plain graph")
        assert np.abs(y - plain.infer(x, scale)).max() < 1e-4


def test_missing_cpu_kernel_library_is_one_line_not_an_abort(exported, tmp_path, image):
    """It used to terminate the process (exit 134) from inside ONNX Runtime."""
    env_lib = str(tmp_path / "absent.so")
    proc = subprocess.run([sys.executable, "-m", "pipeline", "sr", str(image), str(tmp_path / "o.png"), "--onnx",
                           str(exported["srcnn"]), "--model", "srcnn", "--backend", "ort-sr-kernels"], cwd=REPO,
                          env={"PATH": "/usr/bin:/bin", "SR_KERNELS_CPU_LIB": env_lib,
                               "SRDEPLOY_CACHE": str(tmp_path / "cache")}, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "absent.so" in lines[0] and "Traceback" not in proc.stderr


def test_time_to_first_image_runs_the_cli_in_fresh_processes(exported):
    """The bench row's mechanics (no speed assertion here: the goal is checked by `make bench`)."""
    from pipeline.bench.startup import time_to_first_image

    row = time_to_first_image(exported["srcnn-x3"], size=24, scale=3, runs=2)
    assert row["model"] == "srcnn-x3" and len(row["walls_s"]) == 2 and row["min_s"] <= row["median_s"] <= row["max_s"]
    assert "--onnx" in row["command"] and row["median_s"] > 0
    with pytest.raises(PipelineError, match="startup run failed"):
        time_to_first_image(exported["srcnn-x3"], size=24, scale=2, runs=1)  # x2 is out of range for srcnn-x3


def test_engine_sidecar_carries_the_model(tmp_path, exported):
    """An engine's sidecar keeps its ONNX file's metadata, so the model of `--engine FILE` needs no registry."""
    import json

    from pipeline.artifacts.identity import resolve
    from pipeline.engine.sidecar import sidecar_path

    engine = tmp_path / "m.engine"
    engine.write_bytes(b"not read here")
    meta = {**onnx_metadata(exported["srcnn"]), "model": "my-srcnn", "scale_max": "4"}
    sidecar_path(engine).write_text(json.dumps({"model": "my-srcnn", "onnx_metadata": meta}))
    spec = resolve(engine=engine)
    assert spec.name == "my-srcnn" and spec.scale_range == (1.0, 4.0) and spec.receptive_radius == 6
    with pytest.raises(PipelineError, match="built for model 'my-srcnn', not 'srcnn'"):
        resolve("srcnn", engine=engine)
    st = {s.name: s for s in backends.available(None, engine=engine)}
    assert not st["ort"].available and "TensorRT only" in st["ort"].reason and not st["torch"].available
