"""Image size from the file's header, read before any decoding, so a small file that claims a huge image (a
decompression bomb) is refused before a decoder allocates for it.

Only the five formats we read are accepted (PNG, JPEG, BMP, TIFF, WebP): OpenCV decodes by content, not by name, so
a `.png` holding another format's header would otherwise skip this check. The limit is MAX_PIXELS (width x
height), raised or lowered with the SRDEPLOY_MAX_PIXELS environment variable.
"""
from __future__ import annotations

import os
import struct

from pipeline.images import jpeg, png_chunks, riff, tiff
from pipeline.images.container import Damaged
from pipeline.images.lengths import length_problem

# 100 megapixels: a 10000x10000 input (x3 -> 900 MP output). A 16-bit RGBA image this size decodes to 800 MB.
MAX_PIXELS = 100_000_000
MAX_PIXELS_ENV = "SRDEPLOY_MAX_PIXELS"


class HeaderError(ValueError):
    """The header is unreadable, names an unsupported format, or claims more pixels than allowed."""


def max_pixels() -> int:
    """The pixel limit: SRDEPLOY_MAX_PIXELS when set (a positive integer), else MAX_PIXELS."""
    raw = os.environ.get(MAX_PIXELS_ENV, "").strip()
    if not raw:
        return MAX_PIXELS
    try:
        value = int(raw.replace("_", ""))
    except ValueError:
        value = 0
    if value < 1:
        raise HeaderError(f"{MAX_PIXELS_ENV}={raw!r} is not a positive integer (pixels, width x height)")
    return value


def max_file_bytes() -> int:
    """Largest image file read: uncompressed 16-bit RGBA at the pixel limit, plus 64 MiB of metadata."""
    try:
        return max_pixels() * 8 + (64 << 20)
    except HeaderError:  # a bad SRDEPLOY_MAX_PIXELS is reported by check_header
        return MAX_PIXELS * 8 + (64 << 20)


def _png(d: bytes) -> tuple[int, int]:
    if len(d) < 24 or d[12:16] != b"IHDR":
        raise HeaderError("corrupt PNG header (no IHDR chunk first)")
    return struct.unpack(">II", d[16:24])


def _jpeg(d: bytes) -> tuple[int, int]:
    try:
        for seg in jpeg.segments(d):
            if jpeg.is_frame(seg.marker):
                if seg.at + 9 > len(d):
                    break
                h, w = struct.unpack_from(">HH", d, seg.at + 5)
                return w, h
            if seg.marker in (jpeg.EOI, jpeg.SOS) or seg.length < 2:  # no frame before the image data
                break
    except jpeg.NotAMarker:
        raise HeaderError("corrupt JPEG header (marker expected)") from None
    except Damaged:  # past the end, too many markers: the length check's to say (it runs first)
        pass
    raise HeaderError("corrupt JPEG header (no frame header)")


def _bmp(d: bytes) -> tuple[int, int]:
    if len(d) < 26:
        raise HeaderError("corrupt BMP header")
    (size,) = struct.unpack("<I", d[14:18])
    if size == 12:  # OS/2 BITMAPCOREHEADER
        w, h = struct.unpack("<HH", d[18:22])
    else:
        w, h = struct.unpack("<ii", d[18:26])
    return abs(w), abs(h)  # a negative height means top-down rows


def _tiff(d: bytes) -> tuple[int, int]:
    """Width and length of the first IFD, the first of a repeated tag as libtiff (and so OpenCV) reads them (tiff)."""
    try:
        ifd = tiff.first_ifd(d)
        width, length = ifd.entries.get(tiff.WIDTH), ifd.entries.get(tiff.LENGTH)
        if width is None or length is None:
            raise HeaderError("corrupt TIFF header (no image width or length)")
        w, h = tiff.first_integer(d, ifd, width), tiff.first_integer(d, ifd, length)
    except (struct.error, Damaged):
        raise HeaderError("corrupt TIFF header") from None
    if w is None or h is None:
        raise HeaderError("corrupt TIFF header (image size of an unknown type)")
    return w, h


def _webp(d: bytes) -> tuple[int, int]:
    chunk = d[12:16]
    if chunk == b"VP8X" and len(d) >= 30:
        return int.from_bytes(d[24:27], "little") + 1, int.from_bytes(d[27:30], "little") + 1
    if chunk == b"VP8 " and len(d) >= 30:
        w, h = struct.unpack("<HH", d[26:30])
        return w & 0x3FFF, h & 0x3FFF
    if chunk == b"VP8L" and len(d) >= 25:
        (bits,) = struct.unpack("<I", d[21:25])
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    raise HeaderError("corrupt WebP header")


def sniff(data: bytes) -> str | None:
    """The format a file's first bytes name (of the five we read), or None."""
    if data[:8] == png_chunks.SIGNATURE:
        return "png"
    if data[:3] == b"\xff\xd8\xff":
        return "jpg"
    if data[:2] == b"BM":
        return "bmp"
    if data[:4] in (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+"):
        return "tiff"
    if riff.is_webp(data):
        return "webp"
    return None


SIZE_READERS = {"png": _png, "jpg": _jpeg, "bmp": _bmp, "tiff": _tiff, "webp": _webp}


def image_size(data: bytes) -> tuple[str, int, int]:
    """(format, width, height) from the header; HeaderError for another format or a corrupt header."""
    fmt = sniff(data)
    if fmt is None:
        raise HeaderError("not a readable image: not a PNG, JPEG, BMP, TIFF or WebP file (unrecognised header)")
    return (fmt, *SIZE_READERS[fmt](data))


def check_header(data: bytes) -> tuple[str, int, int]:
    """image_size, refusing more than max_pixels() pixels (HeaderError saying the size, the limit, how to raise
    it), images with no pixels and declared lengths the file cannot hold (image_lengths)."""
    problem = length_problem(sniff(data), data)  # first: a length past the end also hides a JPEG's frame header
    if problem:
        raise HeaderError(problem)
    fmt, w, h = image_size(data)
    if w < 1 or h < 1:
        raise HeaderError(f"{fmt} header claims an image with no pixels ({w}x{h})")
    problem = over_limit(w, h, "image")
    if problem:
        raise HeaderError(problem)
    return fmt, w, h


def over_limit(w: int, h: int, what: str) -> str | None:
    """The one-line refusal of a w x h picture over max_pixels() (`what`: "image", "video", "frame 7", ...), or
    None. HeaderError for a bad SRDEPLOY_MAX_PIXELS."""
    limit = max_pixels()
    if w * h <= limit:
        return None
    mp = f"{w * h / 1e6:.0f}" if w * h >= 1e6 else f"{w * h / 1e6:.2g}"
    return (f"{what} is {w}x{h} ({mp} megapixels), over the limit of {limit:,} pixels that guards "
            f"against decompression bombs; if you mean it, raise the limit with {MAX_PIXELS_ENV}={w * h}")
