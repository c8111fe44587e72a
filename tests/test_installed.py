"""The torch-free install (`pip install srdeploy`, no extras) as a user meets it: the packages copied into a
site folder without the checkout around them (no pyproject.toml, no Makefile), run with PyTorch, spandrel and
the other extras' packages blocked. What needs an extra says which one and how to install it, as one line."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BLOCKED = ("torch", "torchvision", "onnxscript", "spandrel", "safetensors", "onnxruntime_extensions", "tensorrt")
LAUNCHER = (f"import runpy, sys\nfor m in {BLOCKED!r}: sys.modules[m] = None\n"
            "sys.argv = ['srdeploy', *sys.argv[1:]]\nrunpy.run_module('pipeline', run_name='__main__')\n")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """pipeline/ and models/ as pip installs them: a site folder with no checkout around it."""
    site = tmp_path_factory.mktemp("site-packages")
    for pkg in ("pipeline", "models"):
        shutil.copytree(REPO / pkg, site / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    return site


def run_installed(site: Path, *args, cwd: Path | None = None, code: str = LAUNCHER) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(site), "SRDEPLOY_CACHE": str(site.parent / "cache"),
           "SRDEPLOY_TRITON_HOME": ""}
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], cwd=cwd or site.parent, env=env,
                          capture_output=True, text=True, timeout=300)


def test_it_runs_the_copy_not_the_checkout(site):
    r = run_installed(site, code="import pipeline; print(pipeline.__file__)")
    assert r.stdout.strip() == str(site / "pipeline" / "__init__.py"), r.stderr


def test_demo_help_imports_no_pytorch(site):
    r = run_installed(site, "demo", "--help")
    assert r.returncode == 0 and "--no-bench" in r.stdout, r.stderr  # the full venv: tests/test_rough_edges.py


@pytest.mark.parametrize("args,package", [
    (["export", "--output", "{tmp}/x.onnx"], "torch"),
    (["eval"], "torch"),
    (["models"], "spandrel"),
    (["models", "--model", "{tmp}/net.pth"], "torch"),
    (["demo", "--output", "{tmp}/demo", "--no-bench", "--no-compare"], "torch"),
])
def test_what_needs_pytorch_says_which_extra_to_install(site, tmp_path, args, package):
    (tmp_path / "net.pth").write_bytes(b"not read")
    r = run_installed(site, *[a.format(tmp=tmp_path) for a in args])
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert lines[0] == (f"error: {args[0]} needs {package}, which is not installed (the export extra: "
                        "pip install 'srdeploy[export]')")
    if args[0] == "demo":  # said before its first line, and no empty outputs/demo/ left behind (issue 51)
        assert r.stdout == "" and not (tmp_path / "demo").exists(), r.stdout


def test_gpu_advice_names_the_package_not_a_checkout(site, tmp_path):
    """No `.venv/bin/pip install -e '.[gpu]'` for a user who has neither a .venv nor a checkout."""
    r = run_installed(site, "engine", "--onnx", tmp_path / "none.onnx", "--output", tmp_path / "e.engine")
    r2 = run_installed(site, "backends")
    for out in (r.stderr, r2.stdout + r2.stderr):
        assert "pip install -e" not in out and ".venv" not in out, out
    assert "pip install 'srdeploy[gpu]'" in r2.stdout, r2.stdout


@pytest.fixture(scope="module")
def onnx_file(tmp_path_factory) -> Path:
    from pipeline.export.cached import onnx_for

    return onnx_for("srcnn")  # exported here, with PyTorch; the installed copy only reads it


def test_triton_repository_names_an_environment_outside_site_packages(site, onnx_file, tmp_path):
    """EXECUTION_ENV_PATH never points into site-packages; what is missing is said with the command a pip user
    has (no `make`), by `triton` and again by `serve`."""
    repo = tmp_path / "R"
    r = run_installed(site, "triton", "--onnx", onnx_file, "--backend", "ort", "--output", repo)
    assert r.returncode == 0, r.stderr
    home = site.parent / "cache" / "triton"
    text = (repo / "sr" / "config.pbtxt").read_text()
    assert f'string_value: "{home / "env"}"' in text and str(site) not in text
    fix = f"the Triton server and its Python environment are not set up in {home} (run `python -m " \
          "pipeline.serve.triton_env`)"
    assert f"note: {fix}" in r.stdout
    r = run_installed(site, "serve", repo)
    assert r.returncode == 2 and r.stderr.strip().startswith(f"error: {fix}"), r.stderr


@pytest.mark.parametrize("blocked", [BLOCKED, tuple(m for m in BLOCKED if m != "onnxruntime_extensions")])
def test_ort_sr_kernels_gets_one_reason_from_sr_and_backends(site, tmp_path, blocked):
    launcher = LAUNCHER.replace(repr(BLOCKED), repr(blocked))
    src = tmp_path / "in.png"
    src.write_bytes(bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010802000000907753de0000000c4944"
                                  "41547801636060f80f0001040100a5f5e6f50000000049454e44ae426082"))
    sr = run_installed(site, "sr", src, tmp_path / "out.png", "--backend", "ort-sr-kernels", code=launcher)
    listing = run_installed(site, "backends", code=launcher)
    (row,) = [ln for ln in listing.stdout.splitlines() if ln.startswith("ort-sr-kernels ")]
    reason = row.split(None, 2)[2]
    assert sr.returncode == 2 and sr.stderr.strip() == f"error: {reason}", (sr.stderr, row)
    assert "make plugins`) and point" in reason or "pip install 'srdeploy[export]'" in reason
