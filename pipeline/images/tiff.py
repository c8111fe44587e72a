"""A TIFF's first directory (IFD), walked once for the header, the length check and the metadata reader: the one
place TIFF's layout (byte order, classic and BigTIFF offsets, entries, where a value lies) is read.

`first_ifd(data)` gives the first directory's entries, the first of a repeated tag as libtiff (and so OpenCV)
reads them: a file saying 12000x12000 and then 16x16 is decoded at 12000x12000, and every reader here takes
12000x12000 too. The directory must lie within the file (else PastEnd); a tag of more than MAX_VALUES values is
refused before they are read (TooMany).
"""
from __future__ import annotations

import struct
from typing import NamedTuple

from pipeline.images.container import PastEnd, TooMany

# The tags read here (TIFF 6.0; ICC and XMP from their own specifications)
WIDTH, LENGTH, ORIENTATION = 256, 257, 274
STRIP_OFFSETS, STRIP_COUNTS, TILE_OFFSETS, TILE_COUNTS = 273, 279, 324, 325
XMP, ICC = 700, 34675
EXIF_IFD = 0x8769  # the EXIF directory's offset: into the file, so a TIFF's EXIF is not lifted out (metadata.py)
INTEGERS = {3: "H", 4: "I", 16: "Q"}  # SHORT, LONG, LONG8
BYTES = (1, 7)  # BYTE, UNDEFINED: a blob (an ICC profile, XMP)
MAX_ENTRIES = 4096  # entries of the first directory read (real files have a few dozen)
# Values of one entry (strip or tile offsets and counts): one 16x16 tile (TIFF's smallest) per 256 pixels of a
# 268-megapixel image; more is refused before its values are read (each a Python int: 100 M of them took GBs).
MAX_VALUES = 1 << 20


class Entry(NamedTuple):
    tag: int
    type: int
    count: int
    at: int  # where its value field starts: the value itself when it fits there, else its offset


class Ifd(NamedTuple):
    order: str  # "<" or ">", for struct
    big: bool  # BigTIFF: 8-byte counts and offsets, 8-byte value fields
    entries: dict[int, Entry]  # the first of each tag

    @property
    def field(self) -> int:
        """Bytes of an entry's value field."""
        return 8 if self.big else 4


def first_ifd(data: bytes) -> Ifd:
    """The first directory; struct.error where the header itself is cut short."""
    order = "<" if data[:2] == b"II" else ">"
    big = struct.unpack_from(order + "H", data, 2)[0] == 43
    ifd = struct.unpack_from(order + ("Q" if big else "I"), data, 8 if big else 4)[0]
    n = struct.unpack_from(order + ("Q" if big else "H"), data, ifd)[0]
    first, size = ifd + (8 if big else 2), (20 if big else 12)
    if first + n * size > len(data):
        raise PastEnd("the first directory", ifd, n * size, len(data))
    head = order + ("HHQ" if big else "HHI")
    entries: dict[int, Entry] = {}
    for k in range(min(n, MAX_ENTRIES)):
        at = first + k * size
        tag, typ, count = struct.unpack_from(head, data, at)
        entries.setdefault(tag, Entry(tag, typ, count, at + (12 if big else 8)))
    return Ifd(order, big, entries)


def integers(data: bytes, ifd: Ifd, entry: Entry | None) -> list[int]:
    """An entry's SHORT/LONG/LONG8 values, read where they lie ([] for another type or no entry); TooMany over
    MAX_VALUES, PastEnd when they run past the end."""
    if entry is None or entry.type not in INTEGERS:
        return []
    if entry.count > MAX_VALUES:
        raise TooMany(f"TIFF tag {entry.tag} of {entry.count:,} values, over the {MAX_VALUES:,} any image within "
                      f"the pixel limit needs: refused before decoding (a hostile file)")
    fmt = INTEGERS[entry.type]
    size = struct.calcsize(fmt) * entry.count
    at = entry.at
    if size > ifd.field:
        (at,) = struct.unpack_from(ifd.order + ("Q" if ifd.big else "I"), data, at)
        if at + size > len(data):
            raise PastEnd(f"the values of tag {entry.tag}", at, size, len(data))
    return list(struct.unpack_from(f"{ifd.order}{entry.count}{fmt}", data, at))


def first_integer(data: bytes, ifd: Ifd, entry: Entry) -> int | None:
    """The first value of a SHORT/LONG/LONG8 entry, from its value field (None for another type)."""
    fmt = INTEGERS.get(entry.type)
    return None if fmt is None else struct.unpack_from(ifd.order + fmt, data, entry.at)[0]


def blob(data: bytes, ifd: Ifd, entry: Entry | None) -> memoryview | None:
    """A BYTE/UNDEFINED entry's bytes (a view) when they lie at an offset within the file, else None."""
    if entry is None or entry.type not in BYTES or entry.count <= ifd.field:
        return None
    (at,) = struct.unpack_from(ifd.order + ("Q" if ifd.big else "I"), data, entry.at)
    return memoryview(data)[at:at + entry.count] if at + entry.count <= len(data) else None
