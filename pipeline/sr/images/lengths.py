"""The lengths an image file declares, checked against the file before any decoder sees it: a 268-byte PNG whose
IDAT says 2 GiB made OpenCV allocate the declared length (2-4 GB a file). Each check walks only the container's
structure (PNG chunks, JPEG segments up to the scan, TIFF strips and tiles, WebP's RIFF chunks) and returns the
one-line reason a length runs past the end of the file, or None; the pixel limit is image_header's question.
"""
from __future__ import annotations

import struct

PNG_MAX_LENGTH = 2**31 - 1  # PNG's own limit on a chunk's length (and on each side)
# TIFF tags whose values are where the image data lies and how long it is: strips, then tiles.
TIFF_DATA_TAGS = ((273, 279), (324, 325))
TIFF_TYPES = {3: "H", 4: "I", 16: "Q"}  # SHORT, LONG, LONG8


def _past_end(what: str, at: int, declared: int, size: int) -> str:
    return (f"{what} at byte {at:,} declares {declared:,} bytes, past the end of the file ({size:,} bytes): "
            f"a damaged or hostile file")


def png_problem(d: bytes) -> str | None:
    """Every chunk up to IEND within the file (and within PNG's 2^31 - 1 bytes)."""
    pos = 8
    while pos + 8 <= len(d):
        n, kind = struct.unpack_from(">I4s", d, pos)
        name = kind.decode("latin-1")
        if n > PNG_MAX_LENGTH or pos + 12 + n > len(d):
            return "corrupt PNG: " + _past_end(f"chunk {name!r}", pos, n, len(d))
        if kind == b"IEND":
            return None
        pos += 12 + n
    return None  # no IEND: the truncation check says so


def jpeg_problem(d: bytes) -> str | None:
    """Every marker segment up to the start of scan within the file."""
    i = 2
    while i + 4 <= len(d) and d[i] == 0xFF:
        marker = d[i + 1]
        if marker == 0xFF or marker in (0x01, *range(0xD0, 0xD8)):  # fill byte, markers without a length
            i += 1 if marker == 0xFF else 2
            continue
        (length,) = struct.unpack_from(">H", d, i + 2)
        if i + 2 + length > len(d):
            return "corrupt JPEG: " + _past_end(f"segment 0x{marker:02X}", i, length, len(d))
        if marker in (0xD9, 0xDA):  # end of image, start of scan: entropy-coded data follows
            return None
        i += 2 + length
    return None  # a broken marker sequence is the header reader's to report


def _tiff_values(d: bytes, end: str, big: bool, entry: int) -> tuple[int, list[int]]:
    """(tag, values) of one IFD entry of SHORT/LONG/LONG8 values, read where they lie (in the entry or at an
    offset); struct.error when they run past the end."""
    head = end + ("HHQ" if big else "HHI")
    tag, typ, count = struct.unpack_from(head, d, entry)
    fmt = TIFF_TYPES.get(typ)
    if fmt is None:
        return tag, []
    inline = 8 if big else 4
    size = struct.calcsize(fmt) * count
    at = entry + struct.calcsize(head)
    if size > inline:
        (at,) = struct.unpack_from(end + ("Q" if big else "I"), d, at)
        if at + size > len(d):
            raise struct.error("values past the end")
    return tag, list(struct.unpack_from(f"{end}{count}{fmt}", d, at))


def _tiff_entries(d: bytes) -> dict[int, list[int]]:
    """The first IFD's SHORT/LONG/LONG8 entries (struct.error where the structure runs past the end)."""
    end = "<" if d[:2] == b"II" else ">"
    big = struct.unpack_from(end + "H", d, 2)[0] == 43
    ifd = struct.unpack_from(end + ("Q" if big else "I"), d, 8 if big else 4)[0]
    n = struct.unpack_from(end + ("Q" if big else "H"), d, ifd)[0]
    first, size = ifd + (8 if big else 2), (20 if big else 12)
    if first + n * size > len(d):
        raise struct.error("entries past the end")
    return dict(_tiff_values(d, end, big, first + k * size) for k in range(min(n, 4096)))


def tiff_problem(d: bytes) -> str | None:
    """Every strip and tile (offset + byte count) within the file."""
    try:
        tags = _tiff_entries(d)
    except struct.error:
        return f"corrupt TIFF: its directory runs past the end of the file ({len(d):,} bytes)"
    for offsets_tag, counts_tag in TIFF_DATA_TAGS:
        what = "strip" if offsets_tag == 273 else "tile"
        for k, (at, n) in enumerate(zip(tags.get(offsets_tag, []), tags.get(counts_tag, []), strict=False)):
            if at + n > len(d):
                return "corrupt TIFF: " + _past_end(f"{what} {k} (at byte {at:,})", at, n, len(d))
    return None


def webp_problem(d: bytes) -> str | None:
    """The RIFF container and each chunk in it within the file."""
    (riff,) = struct.unpack_from("<I", d, 4)
    if 8 + riff > len(d):
        return "corrupt WebP: " + _past_end("the RIFF container", 0, riff, len(d))
    pos, stop = 12, 8 + riff
    while pos + 8 <= stop:
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
