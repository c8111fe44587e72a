"""PNG writing for the sr stage: 8-bit images through our C++ encoder (libsr_kernels_cpu.so), others through the
Up filter in numpy and ISA-L's deflate (python-isal).

Encoding is the largest part of the stage's own CPU cost, and on the host it takes that CPU from inference. The C++
encoder (`sr_png_idat_u8`: per row the Average or the Up filter, a Huffman code per band of rows, pixel repeats as
matches, no other LZ77 search) writes a 768x768 srcnn-x3 output in 2.7 ms of CPU against 7 ms for the Up filter with
ISA-L level 1, in a file 10-14 % smaller (AMD EPYC, 2026-11-27); bicubic-upscaled photos come out 2-7 % smaller or
0.2 % larger, an upscaled flat drawing ~10 % larger (still ~45 % smaller than OpenCV's default PNG). 16-bit images,
and every image where the library is missing or from another build, take the Up filter with ISA-L level 1: 16 ms
against OpenCV's 52 (libpng + zlib level 1, Paeth) for a 1152x1152 photo on the 2-core Xeon, 15-25 % larger files
than OpenCV's; without python-isal (a bare GPU machine's Python) zlib's level 1 compresses the same filtered rows:
the same pixels, slower. Every path is lossless.
"""
from __future__ import annotations

import struct
import zlib

import cv2
import numpy as np

from pipeline.native import kernels_cpu

try:
    from isal import isal_zlib as deflate
except ImportError:  # optional at run time: zlib writes the same PNG data, at about 3x the CPU
    deflate = zlib

LEVEL = 1  # ISA-L levels 0-3: 2 and 3 save under 1 % on upscaled photos for 5-50 % more time
SIGNATURE = b"\x89PNG\r\n\x1a\n"
COLOR_TYPE = {1: 0, 3: 2, 4: 6}  # gray, RGB, RGBA
FILTER_UP = 2


def _chunk(kind: bytes, data) -> tuple:
    """A chunk's parts, for one join of the whole file (no copy of the image data per part). ISA-L's CRC-32 where
    python-isal is here: 13x zlib's (0.016 against 0.21 ms for a 768x768 image's data)."""
    return struct.pack(">I", len(data)), kind, data, struct.pack(">I", deflate.crc32(data, deflate.crc32(kind)))


def _rows(pixels: np.ndarray) -> np.ndarray:
    """The image's samples as PNG stores them, one row per line (big-endian); channels still in BGR(A) order."""
    if pixels.dtype == np.uint16:
        pixels = pixels.astype(">u2")
    pixels = np.ascontiguousarray(pixels)
    return pixels.view(np.uint8).reshape(pixels.shape[0], -1)


def _swap_rb(filtered: np.ndarray, w: int, channels: int, itemsize: int) -> None:
    """BGR(A) -> RGB(A) inside the filtered scanlines, in place (the Up filter works byte by byte, so swapping
    after it equals swapping before, without a copy of the image)."""
    if channels == 1:
        return
    if itemsize == 1:  # OpenCV swaps a strided 8-bit view in place, ~8x faster than numpy
        view = filtered[:, 1:].reshape(filtered.shape[0], w, channels)
        cv2.cvtColor(view, cv2.COLOR_BGR2RGB if channels == 3 else cv2.COLOR_BGRA2RGBA, dst=view)
        return
    px = filtered[:, 1:].reshape(filtered.shape[0], w, channels, itemsize)
    blue = px[:, :, 0].copy()
    px[:, :, 0] = px[:, :, 2]
    px[:, :, 2] = blue


def _idat_up(pixels: np.ndarray) -> bytes:
    """The image data's zlib stream with the Up filter on every row (numpy) and ISA-L's (or zlib's) deflate."""
    h, w = pixels.shape[:2]
    channels = 1 if pixels.ndim == 2 else pixels.shape[2]
    rows = _rows(pixels)
    filtered = np.empty((h, rows.shape[1] + 1), dtype=np.uint8)
    filtered[:, 0] = FILTER_UP
    filtered[0, 1:] = rows[0]  # the first row's "previous row" is zeros
    np.subtract(rows[1:], rows[:-1], out=filtered[1:, 1:])  # modulo 256, as PNG's filters are
    _swap_rb(filtered, w, channels, pixels.dtype.itemsize)
    return deflate.compress(filtered, LEVEL)


def encode_png(pixels: np.ndarray, native: bool = True) -> bytes:
    """HxW gray or HxWx3/4 BGR(A) (OpenCV's layout), uint8 or uint16 -> PNG file bytes; 8-bit images by the C++
    encoder where its library loads, unless `native` is False (the Up filter with ISA-L: for comparisons)."""
    channels = 1 if pixels.ndim == 2 else pixels.shape[2]
    if pixels.dtype not in (np.uint8, np.uint16) or channels not in COLOR_TYPE:
        raise ValueError(f"PNG takes uint8/uint16 gray, BGR or BGRA, got {pixels.dtype} with {channels} channels")
    h, w = pixels.shape[:2]
    if native and pixels.dtype == np.uint8 and h and w and kernels_cpu.usable():
        data = kernels_cpu.png_idat_u8(pixels, swap_red_blue=True)
    else:
        data = _idat_up(pixels)
    depth = 16 if pixels.dtype == np.uint16 else 8
    header = struct.pack(">IIBBBBB", w, h, depth, COLOR_TYPE[channels], 0, 0, 0)
    return b"".join((SIGNATURE, *_chunk(b"IHDR", header), *_chunk(b"IDAT", data), *_chunk(b"IEND", b"")))
