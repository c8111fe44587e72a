"""The lengths an image file declares, checked against the file before any decoder sees it: a 268-byte PNG whose
IDAT says 2 GiB made OpenCV allocate the declared length (2-4 GB a file). Each check walks only the container's
structure (PNG chunks, JPEG segments up to the scan, TIFF strips and tiles, WebP's RIFF chunks) and returns the
one-line reason a length runs past the end of the file, or None; the pixel limit is image_header's question.

The walks are bounded too (issue 67): a PNG of more chunks, or a JPEG of more segments before its first scan or
more scans, than any encoder writes is refused before a decoder (or our own walks, at ~1 us a step) spends time on
them: 5 M empty IDAT chunks took 1.5 GB, 200 MB of empty APP segments 545 s, 20,000 progressive scans 20-300 s.
"""
from __future__ import annotations

import re
import struct

PNG_MAX_LENGTH = 2**31 - 1  # PNG's own limit on a chunk's length (and on each side)
# TIFF tags whose values are where the image data lies and how long it is: strips, then tiles.
TIFF_DATA_TAGS = ((273, 279), (324, 325))
TIFF_TYPES = {3: "H", 4: "I", 16: "Q"}  # SHORT, LONG, LONG8
# Encoders write PNG image data in chunks of 8 KiB (libpng) to 64 KiB (Pillow), a WebP in a handful of chunks (one
# per frame): 10,000 chunks and one per KiB of file is far above any of them, and bounds the walks (ours and the
# decoder's) by the file's size.
CHUNKS_BASE, BYTES_PER_CHUNK = 10_000, 1024
# Values of one TIFF entry (strip or tile offsets and counts): one 16x16 tile (TIFF's smallest) per 256 pixels of a
# 268-megapixel image; more is refused before its values are read (each a Python int: 100 M of them took GBs).
TIFF_MAX_VALUES = 1 << 20
# Markers (and fill bytes) before a JPEG's first scan: an ICC profile at most 255 APP2 segments, EXIF and XMP one
# each, tables a few; 10,000 leaves room for any real file.
JPEG_MAX_SEGMENTS = 10_000
# Scans of a progressive JPEG: libjpeg's default script writes 10 (6 for gray), mozjpeg's search a few dozen; each
# scan is a pass over the whole image's coefficients, so the count bounds the decoder's time.
JPEG_MAX_SCANS = 500
# A marker: 0xFF and a byte that is not stuffing (0), a restart (D0-D7) or fill (FF; the last FF of a run matches).
# No `\xff+`: a repeat makes the search ~25x slower (0.9 s on a 28 MB photo, 38 ms without).
_MARKER = re.compile(rb"\xff([^\x00\xd0-\xd7\xff])", re.DOTALL)


def _past_end(what: str, at: int, declared: int, size: int) -> str:
    return (f"{what} at byte {at:,} declares {declared:,} bytes, past the end of the file ({size:,} bytes): "
            f"a damaged or hostile file")


def max_chunks(size: int) -> int:
    """The most chunks a PNG or WebP of `size` bytes may have."""
    return CHUNKS_BASE + size // BYTES_PER_CHUNK


def _too_many_chunks(fmt: str, most: int) -> str:
    return (f"{fmt} of more than {most:,} chunks (one per KiB of file and 10,000 more): no encoder writes that many; "
            f"refused before decoding (a hostile file)")


def png_problem(d: bytes) -> str | None:
    """Every chunk up to IEND within the file (and within PNG's 2^31 - 1 bytes), and no more chunks than
    max_chunks."""
    pos, chunks, most = 8, 0, max_chunks(len(d))
    while pos + 8 <= len(d):
        chunks += 1
        if chunks > most:
            return _too_many_chunks("PNG", most)
        n, kind = struct.unpack_from(">I4s", d, pos)
        name = kind.decode("latin-1")
        if n > PNG_MAX_LENGTH or pos + 12 + n > len(d):
            return "corrupt PNG: " + _past_end(f"chunk {name!r}", pos, n, len(d))
        if kind == b"IEND":
            return None
        pos += 12 + n
    return None  # no IEND: the truncation check says so


def jpeg_problem(d: bytes) -> str | None:
    """Every marker segment up to the start of scan within the file, at most JPEG_MAX_SEGMENTS of them, and at most
    JPEG_MAX_SCANS scans."""
    i, steps = 2, 0
    while i + 4 <= len(d) and d[i] == 0xFF:
        steps += 1
        if steps > JPEG_MAX_SEGMENTS:
            return (f"JPEG of more than {JPEG_MAX_SEGMENTS:,} markers before its first scan: no encoder writes that "
                    f"many; refused before decoding (a hostile file)")
        marker = d[i + 1]
        if marker == 0xFF or marker in (0x01, *range(0xD0, 0xD8)):  # fill byte, markers without a length
            i += 1 if marker == 0xFF else 2
            continue
        (length,) = struct.unpack_from(">H", d, i + 2)
        if i + 2 + length > len(d):
            return "corrupt JPEG: " + _past_end(f"segment 0x{marker:02X}", i, length, len(d))
        if marker == 0xDA:  # start of scan: entropy-coded data follows
            return _scans_problem(d, i)
        if marker == 0xD9:  # end of image
            return None
        i += 2 + length
    return None  # a broken marker sequence is the header reader's to report


def _scans_problem(d: bytes, first: int) -> str | None:
    """More than JPEG_MAX_SCANS scans (or JPEG_MAX_SEGMENTS markers) from the first scan at `first` to the end of
    the image. In entropy-coded data 0xFF is followed by 0x00 or a restart marker, so the regular expression finds
    exactly the markers between scans, searching in C; data after the end of image (a motion photo's video) is not
    read."""
    scans = markers = 0
    pos = first
    while (m := _MARKER.search(d, pos)) is not None:
        marker, at = m[1][0], m.end()
        if marker == 0xD9:  # end of image
            break
        scans += marker == 0xDA
        markers += 1
        if scans > JPEG_MAX_SCANS or markers > JPEG_MAX_SEGMENTS:
            what = f"{JPEG_MAX_SCANS} scans" if scans > JPEG_MAX_SCANS else f"{JPEG_MAX_SEGMENTS:,} markers"
            return (f"JPEG of more than {what} (each scan is a pass over the whole image; no encoder writes "
                    f"that many): refused before decoding (a hostile file)")
        if marker == 0x01 or at + 2 > len(d):  # a marker without a length; the end
            pos = at
            continue
        pos = at + struct.unpack_from(">H", d, at)[0]  # past the segment (a scan's header; its data is searched)
    return None


class _TooManyValues(ValueError):
    """A TIFF entry of more than TIFF_MAX_VALUES values: the one-line reason."""


def _tiff_values(d: bytes, end: str, big: bool, entry: int) -> tuple[int, list[int]]:
    """(tag, values) of one IFD entry of SHORT/LONG/LONG8 values, read where they lie (in the entry or at an
    offset); struct.error when they run past the end."""
    head = end + ("HHQ" if big else "HHI")
    tag, typ, count = struct.unpack_from(head, d, entry)
    fmt = TIFF_TYPES.get(typ)
    if fmt is None:
        return tag, []
    if count > TIFF_MAX_VALUES:
        raise _TooManyValues(f"TIFF tag {tag} of {count:,} values, over the {TIFF_MAX_VALUES:,} any image within "
                             f"the pixel limit needs: refused before decoding (a hostile file)")
    inline = 8 if big else 4
    size = struct.calcsize(fmt) * count
    at = entry + struct.calcsize(head)
    if size > inline:
        (at,) = struct.unpack_from(end + ("Q" if big else "I"), d, at)
        if at + size > len(d):
            raise struct.error("values past the end")
    return tag, list(struct.unpack_from(f"{end}{count}{fmt}", d, at))


def _tiff_entries(d: bytes) -> dict[int, list[int]]:
    """The first IFD's SHORT/LONG/LONG8 entries, the first of a repeated tag as libtiff reads them (struct.error
    where the structure runs past the end)."""
    end = "<" if d[:2] == b"II" else ">"
    big = struct.unpack_from(end + "H", d, 2)[0] == 43
    ifd = struct.unpack_from(end + ("Q" if big else "I"), d, 8 if big else 4)[0]
    n = struct.unpack_from(end + ("Q" if big else "H"), d, ifd)[0]
    first, size = ifd + (8 if big else 2), (20 if big else 12)
    if first + n * size > len(d):
        raise struct.error("entries past the end")
    entries: dict[int, list[int]] = {}
    for k in range(min(n, 4096)):
        tag, values = _tiff_values(d, end, big, first + k * size)
        entries.setdefault(tag, values)
    return entries


def tiff_problem(d: bytes) -> str | None:
    """Every strip and tile (offset + byte count) within the file."""
    try:
        tags = _tiff_entries(d)
    except struct.error:
        return f"corrupt TIFF: its directory runs past the end of the file ({len(d):,} bytes)"
    except _TooManyValues as e:
        return str(e)
    for offsets_tag, counts_tag in TIFF_DATA_TAGS:
        what = "strip" if offsets_tag == 273 else "tile"
        for k, (at, n) in enumerate(zip(tags.get(offsets_tag, []), tags.get(counts_tag, []), strict=False)):
            if at + n > len(d):
                return "corrupt TIFF: " + _past_end(f"{what} {k} (at byte {at:,})", at, n, len(d))
    return None


def webp_problem(d: bytes) -> str | None:
    """The RIFF container and each chunk in it within the file, and no more chunks than max_chunks."""
    (riff,) = struct.unpack_from("<I", d, 4)
    if 8 + riff > len(d):
        return "corrupt WebP: " + _past_end("the RIFF container", 0, riff, len(d))
    pos, stop, chunks, most = 12, 8 + riff, 0, max_chunks(len(d))
    while pos + 8 <= stop:
        chunks += 1
        if chunks > most:
            return _too_many_chunks("WebP", most)
        kind, n = struct.unpack_from("<4sI", d, pos)
        if pos + 8 + n > stop:
            return "corrupt WebP: " + _past_end(f"chunk {kind.decode('latin-1')!r}", pos, n, len(d))
        pos += 8 + n + (n & 1)  # chunks are padded to an even length
    return None


PROBLEMS = {"png": png_problem, "jpg": jpeg_problem, "tiff": tiff_problem, "webp": webp_problem}


def length_problem(fmt: str | None, data: bytes) -> str | None:
    """Why a `fmt` file's declared lengths cannot be what it holds, or None (BMP and unknown formats: nothing to
    walk)."""
    check = PROBLEMS.get(fmt)
    return check(data) if check else None
