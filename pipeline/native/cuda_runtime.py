"""Finds cudart and cuBLAS at load time for our CUDA libraries, whose RUNPATH is `$ORIGIN` alone.

The libraries carry no build-machine path, so before one of them is dlopened (ctypes, or TensorRT's
`load_library`) `preload()` loads libcudart / libcublas(Lt) from where pip wheels (torch's and TensorRT's `nvidia/...`
packages), the CUDA toolkit or the system put them; the dynamic loader then satisfies our NEEDED entries with the
already-loaded copies. `subprocess_env()` gives child programs (the self-test, the GPU harness) the same folders on
LD_LIBRARY_PATH. `dlopen_problem()` says whether a library loads at all (its NEEDED entries found);
`device_free_bytes()` asks the CUDA runtime (cuda-python) for a device's free memory without PyTorch.
"""
from __future__ import annotations

import ctypes
import functools
import glob
import os
import sys
from pathlib import Path

from pipeline.errors import first_line

# Sonames our libraries need, in load order (cuBLAS needs cuBLASLt and cudart).
RUNTIME_LIBRARIES = ("libcudart.so.13", "libcublasLt.so.13", "libcublas.so.13")
# Where pip wheels keep them under site-packages (CUDA 13 wheels: nvidia/cu13/lib; older split wheels per library).
_WHEEL_LIB_GLOBS = ("nvidia/cu13/lib", "nvidia/cublas/lib", "nvidia/cuda_runtime/lib", "tensorrt_libs")


def _site_dirs() -> list[Path]:
    seen: list[Path] = []
    for entry in sys.path:
        p = Path(entry or ".")
        if p.name in ("site-packages", "dist-packages") and p.is_dir() and p not in seen:
            seen.append(p)
    return seen


def candidate_dirs() -> list[Path]:
    """Folders that may hold the CUDA runtime libraries, most specific first."""
    dirs: list[Path] = []
    for site in _site_dirs():
        for pattern in _WHEEL_LIB_GLOBS:
            dirs += [Path(p) for p in sorted(glob.glob(str(site / pattern)))]
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    dirs += [Path(cuda_home) / "lib64", Path(cuda_home) / "targets" / "x86_64-linux" / "lib"]
    dirs += [Path(p) for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p]
    dirs += [Path("/usr/lib/x86_64-linux-gnu"), Path("/usr/lib64")]
    unique: list[Path] = []
    for d in dirs:
        if d.is_dir() and d not in unique:
            unique.append(d)
    return unique


def find_runtime_libraries() -> dict[str, Path | None]:
    """soname -> the first file found for it (None when nowhere)."""
    found: dict[str, Path | None] = dict.fromkeys(RUNTIME_LIBRARIES)
    for d in candidate_dirs():
        for name in RUNTIME_LIBRARIES:
            if found[name] is None and (d / name).is_file():
                found[name] = d / name
    return found


def missing_hint() -> str:
    return ("install PyTorch with CUDA 13 (its nvidia-cublas / nvidia-cuda-runtime wheels) or the CUDA 13 toolkit "
            "(CUDA_HOME), or put the folder holding libcudart.so.13 and libcublas.so.13 on LD_LIBRARY_PATH")


@functools.cache
def preload() -> dict[str, str]:
    """Load cudart and cuBLAS globally (once); soname -> path loaded, or the loader's error text."""
    status: dict[str, str] = {}
    for name, path in find_runtime_libraries().items():
        target = str(path) if path is not None else name  # plain soname: the system search paths
        try:
            ctypes.CDLL(target, mode=ctypes.RTLD_GLOBAL)
            status[name] = target
        except OSError as e:
            status[name] = f"not loadable: {first_line(e)}"
    return status


def subprocess_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for a child program linked against cudart/cuBLAS: their folders first on LD_LIBRARY_PATH."""
    env = dict(os.environ if base is None else base)
    folders = []
    for path in find_runtime_libraries().values():
        if path is not None and str(path.parent) not in folders:
            folders.append(str(path.parent))
    old = env.get("LD_LIBRARY_PATH", "")
    env["LD_LIBRARY_PATH"] = ":".join(folders + ([old] if old else []))
    return env


def dlopen_problem(path: Path) -> str | None:
    """Why the shared library `path` does not load here (a NEEDED library missing, a bad file), or None."""
    try:
        ctypes.CDLL(str(path), mode=os.RTLD_LAZY | os.RTLD_LOCAL)
    except OSError as e:
        return f"{path.name} does not load: {first_line(e)}"
    return None


def device_free_bytes(device: int = 0) -> int | None:
    """Free memory of CUDA device `device` (cudaMemGetInfo through cuda-python, the `gpu` extra), or None when
    cuda-python is missing or no device answers."""
    try:
        from cuda.bindings import runtime as cudart
    except ImportError:
        return None
    (err,) = cudart.cudaSetDevice(device)
    if err != cudart.cudaError_t.cudaSuccess:
        return None
    err, free, _total = cudart.cudaMemGetInfo()
    return int(free) if err == cudart.cudaError_t.cudaSuccess else None
