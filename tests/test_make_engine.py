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
    assert f"error: {problem}" in r.stderr.splitlines(), r.stderr
    assert not onnx_dir.exists() and not (tmp_path / "build").exists()  # no export, no plugin build
