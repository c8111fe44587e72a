"""Is a CUDA GPU visible? Asked of the CUDA driver (libcuda) through ctypes, so the runtime needs no PyTorch."""
from __future__ import annotations

import ctypes
import functools


@functools.cache
def gpu_visible() -> tuple[bool, str]:
    """(True, device 0's name) or (False, why not) -- one line either way."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False, "no CUDA GPU visible (no NVIDIA driver: libcuda.so.1 not found)"
    count = ctypes.c_int(0)
    if lib.cuInit(0) != 0 or lib.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value < 1:
        return False, "no CUDA GPU visible (the NVIDIA driver reports no usable device)"
    name = ctypes.create_string_buffer(256)
    device = ctypes.c_int(0)
    if lib.cuDeviceGet(ctypes.byref(device), 0) != 0 or lib.cuDeviceGetName(name, 256, device) != 0:
        return True, "CUDA GPU 0"
    return True, name.value.decode(errors="replace")
