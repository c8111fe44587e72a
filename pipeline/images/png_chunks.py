"""A PNG's chunks, walked once for the length check, the metadata reader and our PNG reader: the one place PNG's
chunk layout (length, name, data, CRC) and its end chunk are read.

`chunks(data)` yields each chunk (name, where it starts, its length) from the signature to the end chunk: every
one within the file and within PNG's 2^31 - 1 bytes (else PastEnd), no more than max_chunks of them (else TooMany).
"""
from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

from pipeline.images.container import Damaged, PastEnd, max_chunks, too_many_chunks

SIGNATURE = b"\x89PNG\r\n\x1a\n"
END = b"IEND"  # the end chunk: a PNG without one is cut short
IMAGE_DATA = b"IDAT"
CRITICAL = frozenset({b"IHDR", b"PLTE", IMAGE_DATA, END})  # PNG's critical chunks: a file with another is refused
PNG_MAX_LENGTH = 2**31 - 1  # PNG's own limit on a chunk's length (and on each side)


class Chunk(NamedTuple):
    kind: bytes  # the chunk's four-letter name
    at: int  # where its length field starts
    length: int  # the bytes of its data

    @property
    def data_at(self) -> int:
        return self.at + 8

    @property
    def end(self) -> int:
        """Where the next chunk starts (after the data and the CRC)."""
        return self.at + 12 + self.length

    def body(self, view: memoryview) -> memoryview:
        return view[self.at + 8:self.at + 8 + self.length]


def proper_name(kind: bytes) -> bool:
    """Whether a chunk name is four ASCII letters with the reserved bit (the third letter's bit 5) clear: libpng
    refuses a file with any other."""
    return kind.isalpha() and not kind[2] & 0x20


def chunks(data: bytes) -> Iterator[Chunk]:
    """Each chunk up to and with the end chunk (a file without one: up to its last whole chunk header)."""
    pos, count, most = 8, 0, max_chunks(len(data))
    while pos + 8 <= len(data):
        count += 1
        if count > most:
            raise too_many_chunks("PNG", most)
        n, kind = struct.unpack_from(">I4s", data, pos)
        if n > PNG_MAX_LENGTH or pos + 12 + n > len(data):
            raise PastEnd(f"chunk {kind.decode('latin-1')!r}", pos, n, len(data))
        yield Chunk(kind, pos, n)
        if kind == END:
            return
        pos += 12 + n


def before_image_data(data: bytes) -> Iterator[tuple[bytes, memoryview]]:
    """(name, data view) of each chunk before the first image data (where PNG puts the metadata); a damaged or
    hostile chunk sequence ends it (the length check refuses such a file before decoding)."""
    view = memoryview(data)
    try:
        for c in chunks(data):
            if c.kind in (IMAGE_DATA, END):
                return
            yield c.kind, c.body(view)
    except Damaged:
        return


def truncation_problem(data: bytes) -> str | None:
    """Why a PNG is cut short (decoders fill a missing end with gray), or None."""
    return "truncated PNG (no IEND chunk)" if data.rfind(END) < 0 else None
