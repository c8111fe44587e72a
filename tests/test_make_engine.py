"""`make engine` on a machine without TensorRT stops at once with the reason, before exporting any ONNX file."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.engine import tensorrt_problem

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_engine_without_tensorrt_exports_nothing(tmp_path):
    problem = tensorrt_problem()
    if problem is None:
        pytest.skip("TensorRT and a GPU are here: `make engine` builds")
    stamp = tmp_path / "installed"
    stamp.touch()  # newer than pyproject.toml: `setup` has nothing to do (the test never installs anything)
    onnx_dir = tmp_path / "onnx"
    r = subprocess.run(["make", "--no-print-directory", "engine", f"PY={sys.executable}", f"STAMP={stamp}",
                        f"ONNX_DIR={onnx_dir}", f"BUILD={tmp_path / 'build'}"], cwd=REPO, capture_output=True,
                       text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode != 0
    # one line, checked before make starts anything: no make "*** [engine] Error 1" after it (issue 42)
    (line,) = r.stderr.splitlines()
    assert f"*** error: {problem}" in line and "Error 1" not in r.stderr, r.stderr
    assert not onnx_dir.exists() and not (tmp_path / "build").exists()  # no export, no plugin build


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_setup_says_what_it_does_and_swaps_the_onnx_runtime_build(tmp_path):
    """Issue 42: `make setup` was silent for ~100 s, and `make setup ORT=gpu` (what every GPU hint says) did nothing
    on a venv set up for the CPU. Dry runs (-n): nothing is installed."""
    from pipeline.errors import install_command

    assert install_command("gpu") == "make setup ORT=gpu"  # the one wording of the GPU install in a checkout
    stamp = tmp_path / "installed"
    stamp.write_text("cpu\n")

    def dry(*args):
        r = subprocess.run(["make", "-n", "--no-print-directory", "setup", f"PY={sys.executable}", f"STAMP={stamp}",
                            *args], cwd=REPO, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        return r.stdout

    assert "pip install" not in dry()  # the same build: nothing to do
    gpu = dry("ORT=gpu")
    assert "pip uninstall -y -q onnxruntime " in gpu and "pip install -q -e '.[test,gpu]'" in gpu
    assert 'echo "setup: installing .[test,gpu] into .venv with pip (the first time' in gpu
    stamp.unlink()
    assert "pip install -q -e '.[test,cpu]'" in dry() and "onnxruntime-gpu" in dry()
