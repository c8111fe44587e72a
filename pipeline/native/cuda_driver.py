"""Is a CUDA GPU visible? The one GPU probe: asked of the CUDA driver (libcuda) through ctypes, so the runtime
needs no PyTorch. `torch_gpu_visible()` is for where PyTorch itself is what is asked (the torch backend)."""
from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

from pipeline.errors import first_line

# CUdevice_attribute values (cuda.h)
_CC_MAJOR, _CC_MINOR = 75, 76


@dataclass(frozen=True)
class Driver:
    """What libcuda reports: device count, driver API version (e.g. 13000), device 0's name and compute
    capability ("9.0"), or why no device is usable."""

    count: int
    version: int
    name: str
    problem: str  # '' when a device is usable
    compute_capability: str = ""

    @property
    def version_text(self) -> str:
        return f"CUDA driver API {self.api_version}" if self.version else ""

    @property
    def api_version(self) -> str:
        """"13.0" for 13000; '' when there is no driver."""
        return f"{self.version // 1000}.{self.version % 1000 // 10}" if self.version else ""


def _capability(lib, device) -> str:
    major, minor = ctypes.c_int(0), ctypes.c_int(0)
    if lib.cuDeviceGetAttribute(ctypes.byref(major), _CC_MAJOR, device) != 0 or \
            lib.cuDeviceGetAttribute(ctypes.byref(minor), _CC_MINOR, device) != 0:
        return ""
    return f"{major.value}.{minor.value}"


@functools.cache
def driver() -> Driver:
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        return Driver(0, 0, "", f"no NVIDIA driver ({first_line(e)})")  # dlopen's message names the library
    version, count = ctypes.c_int(0), ctypes.c_int(0)
    rc = lib.cuInit(0)
    lib.cuDriverGetVersion(ctypes.byref(version))
    if rc != 0:
        return Driver(0, version.value, "", f"cuInit failed with CUresult {rc} (no usable GPU)")
    if lib.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value < 1:
        return Driver(0, version.value, "", "the driver sees no GPU")
    name, device = ctypes.create_string_buffer(256), ctypes.c_int(0)
    if lib.cuDeviceGet(ctypes.byref(device), 0) != 0:
        return Driver(count.value, version.value, "CUDA GPU 0", "")
    ok = lib.cuDeviceGetName(name, 256, device) == 0
    return Driver(count.value, version.value, name.value.decode(errors="replace") if ok else "CUDA GPU 0", "",
                  _capability(lib, device))


def gpu_visible() -> tuple[bool, str]:
    """(True, device 0's name) or (False, why not) -- one line either way."""
    d = driver()
    return (True, d.name) if d.count else (False, f"no CUDA GPU visible: {d.problem}")


def torch_gpu_visible() -> tuple[bool, str]:
    """Whether PyTorch itself can use the GPU (imports torch): the driver's answer first, then PyTorch's build."""
    seen, why = gpu_visible()
    if not seen:
        return False, why
    import torch

    if not torch.cuda.is_available():
        return False, (f"PyTorch {torch.__version__} cannot use {why} (a CPU-only build, or its CUDA is newer "
                       "than the driver)")
    return True, why
