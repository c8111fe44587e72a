"""The PNG OpenCV's libpng is handed, so that libpng has nothing to print. libpng prints its warnings and errors on
stderr itself ('libpng warning: tEXt: CRC error', 'iCCP: known incorrect sRGB profile', 'IDAT: Too much image data'),
past the file's own line: what it would warn of is found here first and said as the file's note, what it would refuse
is refused here in one line (Damaged), and it gets only what changes the pixels it returns."""
from __future__ import annotations

import struct

import numpy as np

from pipeline.images import png_chunks
from pipeline.images.container import Damaged
from pipeline.images.png import OPENCV_CHUNKS, chunk, crc_matches, deflate

CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}  # samples per pixel of each PNG colour type
# Adam7's passes: (first column, first row, column step, row step)
ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))
LAST_FILTER = 4  # PNG's row filters are 0-4
STEP = 1 << 24  # bytes inflated at a time while checking
EXTRA = "decoded with warnings: its image data runs past the rows its header declares (the rest ignored)"


def for_opencv(data: bytes) -> tuple[bytes, list[str]]:
    """The PNG OpenCV decodes, and a note for each thing libpng would have warned of. It gets the critical chunks and
    those that change its pixels (OPENCV_CHUNKS): the rest are metadata, which pipeline.images.metadata reads from the
    file itself. An ancillary chunk whose CRC is wrong is left out (libpng skips it) with a note; image data that runs
    past the header's rows is cut to them with a note; anything libpng refuses is refused (Damaged)."""
    try:
        found = list(png_chunks.chunks(data))
    except Damaged:
        return data, []  # OpenCV's to refuse, as before (the length check refuses most such files first)
    view, kept, notes = memoryview(data), [memoryview(data)[:8]], []
    idat = [i for i, c in enumerate(found) if c.kind == png_chunks.IMAGE_DATA]
    if idat and idat[-1] - idat[0] + 1 != len(idat):  # libpng refuses the file
        raise Damaged("damaged PNG: its IDAT chunks are not consecutive")
    for c in found:
        critical, name = not c.kind[0] & 0x20, c.kind.decode("latin-1")
        if not png_chunks.proper_name(c.kind):  # libpng refuses the file
            raise Damaged(f"PNG chunk name {name!r} is not four letters with the reserved bit clear: a damaged file")
        if critical and c.kind not in png_chunks.CRITICAL:
            raise Damaged(f"PNG with a critical chunk {name!r} no reader knows (PNG requires a reader to refuse it)")
        if not crc_matches(data, c.kind, c.body(view), c.end - 4):
            if critical:
                raise Damaged(f"damaged PNG: its {name} chunk's CRC does not match its data")
            notes.append(f"decoded with warnings: its {name} chunk's CRC does not match (chunk ignored)")
        elif critical or c.kind in OPENCV_CHUNKS:
            kept.append(view[c.at:c.end])
    rewrapped = _image_data(data, [found[i] for i in idat])
    if rewrapped is not None:  # one IDAT of exactly the header's rows in place of the file's
        at = next(i for i, part in enumerate(kept) if bytes(part[4:8]) == png_chunks.IMAGE_DATA)
        kept[at:at + len(idat)] = [memoryview(rewrapped)]
        notes.append(EXTRA)
    return (data if len(kept) == len(found) + 1 and rewrapped is None else b"".join(kept)), notes


def _passes(header: tuple) -> tuple[list[tuple[int, int, int]], int] | None:
    """(where the pass's rows start in the inflated data, bytes per row with its filter byte, rows) of each pass
    (Adam7's seven, or the one of a PNG not interlaced) and the data's length; None for a header libpng refuses."""
    w, h, depth, color, _, _, interlace = header
    if color not in CHANNELS or interlace not in (0, 1) or not w or not h:
        return None
    bits, passes, pos = depth * CHANNELS[color], [], 0
    for x0, y0, dx, dy in ADAM7 if interlace else ((0, 0, 1, 1),):
        cols, rows = (w - x0 + dx - 1) // dx, (h - y0 + dy - 1) // dy
        if cols > 0 and rows > 0:
            stride = 1 + (cols * bits + 7) // 8
            passes.append((pos, stride, rows))
            pos += stride * rows
    return passes, pos


def _bad_filter(piece: np.ndarray, at: int, passes: list[tuple[int, int, int]]) -> bool:
    """Whether a row of `piece` (the inflated data from byte `at`) starts with a filter type PNG does not have."""
    for start, stride, rows in passes:
        lo, hi = max(at, start), min(at + len(piece), start + stride * rows)
        first = start + -(-(lo - start) // stride) * stride  # the first row start at or after lo
        if first < hi and bool((piece[first - at:hi - at:stride] > LAST_FILTER).any()):
            return True
    return False


def _image_data(data: bytes, idat: list) -> bytes | None:
    """Inflate the image data chunk by chunk, 16 MiB at a time (nothing kept), as libpng will: refused (Damaged) where
    libpng refuses it (a zlib error or a wrong Adler-32, fewer bytes than the header's rows, a filter type PNG lacks);
    where it holds more, a new IDAT chunk of exactly the header's rows (libpng would decode them with a warning); else
    None."""
    layout = _passes(struct.unpack_from(">IIBBBBB", data, 16)) if data[12:16] == b"IHDR" and idat else None
    if layout is None:
        return None  # no image data or a header libpng refuses: OpenCV's to refuse, as before
    passes, expected = layout
    inflater, got, extra, view = deflate.decompressobj(), 0, False, memoryview(data)
    try:
        for c in idat:
            pending = c.body(view)
            while len(pending) and not extra:
                if inflater.eof or got > expected:  # data past the stream's end, or past the rows
                    extra = True
                    break
                piece = np.frombuffer(inflater.decompress(pending, min(expected + 1 - got, STEP)), np.uint8)
                if _bad_filter(piece[:max(0, expected - got)], got, passes):
                    raise Damaged("damaged PNG: a row of its image data has a filter type PNG does not have")
                got, pending = got + len(piece), inflater.unconsumed_tail
                extra = extra or bool(inflater.unused_data)
    except deflate.error as e:
        raise Damaged(f"damaged PNG: its image data does not inflate ({e})") from None
    extra = extra or got > expected
    if got < expected or not (inflater.eof or extra):
        raise Damaged("damaged PNG: its image data ends before the rows its header declares")
    if not extra:
        return None
    rows = deflate.decompressobj().decompress(b"".join(c.body(view) for c in idat), expected)
    return b"".join(chunk(png_chunks.IMAGE_DATA, deflate.compress(rows, 0)))
