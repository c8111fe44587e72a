"""A JPEG's markers, walked once for the header, the length check and the metadata reader, and the metadata
segments written: the one place JPEG's marker layout and its APPn segments are read or written.

`segments(data)` yields each marker segment from the start of image to the first start of scan (or end of image),
fill bytes and markers without a length stepped over: each within the file (else PastEnd), at most MAX_SEGMENTS
steps (else TooMany), a marker where one must be (else NotAMarker). `scan_markers` goes on from the first scan.
"""
from __future__ import annotations

import itertools
import re
import struct
from collections.abc import Iterator
from typing import NamedTuple

from pipeline.images.container import Damaged, PastEnd, TooMany

SOI, EOI, SOS, APP0, APP1, APP2 = 0xD8, 0xD9, 0xDA, 0xE0, 0xE1, 0xE2
# Markers (and fill bytes) before a JPEG's first scan: an ICC profile at most 255 APP2 segments, EXIF and XMP one
# each, tables a few; 10,000 leaves room for any real file.
MAX_SEGMENTS = 10_000
# Scans of a progressive JPEG: libjpeg's default script writes 10 (6 for gray), mozjpeg's search a few dozen; each
# scan is a pass over the whole image's coefficients, so the count bounds the decoder's time.
MAX_SCANS = 500
SEGMENT_DATA = 65533  # bytes in one segment after its length field
# Where a JPEG keeps metadata: (marker, the name its data starts with). EXIF and XMP each take one APP1 segment; an
# ICC profile a sequence of APP2 segments, each naming its number and the count after the name.
EXIF = (APP1, b"Exif\x00\x00")
XMP = (APP1, b"http://ns.adobe.com/xap/1.0/\x00")
ICC = (APP2, b"ICC_PROFILE\x00")
ICC_PART = SEGMENT_DATA - len(ICC[1]) - 2  # profile bytes per APP2 segment (65519)
# A marker: 0xFF and a byte that is not stuffing (0), a restart (D0-D7) or fill (FF; the last FF of a run matches).
# No `\xff+`: a repeat makes the search ~25x slower (0.9 s on a 28 MB photo, 38 ms without).
_MARKER = re.compile(rb"\xff([^\x00\xd0-\xd7\xff])", re.DOTALL)


class NotAMarker(Damaged):
    """A byte other than 0xFF where a marker must start."""


class Segment(NamedTuple):
    marker: int  # the byte after 0xFF
    at: int  # where its 0xFF is
    length: int  # its length field (which counts itself)

    @property
    def data_at(self) -> int:
        return self.at + 4

    @property
    def end(self) -> int:
        return self.at + 2 + self.length


def _without_length(marker: int) -> bool:
    return marker == 0x01 or 0xD0 <= marker <= 0xD7  # TEM, restarts


def is_frame(marker: int) -> bool:
    """Whether `marker` starts a frame (SOF0-SOF15, not DHT, JPG or DAC), whose header holds the image's size."""
    return 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC)


def segments(data: bytes) -> Iterator[Segment]:
    """Each segment up to and with the first start of scan or end of image; stops where fewer than 4 bytes are
    left."""
    i, steps = 2, 0
    while i + 4 <= len(data):
        if data[i] != 0xFF:
            raise NotAMarker(f"a byte 0x{data[i]:02X} at byte {i:,} where a marker must start")
        steps += 1
        if steps > MAX_SEGMENTS:
            raise TooMany(f"JPEG of more than {MAX_SEGMENTS:,} markers before its first scan: no encoder writes "
                          f"that many; refused before decoding (a hostile file)")
        marker = data[i + 1]
        if marker == 0xFF or _without_length(marker):  # a fill byte; a marker without a length
            i += 1 if marker == 0xFF else 2
            continue
        (length,) = struct.unpack_from(">H", data, i + 2)
        if i + 2 + length > len(data):
            raise PastEnd(f"segment 0x{marker:02X}", i, length, len(data))
        yield Segment(marker, i, length)
        if marker in (SOS, EOI):
            return
        i += 2 + length


def scan_markers(data: bytes, first: int) -> Iterator[int]:
    """The markers from the first scan (its segment at `first`) to the end of image, without it: at most MAX_SCANS
    scans and MAX_SEGMENTS markers (else TooMany). In entropy-coded data 0xFF is followed by 0x00 or a restart
    marker, so the regular expression finds exactly the markers between scans, searching in C; data after the end
    of image (a motion photo's video) is not read."""
    pos, scans = first, 0
    for count in itertools.count(1):
        m = _MARKER.search(data, pos)
        if m is None or m[1][0] == EOI:
            return
        marker, at = m[1][0], m.end()
        scans += marker == SOS
        if scans > MAX_SCANS or count > MAX_SEGMENTS:
            what = f"{MAX_SCANS} scans" if scans > MAX_SCANS else f"{MAX_SEGMENTS:,} markers"
            raise TooMany(f"JPEG of more than {what} (each scan is a pass over the whole image; no encoder writes "
                          f"that many): refused before decoding (a hostile file)")
        yield marker
        if marker == 0x01 or at + 2 > len(data):  # a marker without a length; the end
            pos = at
            continue
        pos = at + struct.unpack_from(">H", data, at)[0]  # past the segment (a scan's header; its data is searched)


def app_data(data: bytes, kinds: tuple[tuple[int, bytes], ...]) -> Iterator[tuple[tuple[int, bytes], memoryview]]:
    """(kind, data after the kind's name) of each segment before the first scan that is one of `kinds` (EXIF, XMP,
    ICC); a damaged or hostile marker sequence ends it (the length check refuses such a file before decoding)."""
    view = memoryview(data)
    try:
        for s in segments(data):
            for kind in kinds:
                marker, name = kind
                if s.marker == marker and data.startswith(name, s.data_at, s.end):
                    yield kind, view[s.data_at + len(name):s.end]
                    break
    except Damaged:
        return


def segment(kind: tuple[int, bytes], data: bytes) -> bytes:
    """A segment of `kind` (EXIF, XMP, ICC) holding `data` after its name."""
    marker, name = kind
    return struct.pack(">BBH", 0xFF, marker, len(name) + len(data) + 2) + name + data


def room(kind: tuple[int, bytes]) -> int:
    """The most bytes one segment of `kind` holds after its name."""
    return SEGMENT_DATA - len(kind[1])


def insert_segments(data: bytes, segments_: bytes) -> bytes:
    """A JPEG with `segments_` after its JFIF header (APP0, when it has one)."""
    at = 2
    if data[2:4] == bytes((0xFF, APP0)):
        at = 4 + struct.unpack_from(">H", data, 4)[0]
    return data[:at] + segments_ + data[at:]


def truncation_problem(data: bytes) -> str | None:
    """Why a JPEG is cut short (decoders fill the missing rows with gray), or None: its end of image must come after
    its last start of scan."""
    end = data.rfind(bytes((0xFF, EOI)))
    if end < data.rfind(bytes((0xFF, SOS))) or end < 0:
        return "truncated JPEG (no end-of-image marker)"
    return None
