"""NumPy front end of libsr_jpeg.so (ctypes): the sr stage's JPEG reader (pipeline/native/jpeg/).

OpenCV's libjpeg prints a damaged file's warning ("Corrupt JPEG data: bad Huffman code") on the process's stderr,
past our one line per file, and gives the pixels without a word. This reader runs libjpeg with an error manager of
its own, so the warning comes back with the pixels. `decode(data)` returns (pixels, warning) for 8-bit gray and colour
JPEGs, the pixels as OpenCV's IMREAD_UNCHANGED gives them (gray, or BGR); None for any other JPEG (CMYK, 12-bit) or
where the library is not built (`usable()`), which OpenCV then reads.
"""
from __future__ import annotations

import ctypes
import functools

import numpy as np

from pipeline.native.libraries import jpeg_library, load_versioned, loads

ABI_VERSION = 1  # SR_JPEG_ABI in pipeline/native/jpeg/srJpeg.h
OK, FAILED, OTHER = 0, 1, 2  # SR_JPEG_OK, SR_JPEG_FAILED, SR_JPEG_OTHER
MESSAGE = 200  # libjpeg's messages are under JMSG_LENGTH_MAX (200)
_INT_P = ctypes.POINTER(ctypes.c_int)


class JpegFailed(Exception):
    """libjpeg refused the data; the message is its reason."""


@functools.cache
def _lib() -> ctypes.CDLL:
    lib = load_versioned(jpeg_library(), "sr_jpeg_abi_version", ABI_VERSION)
    lib.sr_jpeg_info.argtypes = [ctypes.c_char_p, ctypes.c_size_t, _INT_P, _INT_P, _INT_P, ctypes.c_char_p,
                                 ctypes.c_size_t]
    lib.sr_jpeg_info.restype = ctypes.c_int
    lib.sr_jpeg_decode.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                                   ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
    lib.sr_jpeg_decode.restype = ctypes.c_int
    return lib


@functools.cache
def usable() -> bool:
    """Whether the library loads with this C API (OpenCV reads JPEGs where not)."""
    return loads(_lib)


def decode(data: bytes) -> tuple[np.ndarray, str] | None:
    """A JPEG's pixels (HxW gray or HxWx3 BGR, uint8) and libjpeg's first warning ('' when none); None for a JPEG this
    reader leaves to OpenCV, or without the library. Raises JpegFailed with libjpeg's reason when it refuses it."""
    if not usable():
        return None
    lib, message = _lib(), ctypes.create_string_buffer(MESSAGE)
    h, w, c = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    status = lib.sr_jpeg_info(data, len(data), ctypes.byref(h), ctypes.byref(w), ctypes.byref(c), message, MESSAGE)
    if status == OK:
        shape = (h.value, w.value) if c.value == 1 else (h.value, w.value, c.value)
        pixels = np.empty(shape, np.uint8)
        status = lib.sr_jpeg_decode(data, len(data), pixels.ctypes.data, h.value, w.value, c.value, message,
                                    MESSAGE)
    if status == FAILED:
        raise JpegFailed(message.value.decode("latin-1"))
    if status != OK:
        return None
    return pixels, message.value.decode("latin-1")
