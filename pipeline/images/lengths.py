"""The lengths an image file declares, checked against the file before any decoder sees it: a 268-byte PNG whose
IDAT says 2 GiB made OpenCV allocate the declared length (2-4 GB a file). Each check walks the container with its
walker (png_chunks, jpeg, tiff, riff: the caps are theirs) and returns the one-line reason a length runs past the
end of the file, or the file holds more units than any encoder writes, or None; the pixel limit is header's
question.
"""
from __future__ import annotations

import struct

from pipeline.images import jpeg, png_chunks, riff, tiff
from pipeline.images.container import Damaged, PastEnd, TooMany

# TIFF tags whose values are where the image data lies and how long it is: strips, then tiles.
TIFF_DATA_TAGS = ((tiff.STRIP_OFFSETS, tiff.STRIP_COUNTS), (tiff.TILE_OFFSETS, tiff.TILE_COUNTS))


def _problem(fmt: str, e: Damaged) -> str:
    return f"corrupt {fmt}: {e}" if isinstance(e, PastEnd) else str(e)


def png_problem(d: bytes) -> str | None:
    """Every chunk up to the end chunk within the file (and within PNG's 2^31 - 1 bytes), and no more chunks than
    max_chunks."""
    try:
        for _ in png_chunks.chunks(d):
            pass
    except Damaged as e:
        return _problem("PNG", e)
    return None  # no end chunk: the truncation check says so


def jpeg_problem(d: bytes) -> str | None:
    """Every marker segment up to the start of scan within the file, at most jpeg.MAX_SEGMENTS of them, and at most
    jpeg.MAX_SCANS scans (and jpeg.MAX_SEGMENTS markers) from there to the end of image."""
    try:
        for s in jpeg.segments(d):
            if s.marker == jpeg.SOS:  # start of scan: entropy-coded data follows
                for _ in jpeg.scan_markers(d, s.at):
                    pass
    except jpeg.NotAMarker:
        return None  # a broken marker sequence is the header reader's to report
    except Damaged as e:
        return _problem("JPEG", e)
    return None


def tiff_problem(d: bytes) -> str | None:
    """Every strip and tile (offset + byte count) within the file, and no entry of more values than any image
    within the pixel limit needs."""
    try:
        ifd = tiff.first_ifd(d)
        values = {tag: tiff.integers(d, ifd, entry) for tag, entry in ifd.entries.items()}
    except (struct.error, PastEnd):
        return f"corrupt TIFF: its directory runs past the end of the file ({len(d):,} bytes)"
    except TooMany as e:
        return str(e)
    for offsets_tag, counts_tag in TIFF_DATA_TAGS:
        what = "strip" if offsets_tag == tiff.STRIP_OFFSETS else "tile"
        for k, (at, n) in enumerate(zip(values.get(offsets_tag, []), values.get(counts_tag, []), strict=False)):
            if at + n > len(d):
                return "corrupt TIFF: " + str(PastEnd(f"{what} {k} (at byte {at:,})", at, n, len(d)))
    return None


def webp_problem(d: bytes) -> str | None:
    """The WebP container and each chunk in it within the file, and no more chunks than max_chunks."""
    try:
        for _ in riff.chunks(d):
            pass
    except Damaged as e:
        return _problem("WebP", e)
    return None


PROBLEMS = {"png": png_problem, "jpg": jpeg_problem, "tiff": tiff_problem, "webp": webp_problem}


def length_problem(fmt: str | None, data: bytes) -> str | None:
    """Why a `fmt` file's declared lengths cannot be what it holds, or None (BMP and unknown formats: nothing to
    walk)."""
    check = PROBLEMS.get(fmt)
    return check(data) if check else None
