"""PNG writing and reading for the sr stage: 8-bit images through our C++ encoder (libsr_png.so), others
through the Up filter in numpy and ISA-L's deflate (python-isal); plain 8-bit PNGs read by ISA-L's inflate and our
C++ unfilter, every other PNG (and any file that is not perfectly plain) by OpenCV.

Encoding is the largest part of the stage's own CPU cost, and on the host it takes that CPU from inference. The C++
encoder (`sr_png_idat_u8`: per row the Average or the Up filter, a Huffman code per band of rows, pixel repeats as
matches, no other LZ77 search) writes a 768x768 srcnn-x3 output in 2.7 ms of CPU against 7 ms for the Up filter with
ISA-L level 1, in a file 10-13 % smaller (AMD EPYC, 2026-11-27); bicubic-upscaled photos come out 2-7 % smaller or
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

from pipeline.errors import PipelineError
from pipeline.images import png_chunks
from pipeline.images.header import max_file_bytes
from pipeline.native import png_codec

try:
    from isal import isal_zlib as deflate
except ImportError:  # optional at run time: zlib writes the same PNG data, at about 3x the CPU
    deflate = zlib

LEVEL = 1  # ISA-L levels 0-3: 2 and 3 save under 1 % on upscaled photos for 5-50 % more time
SIGNATURE = png_chunks.SIGNATURE
COLOR_TYPE = {1: 0, 3: 2, 4: 6}  # gray, RGB, RGBA
CHANNELS = {v: k for k, v in COLOR_TYPE.items()}
# Chunks that change what OpenCV returns (a palette, transparency as alpha) or that we do not read (APNG frames):
# a file with one is OpenCV's to decode.
OPENCV_CHUNKS = {b"PLTE", b"tRNS", b"acTL", b"fcTL", b"fdAT"}
FILTER_UP = 2


def chunk(kind: bytes, data) -> tuple:
    """A chunk's parts, for one join of the whole file (no copy of the image data per part). ISA-L's CRC-32 where
    python-isal is here: 13x zlib's (0.016 against 0.21 ms for a 768x768 image's data)."""
    return struct.pack(">I", len(data)), kind, data, struct.pack(">I", _crc(kind, data))


def _crc(kind: bytes, data) -> int:
    """A chunk's CRC-32, over its name and data."""
    return deflate.crc32(data, deflate.crc32(kind))


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


def encode_png(pixels: np.ndarray, native: bool = True, chunks: list[tuple[bytes, bytes]] = ()) -> bytes:
    """HxW gray or HxWx3/4 BGR(A) (OpenCV's layout), uint8 or uint16 -> PNG file bytes; 8-bit images by the C++
    encoder where its library loads, unless `native` is False (the Up filter with ISA-L: for comparisons).
    `chunks`: (name, data) written between IHDR and IDAT (iCCP, eXIf, iTXt: pipeline.images.metadata)."""
    channels = 1 if pixels.ndim == 2 else pixels.shape[2]
    if pixels.dtype not in (np.uint8, np.uint16) or channels not in COLOR_TYPE:
        raise ValueError(f"PNG takes uint8/uint16 gray, BGR or BGRA, got {pixels.dtype} with {channels} channels")
    h, w = pixels.shape[:2]
    if native and pixels.dtype == np.uint8 and h and w and png_codec.usable():
        data = png_codec.png_idat_u8(pixels, swap_red_blue=True)
    else:
        data = _idat_up(pixels)
    depth = 16 if pixels.dtype == np.uint16 else 8
    header = struct.pack(">IIBBBBB", w, h, depth, COLOR_TYPE[channels], 0, 0, 0)
    extra = [part for kind, body in chunks for part in chunk(kind, body)]
    end = chunk(png_chunks.END, b"")
    return b"".join((SIGNATURE, *chunk(b"IHDR", header), *extra, *chunk(b"IDAT", data), *end))


def _sound(data: bytes, pos: int, n: int, kind: bytes, body) -> bool:
    """Whether the chunk at `pos` has a name of four ASCII letters without the reserved bit (libpng refuses one with
    it), lies within the file and has its CRC."""
    return png_chunks.proper_name(kind) and pos + 12 + n <= len(data) and crc_matches(data, kind, body, pos + 8 + n)


def crc_matches(data: bytes, kind: bytes, body, at: int) -> bool:
    """Whether the CRC stored at `at` in `data` is the chunk's (its name and data): ISA-L's CRC-32 where here."""
    return _crc(kind, body) == struct.unpack_from(">I", data, at)[0]


def _plain(header: tuple) -> bool:
    """Whether an IHDR names a non-empty 8-bit gray, RGB or RGBA image, not interlaced, whose rows are no more than
    an image within the pixel limit holds (so 2^31 x 2^31 is declined, not an overflow)."""
    w, h, depth, color, method, filtering, interlace = header
    if depth != 8 or color not in CHANNELS or method or filtering or interlace or not w or not h:
        return False
    return h * (1 + w * CHANNELS[color]) <= max_file_bytes()


def decode_png(data: bytes) -> np.ndarray | None:
    """A plain PNG's pixels as OpenCV's IMREAD_UNCHANGED gives them (HxW gray, HxWx3 BGR, HxWx4 BGRA), or None for
    OpenCV to decode: read here are 8-bit gray, RGB and RGBA images, not interlaced, whose chunks all have their
    CRCs and names of four letters without the reserved bit (a lowercase third letter, which libpng refuses), whose
    IDATs are consecutive and inflate (Adler-32 checked) to exactly the rows the header says, no more than an image
    within the pixel limit holds, with no chunk that changes OpenCV's answer (OPENCV_CHUNKS) or that PNG requires a
    reader to know (an unknown critical one). ISA-L's inflate is 2x zlib's, so a 256x256 photo decodes in about half
    OpenCV's CPU; anything else, every damaged file included, takes OpenCV's path and its errors, as before."""
    if data[:8] != SIGNATURE or not png_codec.usable():
        return None
    header, rows, pos, seen_idat, after_idat = None, None, 8, False, False
    view = memoryview(data)
    while True:
        if pos + 12 > len(data):
            return None  # no end chunk
        n, kind = struct.unpack_from(">I4s", data, pos)
        body = view[pos + 8:pos + 8 + n]
        if not _sound(data, pos, n, kind, body):
            return None
        if header is None:
            if kind != b"IHDR" or n != 13:
                return None
            header = struct.unpack(">IIBBBBB", body)
            if not _plain(header):
                return None
            rows = _Rows(header[1] * (1 + header[0] * CHANNELS[header[3]]))
        elif kind == b"IDAT":
            if after_idat or not rows.add(body):
                return None
            seen_idat = True
        elif kind == png_chunks.END:
            break
        elif kind in OPENCV_CHUNKS or not kind[0] & 0x20:  # bit 5 of the first letter clear: critical
            return None
        else:
            after_idat = seen_idat
        pos += 12 + n
    w, h, c = header[0], header[1], CHANNELS[header[3]]
    if not rows.whole():
        return None
    try:
        return png_codec.png_unfilter_u8(rows.data, h, w, c, swap_red_blue=c >= 3)
    except PipelineError:  # a row's filter type is not one of PNG's
        return None


class _Rows:
    """A PNG's image data inflated chunk by chunk as it is read, to at most `expected` bytes: nothing is kept per
    chunk (a view of each of 5 M empty IDATs took 1.5 GB), and one chunk's rows are not copied."""

    def __init__(self, expected: int):
        self.expected, self.data, self.inflater = expected, b"", deflate.decompressobj()

    def add(self, body) -> bool:
        """Inflate one IDAT's body; False when it does not inflate or gives more than the header's rows."""
        try:
            out = self.inflater.decompress(body, self.expected + 1 - len(self.data))
        except deflate.error:
            return False
        if out and not self.data:
            self.data = out
        elif out:  # a second chunk's rows: one buffer, appended in place
            if not isinstance(self.data, bytearray):
                self.data = bytearray(self.data)
            self.data += out
        return len(self.data) <= self.expected

    def whole(self) -> bool:
        return len(self.data) == self.expected and self.inflater.eof
