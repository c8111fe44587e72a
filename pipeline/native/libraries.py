"""Locates (and on request builds) the native libraries from plugins_trt/ and pipeline/native/png/.

- `png_library()`: libsr_png.so, the sr stage's PNG codec (C API, loaded by pipeline.native.png_codec).
- `jpeg_library()`: libsr_jpeg.so, the sr stage's JPEG reader (libjpeg's, loaded by pipeline.native.jpeg_codec; built
  only where libjpeg's headers are).
- `cpu_kernels_library()`: libsr_kernels_cpu.so, the sr ops on the CPU (C API, loaded by pipeline.native.kernels_cpu).
- `trt_plugin_library()`: libsr_trt_plugins.so, the TensorRT IPluginV3 plugins (only built when TensorRT headers exist).
- `cuda_kernels_library()`: libsr_kernels_cuda.so, a C API over the CUDA launchers for GPU tests / benchmarks.
Env overrides: SR_PNG_LIB, SR_JPEG_LIB, SR_KERNELS_CPU_LIB, SR_TRT_PLUGIN_LIB, SR_KERNELS_CUDA_LIB. Default folders:
<repo>/build/png (the PNG codec), <repo>/build/jpeg (the JPEG reader) and <repo>/build/plugins (the rest).
"""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from pathlib import Path

from pipeline.errors import PipelineError, in_checkout
from pipeline.native.cuda_runtime import missing_hint, preload

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_DIR = REPO_ROOT / "build" / "plugins"
PNG_BUILD_DIR = REPO_ROOT / "build" / "png"
JPEG_BUILD_DIR = REPO_ROOT / "build" / "jpeg"
SOURCE_DIR = REPO_ROOT / "plugins_trt"
PNG_SOURCE_DIR = REPO_ROOT / "pipeline" / "native" / "png"
JPEG_SOURCE_DIR = REPO_ROOT / "pipeline" / "native" / "jpeg"

CPU_KERNELS_NAME = "libsr_kernels_cpu.so"
PNG_NAME = "libsr_png.so"
JPEG_NAME = "libsr_jpeg.so"
TRT_PLUGINS_NAME = "libsr_trt_plugins.so"
CUDA_KERNELS_NAME = "libsr_kernels_cuda.so"
# How to get the plugin library built when it is missing: it needs nvcc and TensorRT's C++ headers.
TRT_HEADERS_HINT = (" with nvcc and TensorRT headers available (TENSORRT_ROOT=<dir with include/NvInfer.h>, the "
                    "system's TensorRT dev package, or `make trt-headers` to fetch those matching the installed "
                    "tensorrt)")


class LibraryMissing(PipelineError):
    """A library that is not where it is looked for: one line, `problem: fix`; the doctor shows the two apart."""

    def __init__(self, problem: str, fix: str):
        super().__init__(f"{problem}: {fix}")
        self.problem, self.fix = problem, fix


def _locate(env_var: str, filename: str, what: str, hint: str = "", folder: Path | None = None) -> Path:
    override = os.environ.get(env_var)
    if override:
        path = Path(override).expanduser()
        if not path.is_file():
            raise LibraryMissing(f"{env_var}={override} does not exist ({what})",
                                 f"point {env_var} at a library `make plugins` built{hint}, or unset it")
        return path.resolve()
    path = (folder or BUILD_DIR) / filename
    if not path.is_file() and not in_checkout():  # a pip install: no build folder, no make
        raise LibraryMissing(f"{what} is not part of this install",
                             f"build it in a source checkout (`make plugins`{hint}) and point {env_var} at it")
    if not path.is_file():
        raise LibraryMissing(f"{what} not found at {path}", f"run `make plugins`{hint} (or set {env_var})")
    return path


def load_library(path: Path) -> ctypes.CDLL:
    """dlopen a located library; a broken or foreign file is a one-line PipelineError."""
    try:
        return ctypes.CDLL(str(path))
    except OSError as e:
        raise PipelineError(f"cannot load {path}: {e}") from None


def load_versioned(path: Path, abi_symbol: str, expected: int) -> ctypes.CDLL:
    """dlopen one of our C API libraries and check its version (`abi_symbol()`): a library built from other sources
    is a one-line PipelineError that says how to rebuild."""
    lib = load_library(path)
    version = getattr(lib, abi_symbol)
    version.restype = ctypes.c_int
    found = version()
    if found != expected:
        raise PipelineError(f"{path} has C API version {found}, expected {expected}: rebuild with `make plugins`")
    return lib


def loads(load) -> bool:
    """Whether `load()` (a library's loader) succeeds: its callers take a way of their own where not."""
    try:
        load()
    except (PipelineError, OSError):
        return False
    return True


def load_cuda_library(path: Path) -> ctypes.CDLL:
    """dlopen one of our CUDA libraries after loading the cudart/cuBLAS it needs (its RUNPATH is $ORIGIN alone)."""
    preload()
    try:
        return ctypes.CDLL(str(path))
    except OSError as e:
        raise PipelineError(f"cannot load {path}: {e} ({missing_hint()})") from None


BUILD_INFO_MARKER = b"SR_BUILD_INFO "


def plugin_build_info(path: Path) -> dict[str, str]:
    """What the plugin library was built against, from the string it carries ({} for an older or foreign file):
    e.g. {"tensorrt_headers": "11.1.0", "cuda_toolkit": "13.0.88", "plugins": "DynamicResize/1/sr,..."}."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        return {}
    start = data.find(BUILD_INFO_MARKER)
    if start < 0:
        return {}
    end = data.find(b";", start)
    text = data[start + len(BUILD_INFO_MARKER):end if end > 0 else start + 512].decode("ascii", "replace")
    return dict(item.split("=", 1) for item in text.split() if "=" in item)


def png_library() -> Path:
    """Path of libsr_png.so (always built by `make plugins`)."""
    return _locate("SR_PNG_LIB", PNG_NAME, "sr PNG codec library", folder=PNG_BUILD_DIR)


def jpeg_library() -> Path:
    """Path of libsr_jpeg.so (built by `make plugins` where libjpeg's headers are found)."""
    return _locate("SR_JPEG_LIB", JPEG_NAME, "sr JPEG reader library", " with libjpeg-turbo's headers installed",
                   folder=JPEG_BUILD_DIR)


def cpu_kernels_library() -> Path:
    """Path of libsr_kernels_cpu.so (always built by `make plugins`)."""
    return _locate("SR_KERNELS_CPU_LIB", CPU_KERNELS_NAME, "sr CPU kernels library")


def trt_plugin_library() -> Path:
    """Path of libsr_trt_plugins.so (built by `make plugins` only when TensorRT headers are found)."""
    return _locate("SR_TRT_PLUGIN_LIB", TRT_PLUGINS_NAME, "sr TensorRT plugin library", TRT_HEADERS_HINT)


def cuda_kernels_library() -> Path:
    """Path of libsr_kernels_cuda.so (built by `make plugins` when nvcc is found)."""
    return _locate("SR_KERNELS_CUDA_LIB", CUDA_KERNELS_NAME, "sr CUDA kernels library",
                   " on a machine with nvcc (CUDA_HOME=...)")


def build_plugins(build_dir: Path = BUILD_DIR, *, cuda: bool = True, extra_args: list[str] | None = None,
                  jobs: int = 2) -> Path:
    """Configure and build plugins_trt/ as `make plugins` does; returns the build folder.

    Used by tests when the library is missing. Raises PipelineError with cmake's output tail on failure.
    """
    configure = [f"-DPython3_EXECUTABLE={sys.executable}", f"-DSR_ENABLE_CUDA={'ON' if cuda else 'OFF'}"]
    trt_root = os.environ.get("TENSORRT_ROOT")
    if trt_root:
        configure.append(f"-DTENSORRT_ROOT={trt_root}")
    return _cmake_build(SOURCE_DIR, build_dir, configure + list(extra_args or []), jobs)


def build_png(build_dir: Path = PNG_BUILD_DIR, *, jobs: int = 2) -> Path:
    """Configure and build the PNG codec (pipeline/native/png/) as `make plugins` does; returns the build folder.

    Used by tests when the library is missing. Raises PipelineError with cmake's output tail on failure.
    """
    return _cmake_build(PNG_SOURCE_DIR, build_dir, [], jobs)


def build_jpeg(build_dir: Path = JPEG_BUILD_DIR, *, jobs: int = 2) -> Path:
    """Configure and build the JPEG reader (pipeline/native/jpeg/) as `make plugins` does (no library where libjpeg's
    headers are missing); returns the build folder. Used by tests when the library is missing."""
    return _cmake_build(JPEG_SOURCE_DIR, build_dir, [], jobs)


def _cmake_build(source: Path, build_dir: Path, args: list[str], jobs: int) -> Path:
    cmake = shutil.which("cmake")
    if cmake is None:
        raise PipelineError(f"cmake not found: install cmake (>= 3.18) to build {source.relative_to(REPO_ROOT)}/")
    configure = [cmake, "-S", str(source), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release", *args]
    for cmd in (configure, [cmake, "--build", str(build_dir), "-j", str(jobs)]):
        proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
            raise PipelineError(f"building {source.relative_to(REPO_ROOT)} failed ({' '.join(cmd[:2])} ...):\n{tail}")
    return build_dir
