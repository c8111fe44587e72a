"""Is a CUDA GPU visible? Asked of the CUDA driver (libcuda) through ctypes, so the runtime needs no PyTorch."""
from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

from pipeline.errors import first_line


@dataclass(frozen=True)
class Driver:
    """What libcuda reports: device count, driver API version (e.g. 13000), device 0's name, or why none."""

    count: int
    version: int
    name: str
    problem: str  # '' when a device is usable

    @property
    def version_text(self) -> str:
        return f"CUDA driver API {self.version // 1000}.{self.version % 1000 // 10}" if self.version else ""


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
    ok = lib.cuDeviceGet(ctypes.byref(device), 0) == 0 and lib.cuDeviceGetName(name, 256, device) == 0
    return Driver(count.value, version.value, name.value.decode(errors="replace") if ok else "CUDA GPU 0", "")


def gpu_visible() -> tuple[bool, str]:
    """(True, device 0's name) or (False, why not) -- one line either way."""
    d = driver()
    return (True, d.name) if d.count else (False, f"no CUDA GPU visible: {d.problem}")
