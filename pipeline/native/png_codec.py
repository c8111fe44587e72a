"""NumPy front end of libsr_png.so (ctypes): the sr stage's PNG codec for 8-bit images (pipeline/native/png/).

`png_idat_u8(pixels, swap_red_blue)` writes the zlib stream of a PNG's IDAT chunk; `png_unfilter_u8(...)` turns a
PNG's inflated image data back into pixels. `usable()` says whether the library loads; pipeline.images.png falls
back to numpy + ISA-L (writing) and OpenCV (reading) where it does not. Its kernels use AVX2 where the CPU (as
ONEDNN_MAX_CPU_ISA caps it: pipeline.native.cpu) has it, else SSSE3 or SSE2 (`set_simd`): the same bytes at each.
"""
from __future__ import annotations

import ctypes
import functools

import numpy as np

from pipeline.errors import PipelineError
from pipeline.native import cpu
from pipeline.native.libraries import load_versioned, loads, png_library

ABI_VERSION = 2  # SR_PNG_ABI in pipeline/native/png/srPng.h
SIMD = ("sse2", "ssse3", "avx2")  # sr_png_set_simd's levels, in order
_INT = ctypes.c_int


@functools.cache
def _lib() -> ctypes.CDLL:
    lib = load_versioned(png_library(), "sr_png_abi_version", ABI_VERSION)
    lib.sr_png_last_error.restype = ctypes.c_char_p
    lib.sr_png_idat_bound.argtypes = [_INT] * 3
    lib.sr_png_idat_bound.restype = ctypes.c_size_t
    lib.sr_png_idat_u8.argtypes = [ctypes.c_void_p] + [_INT] * 4 + [ctypes.c_void_p, ctypes.c_size_t,
                                                                    ctypes.POINTER(ctypes.c_size_t)]
    lib.sr_png_idat_u8.restype = _INT
    lib.sr_png_unfilter_u8.argtypes = [ctypes.c_void_p] + [_INT] * 4 + [ctypes.c_void_p]
    lib.sr_png_unfilter_u8.restype = _INT
    lib.sr_png_set_simd.argtypes = [_INT]
    lib.sr_png_set_simd.restype = _INT
    lib.sr_png_set_simd(_cpu_simd())
    return lib


def _cpu_simd() -> int:
    """The highest of SIMD this CPU has, as ONEDNN_MAX_CPU_ISA caps it."""
    return max(i for i, flag in enumerate(SIMD) if i == 0 or cpu.has(flag))


def set_simd(level: str) -> str:
    """The instructions the codec's kernels use from now on ('sse2', 'ssse3' or 'avx2', capped at what the CPU has):
    for tests that hold every level to the same bytes. Returns the level now used. Not while another thread codes."""
    return SIMD[_lib().sr_png_set_simd(min(SIMD.index(level), _cpu_simd()))]


def library() -> ctypes.CDLL:
    """The loaded, version-checked PNG library; PipelineError (one line) when it is missing or foreign."""
    return _lib()


@functools.cache
def usable() -> bool:
    """Whether the library loads with this C API (the PNG writer and reader fall back where not)."""
    return loads(_lib)


def _check(status: int, what: str) -> None:
    if status != 0:
        msg = _lib().sr_png_last_error().decode() or f"status {status}"
        raise PipelineError(f"{what} failed: {msg}")


def png_idat_u8(pixels: np.ndarray, swap_red_blue: bool) -> memoryview:
    """Encodes 8-bit pixels as the zlib stream of a PNG's IDAT chunk.

    Args:
        pixels: HxW or HxWxC (C <= 4) uint8 samples.
        swap_red_blue: write BGR(A) pixels as PNG's RGB(A).

    Returns:
        The stream (per row the Average or Up filter, a Huffman code per band of rows).

    Raises:
        PipelineError: for another dtype or shape, or when the library fails.
    """
    a = np.ascontiguousarray(pixels)
    if a.dtype != np.uint8 or a.ndim not in (2, 3) or (a.ndim == 3 and not 1 <= a.shape[2] <= 4) or a.size == 0:
        raise PipelineError(f"png_idat_u8: expected a non-empty HxW or HxWxC uint8 image, got {a.dtype} {a.shape}")
    h, w = a.shape[:2]
    c = 1 if a.ndim == 2 else a.shape[2]
    out = np.empty(_lib().sr_png_idat_bound(h, w, c), dtype=np.uint8)
    written = ctypes.c_size_t(0)
    _check(_lib().sr_png_idat_u8(a.ctypes.data, h, w, c, int(swap_red_blue), out.ctypes.data, out.size,
                                 ctypes.byref(written)), "png_idat_u8")
    return memoryview(out)[:written.value]


def png_unfilter_u8(filtered, h: int, w: int, channels: int, swap_red_blue: bool) -> np.ndarray:
    """Turns a PNG's inflated 8-bit image data back into pixels.

    Args:
        filtered: h rows of a filter byte and w * channels samples.
        h, w, channels: the image's size and channels (1-4).
        swap_red_blue: give RGB(A) as BGR(A).

    Returns:
        HxW or HxWxC uint8 samples.

    Raises:
        PipelineError: for a size that does not match or an unknown filter type.
    """
    data = np.frombuffer(filtered, np.uint8)
    if h < 1 or w < 1 or not 1 <= channels <= 4 or data.size != h * (1 + w * channels):
        raise PipelineError(f"png_unfilter_u8: {data.size} bytes are not {h} rows of {w} x {channels} samples")
    out = np.empty((h, w) if channels == 1 else (h, w, channels), np.uint8)
    _check(_lib().sr_png_unfilter_u8(data.ctypes.data, h, w, channels, int(swap_red_blue), out.ctypes.data),
           "png_unfilter_u8")
    return out
