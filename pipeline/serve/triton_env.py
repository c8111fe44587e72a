"""The local Triton install: NVIDIA's `tritonserver` from the nvidia-pytriton wheel, unpacked (never installed:
the wheel pins numpy<2 and an old tritonclient), plus the Python backend's own environment (a venv with numpy<2,
ONNX Runtime and OpenCV, and this checkout's `pipeline` on its path). `make triton-env` or
`python -m pipeline.serve.triton_env` makes both under TRITON_HOME (default: `.triton/` in the checkout); it is
idempotent and the project's own environment is only used to run pip download and venv.

Layout: TRITON_HOME/wheels/*.whl, TRITON_HOME/server/ (the unpacked wheel), TRITON_HOME/env/ (the venv the
`sr` model's config names as EXECUTION_ENV_PATH), TRITON_HOME/.ready (what was made, as JSON).

The Python backend's stub embeds the libpython of the env's Python version (3.8-3.13 are shipped); the one that
matches the env is copied into the backend folder, where the server looks for it."""
from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path

from pipeline.artifacts.cache import cache_dir
from pipeline.errors import PipelineError, in_checkout

WHEEL = "nvidia-pytriton==0.7.0"
# The env gets the torch-free runtime's own dependencies as pyproject.toml declares them (so a new one cannot be
# missed there) with its ONNX Runtime extra (`cpu`, or `gpu`: onnxruntime-gpu, TensorRT, cuda-python), less those the
# sr model never imports, with numpy < 2: the stub returns empty tensors with numpy 2 (measured).
NOT_SERVED = {"matplotlib", "scikit-image", "opencv-python-headless"}  # reports only; OpenCV: NO_DEPS below
# OpenCV 4.12 declares numpy>=2 but runs on numpy 1.26 (NumPy 2 builds keep the 1.x ABI; checked: decode/encode
# round trip); 4.11 lacks the PNG filter flag pipeline.images.imageio writes with. Installed without dependencies.
NO_DEPS = ("opencv-python-headless>=4.12,<4.13",)
CHECKOUT = Path(__file__).resolve().parents[2]
HOME_VAR = "SRDEPLOY_TRITON_HOME"
STUB = "triton_python_backend_stub"


def requirements(gpu: bool = False) -> list[str]:
    """What pip installs into the env: the runtime's dependencies and those of its `cpu` or `gpu` extra, from this
    checkout's pyproject.toml (the env runs this checkout), else from the installed srdeploy's metadata (Python
    3.10 has no tomllib)."""
    out = []
    for req in _runtime_dependencies("gpu" if gpu else "cpu"):
        name = re.match(r"[A-Za-z0-9._-]+", req).group(0).lower()
        if name in NOT_SERVED:
            continue
        out.append("numpy<2" if name == "numpy" else req)
    return out


def _runtime_dependencies(extra: str) -> list[str]:
    try:
        import tomllib  # Python >= 3.11
        project = tomllib.loads((CHECKOUT / "pyproject.toml").read_text())["project"]
        return project["dependencies"] + project["optional-dependencies"][extra]
    except (ImportError, OSError, KeyError):
        reqs = metadata.requires("srdeploy") or []
        return [r.split(";")[0].strip() for r in reqs if "extra ==" not in r or f'extra == "{extra}"' in r]


def home() -> Path:
    """$SRDEPLOY_TRITON_HOME, else `.triton/` in a checkout, else beside the artifact cache (never site-packages)."""
    return Path(os.environ.get(HOME_VAR) or (CHECKOUT / ".triton" if in_checkout() else cache_dir() / "triton"))


def setup_command() -> str:
    """The command that makes the server and its environment, for this kind of install."""
    return "make triton-env" if in_checkout() else "python -m pipeline.serve.triton_env"


def server_root() -> Path:
    return home() / "server" / "pytriton" / "tritonserver"


def server_binary() -> Path:
    return server_root() / "bin" / "tritonserver"


def backend_dir() -> Path:
    return server_root() / "backends"


def env_dir() -> Path:
    return home() / "env"


def _stamp() -> Path:
    return home() / ".ready"


def ready_facts() -> dict | None:
    """What `prepare` made (wheel, env Python, packages), or None when it has not finished."""
    try:
        return json.loads(_stamp().read_text())
    except (OSError, ValueError):
        return None


def problem() -> str | None:
    """Why the local server cannot run the `sr` model here, or None."""
    facts = ready_facts()
    if facts is None or not server_binary().is_file() or not (env_dir() / "bin" / "python").exists():
        return f"the Triton server and its Python environment are not set up in {home()} (run `{setup_command()}`)"
    stub = backend_dir() / "python" / STUB
    try:
        ldd = subprocess.run(["ldd", str(stub)], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        ldd = ""
    missing = [ln.split()[0] for ln in ldd.splitlines() if "not found" in ln]
    if missing:
        return (f"the Python backend stub needs {', '.join(missing)}, which this machine lacks "
                f"(e.g. apt-get install libpython{facts.get('python', '3')})")
    return None


@contextmanager
def _lock():
    home().mkdir(parents=True, exist_ok=True)
    with open(home() / ".lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # two preparers (make and a test run) wait for each other
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _run(cmd: list[str], what: str) -> None:
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
        raise PipelineError(f"{what} failed: {' / '.join(tail) or f'exit {p.returncode}'}")


def download_wheel(python: str = sys.executable) -> Path:
    """The wheel, fetched once with pip download (no dependencies, nothing installed)."""
    wheels = home() / "wheels"
    found = sorted(wheels.glob("nvidia_pytriton-0.7.0-*.whl"))
    if not found:
        _run([python, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", WHEEL, "-d", str(wheels)],
             f"pip download {WHEEL}")
        found = sorted(wheels.glob("nvidia_pytriton-0.7.0-*.whl"))
    if not found:
        raise PipelineError(f"pip download {WHEEL} left no wheel in {wheels}")
    return found[-1]


def _unpack(wheel: Path) -> None:
    dst = home() / "server"
    if server_binary().is_file():
        return
    tmp = home() / "server.part"
    shutil.rmtree(tmp, ignore_errors=True)
    with zipfile.ZipFile(wheel) as z:
        z.extractall(tmp)
    for f in tmp.rglob("*"):  # zip does not keep the executable bits of the binaries and libraries
        if f.is_file() and (f.name in ("tritonserver", STUB) or ".so" in f.name):
            f.chmod(0o755)
    shutil.rmtree(dst, ignore_errors=True)
    tmp.rename(dst)


def _make_env(python: str, gpu: bool) -> str:
    """The venv; returns its Python's X.Y."""
    env = env_dir()
    if not (env / "bin" / "python").exists():
        _run([python, "-m", "venv", "--clear", str(env)], "creating the Triton Python environment")
    _run([str(env / "bin" / "python"), "-m", "pip", "install", "-q", *requirements(gpu)],
         "installing the Triton Python environment's packages")
    _run([str(env / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", *NO_DEPS],
         "installing OpenCV into the Triton Python environment")
    version = subprocess.run([str(env / "bin" / "python"), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    site = subprocess.run([str(env / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "srdeploy.pth").write_text(f"{CHECKOUT}\n")  # this checkout's torch-free runtime
    return version


def prepare(python: str = sys.executable, gpu: bool = False, log=print) -> dict:
    """Make (or find) the server and the env; returns the facts written to TRITON_HOME/.ready."""
    with _lock():
        want = {"wheel": WHEEL, "requirements": requirements(gpu) + list(NO_DEPS),
                "checkout": str(CHECKOUT)}
        facts = ready_facts()
        same = facts and all(facts.get(k) == v for k, v in want.items() if k != "requirements")
        if same and set(facts.get("requirements", [])) == set(want["requirements"]) and server_binary().is_file():
            return facts  # the same packages, in whatever order pyproject.toml's sections list them
        _stamp().unlink(missing_ok=True)
        log(f"triton-env: fetching {WHEEL} into {home() / 'wheels'}")
        _unpack(download_wheel(python))
        log(f"triton-env: Python backend environment in {env_dir()} ({', '.join(want['requirements'])})")
        version = _make_env(python, gpu)
        stub = server_root() / "python_backend_stubs" / version / STUB
        if not stub.is_file():
            raise PipelineError(f"{WHEEL} ships no Python backend stub for Python {version} (3.8-3.13 only)")
        shutil.copy2(stub, backend_dir() / "python" / STUB)
        facts = {**want, "python": version, "server": str(server_binary()), "env": str(env_dir())}
        _stamp().write_text(json.dumps(facts, indent=2) + "\n")
        return facts


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m pipeline.serve.triton_env", description=__doc__.splitlines()[0])
    p.add_argument("--gpu", action="store_true", help="onnxruntime-gpu and TensorRT in the env instead of CPU ORT")
    args = p.parse_args(argv)
    try:
        facts = prepare(gpu=args.gpu)
    except PipelineError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    why = problem()
    print(f"triton-env: server {facts['server']}\ntriton-env: Python {facts['python']} env {facts['env']}")
    if why:
        print(f"triton-env: warning: {why}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
