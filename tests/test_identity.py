"""One answer to "which model is this?" (pipeline.artifacts.identity.resolve), the declared Backend seam, and the
import layers (pyproject [tool.importlinter]), each checked the way a user or a new backend meets it."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from models.spec import MODELS, ModelSpec, output_size
from pipeline import backends
from pipeline.artifacts.identity import resolve
from pipeline.backends import registry
from pipeline.backends.base import Backend, BackendStatus
from pipeline.backends.checks import check_batch
from pipeline.backends.descriptor import Descriptor, Runs
from pipeline.cli import main
from pipeline.errors import PipelineError
from pipeline.sr import upscale

REPO = Path(__file__).resolve().parents[1]
# Run a command with PyTorch made unimportable (any `import torch` raises ImportError).
NO_TORCH = "import sys; sys.modules['torch'] = None\n"


def _onnx_file(path: Path, meta: dict[str, str]) -> Path:
    """A small valid ONNX file with the I/O our exports have and the given metadata (only the metadata and I/O
    are read by what is tested here)."""
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, "H", "W"])
    size = helper.make_tensor_value_info("size", TensorProto.INT64, [2])
    y = helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 3, "H", "W"])
    graph = helper.make_graph([helper.make_node("Identity", ["input"], ["output"])], "g", [x, size], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=10)
    helper.set_model_props(model, {**meta, "precision": "fp32", "ops": "custom"})
    onnx.save(model, str(path))
    return path


@pytest.fixture
def my_onnx(tmp_path) -> Path:
    """A file of a model this install does not register: everything about it is in its metadata."""
    return _onnx_file(tmp_path / "my.onnx", {**MODELS["srcnn"].to_metadata(), "model": "my-srcnn", "scale_max": "4"})


def _run(code: str, *, blocked: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", (NO_TORCH if blocked else "") + code], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


# -- the resolver ----------------------------------------------------------------------------------------
def test_resolve_names_files_and_mismatches(tmp_path, my_onnx):
    assert resolve("srcnn") is MODELS["srcnn"]
    spec = resolve(onnx=my_onnx)
    assert spec.name == "my-srcnn" and spec.scale_range == (1.0, 4.0) and not spec.registered
    assert resolve("my-srcnn", onnx=my_onnx) == spec
    x3 = _onnx_file(tmp_path / "x3.onnx", MODELS["srcnn-x3"].to_metadata())
    assert resolve(onnx=x3) is MODELS["srcnn-x3"]  # a registered name: the registered spec
    for call, msg in ((lambda: resolve(), "no model given"),
                      (lambda: resolve("nope"), "unknown model 'nope'"),
                      (lambda: resolve("srcnn", onnx=my_onnx), "exported for model 'my-srcnn', not 'srcnn'"),
                      (lambda: resolve("srcnn", weights=tmp_path / "none.pt"), "weights file not found"),
                      (lambda: resolve(onnx=_onnx_file(tmp_path / "bare.onnx", {})), "does not say which model")):
        with pytest.raises(PipelineError, match=msg) as e:
            call()
        assert len(str(e.value).splitlines()) == 1


def test_engine_sidecar_names_the_model(tmp_path, my_onnx):
    engine = tmp_path / "m.engine"
    engine.write_bytes(b"not read")
    with pytest.raises(PipelineError, match=r"m.engine.json is missing"):
        resolve("srcnn", engine=engine)  # a file a user gave: its sidecar must say what it is
    Path(str(engine) + ".json").write_text(json.dumps({"model": "?"}))
    with pytest.raises(PipelineError, match="does not name its model"):
        resolve(engine=engine)
    assert resolve("srcnn", engine=engine) is MODELS["srcnn"]  # a sidecar without the model: --model says
    meta = {p.key: p.value for p in onnx.load(str(my_onnx)).metadata_props}
    Path(str(engine) + ".json").write_text(json.dumps({"model": "my-srcnn", "onnx_metadata": meta}))
    assert resolve(engine=engine).name == "my-srcnn"
    with pytest.raises(PipelineError, match="built for model 'my-srcnn', not 'srcnn'"):
        resolve("srcnn", engine=engine)


def test_explicit_model_that_disagrees_with_the_file_is_an_error(my_onnx, capsys):
    """`--model srcnn --onnx other.onnx` used to be read as "no --model" (srcnn was the default) and ignored."""
    assert main(["backends", "--model", "srcnn", "--onnx", str(my_onnx)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "exported for model 'my-srcnn', not 'srcnn'" in err
    assert len(err.splitlines()) == 1


def test_triton_ort_from_the_file_alone_without_pytorch(tmp_path, my_onnx):
    """`triton --onnx F --backend ort` for a model this install does not register, PyTorch unimportable: the model
    and the card come from the file (it failed with "unknown model 'my-srcnn'")."""
    repo = tmp_path / "repo"
    r = _run("from pipeline.cli import main\n"
             f"rc = main(['triton', '--onnx', {str(my_onnx)!r}, '--backend', 'ort', '--output', {str(repo)!r}])\n"
             "assert 'torch' not in sys.modules or sys.modules['torch'] is None\n"
             "sys.exit(rc)")
    assert r.returncode == 0, r.stderr
    config = (repo / "my-srcnn" / "config.pbtxt").read_text()
    assert 'backend: "onnxruntime"' in config and '"my-srcnn"' in config
    assert (repo / "my-srcnn" / "1" / "model.onnx").read_bytes() == my_onnx.read_bytes()


def test_engine_plans_from_the_file_alone_without_pytorch(tmp_path):
    """`engine --onnx F` takes the model and its scale contract from F's metadata: with PyTorch unimportable and
    the user's checkpoint the file was exported from gone, the build plan (profiles) is still made. (It imported
    torch and reloaded the checkpoint by its stored path.) Building itself needs a GPU and TensorRT."""
    gone = str(tmp_path / "gone" / "my.pth")
    meta = {**MODELS["srcnn"].to_metadata(), "model": gone, "scale_min": "1", "scale_max": "4",
            "architecture": "Compact", "source": gone}
    f = _onnx_file(tmp_path / "user.onnx", meta)
    r = _run("import argparse\nfrom pipeline.cli import engine\n"
             "p = argparse.ArgumentParser(); engine.add_arguments(p)\n"
             f"args = p.parse_args(['--onnx', {str(f)!r}, '--output', {str(tmp_path / 'u.engine')!r}])\n"
             "[(onnx_file, out, precision, profiles)] = engine.plan(args)\n"
             "print(profiles[0].scale, profiles[0].height)\n"
             "from pipeline.engine import tensorrt_problem\n"
             "print(tensorrt_problem() or 'ready')\n")
    assert r.returncode == 0, r.stderr
    scale_line, env_line = r.stdout.strip().splitlines()
    assert scale_line.startswith("(2.0, 3.0, 4.0)")
    assert "PyTorch" not in env_line  # the one GPU probe is the CUDA driver's, not torch.cuda
    # The whole command on this machine: one line, exit 2 when there is no GPU/TensorRT, exit 0 where there is.
    cli = _run("from pipeline.cli import main\n"
               f"sys.exit(main(['engine', '--onnx', {str(f)!r}, '--output', {str(tmp_path / 'u.engine')!r}]))")
    if env_line != "ready":
        assert cli.returncode == 2 and cli.stderr.startswith("error: TensorRT engines need") and "Traceback" \
            not in cli.stderr


# -- the declared Backend seam ---------------------------------------------------------------------------
@dataclass(frozen=True)
class NearestOptions:
    onnx: object = None
    weights: object = None


class NearestBackend(Backend):
    """A backend written only against the base class: nearest-neighbour upscaling in numpy."""

    DESCRIPTOR = Descriptor("nearest", "cpu", runs=(Runs("fp32", "weights"),), options=NearestOptions,
                            summary="nearest-neighbour upscaling in numpy")

    def __init__(self, model, precision="fp32", *, onnx=None, weights=None):
        self.spec = resolve(model, onnx)
        self.model_name = self.spec.name
        self.precision = precision

    @classmethod
    def status(cls, spec: ModelSpec, precision: str, *, onnx=None, engine=None, weights=None) -> BackendStatus:
        return cls.no("engines are TensorRT's") if engine is not None else cls.ok("numpy, any model")

    def load(self) -> NearestBackend:
        return self

    def infer(self, batch: np.ndarray, scale: float) -> np.ndarray:
        s = check_batch(batch, self.spec, scale, self.name)
        rows = np.minimum((np.arange(s.out_h) / scale).astype(int), s.h - 1)
        cols = np.minimum((np.arange(s.out_w) / scale).astype(int), s.w - 1)
        return batch[:, :, rows][:, :, :, cols]


def test_a_backend_written_to_the_base_class_works(tmp_path, monkeypatch):
    """availability passes `weights` to status, auto and sr read only declared fields (a TypeError and attribute
    probes before)."""
    monkeypatch.setitem(registry.CLASSES, NearestBackend.name, NearestBackend)
    st = {s.name: s for s in backends.available("srcnn")}
    assert st["nearest"].available and st["nearest"].reason == "numpy, any model"
    only = [s for s in st.values() if s.name == "nearest"]
    assert backends.pick_auto("srcnn", statuses=only).name == "nearest"
    b = backends.create_named("nearest", "srcnn")
    assert b.selection_reason == "requested: nearest" and b.profiles is None and b.max_input_size() is None
    assert b.onnx_file is None and b.describe() == "nearest (cpu, fp32)"
    img = tmp_path / "in" / "a.png"
    img.parent.mkdir()
    import cv2

    cv2.imwrite(str(img), np.random.default_rng(0).integers(0, 255, (20, 30, 3), dtype=np.uint8))
    summary = upscale(img.parent, tmp_path / "out", model="srcnn", scale=2, backend="nearest", progress=False)
    assert not summary.failed and summary.backend_choice == "requested: nearest"
    out = cv2.imread(str(tmp_path / "out" / "a.png"))
    assert out.shape[:2] == output_size(20, 30, 2)
    assert np.array_equal(out[::2, ::2], cv2.imread(str(img)))


def test_ort_status_and_load_give_the_same_provider_reason(my_onnx):
    from pipeline.backends.ort_backend import OrtCudaBackend
    from pipeline.native.cuda_driver import gpu_visible

    status = OrtCudaBackend.status(resolve(onnx=my_onnx), "fp32", onnx=my_onnx)
    if status.available:
        pytest.skip("CUDAExecutionProvider runs here")
    with pytest.raises(PipelineError) as e:
        OrtCudaBackend(None, onnx=my_onnx).load()
    assert str(e.value) == status.reason
    assert ("needs a GPU" in status.reason) != gpu_visible()[0] or "not in this onnxruntime build" in status.reason


# -- the import layers ------------------------------------------------------------------------------------
def _lint_imports(root: Path) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("lint-imports")
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([str(exe), "--config", str(root / "pyproject.toml"), "--no-cache"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def lint_imports_exe():
    if not Path(sys.executable).with_name("lint-imports").is_file():
        pytest.skip("import-linter is not installed (the test extra: pip install -e '.[test]')")


def test_imports_keep_the_layers(lint_imports_exe):
    r = _lint_imports(REPO)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    assert "0 broken" in r.stdout


@pytest.mark.parametrize(("module", "line", "broken"), [
    ("pipeline/artifacts/cache.py", "import pipeline.export.core  # noqa", "pipeline.artifacts is not allowed"),
    ("models/spec.py", "import models.external.resolve  # noqa", "No cycles are allowed in models"),
])
def test_an_upward_import_or_cycle_breaks_the_contracts(tmp_path, lint_imports_exe, module, line, broken):
    """The contracts catch what they are for: a copy of the tree with one upward import fails `make lint`."""
    for top in ("pipeline", "models"):
        shutil.copytree(REPO / top, tmp_path / top, ignore=shutil.ignore_patterns("*.pt", "__pycache__", "*.so"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / module
    target.write_text(target.read_text() + f"\n{line}\n")
    r = _lint_imports(tmp_path)
    assert r.returncode != 0 and broken in r.stdout, r.stdout[-3000:]
