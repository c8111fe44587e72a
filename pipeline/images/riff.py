"""A WebP's RIFF container, walked once for the length check and the metadata reader, and written
for the metadata writer: the one place the container's layout (`RIFF`, its size, `WEBP`, chunks padded to an even
length) is read or written.

`chunks(data)` yields each chunk (name, where it starts, its length): the container within the file and each
chunk within the container (else PastEnd), no more than max_chunks of them (else TooMany).
"""
from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

from pipeline.images.container import Damaged, PastEnd, max_chunks, too_many_chunks


class Chunk(NamedTuple):
    kind: bytes  # the chunk's four-character name ("VP8 ", "VP8L", "VP8X", "ICCP", "EXIF", "XMP ", ...)
    at: int  # where its name starts
    length: int  # the bytes of its data (without the padding byte)

    def body(self, view: memoryview) -> memoryview:
        return view[self.at + 8:self.at + 8 + self.length]


def is_webp(data: bytes) -> bool:
    return data[:4] == b"RIFF" and data[8:12] == b"WEBP"


def chunks(data: bytes) -> Iterator[Chunk]:
    """Each chunk of the container, in order."""
    (size,) = struct.unpack_from("<I", data, 4)
    if 8 + size > len(data):
        raise PastEnd("the RIFF container", 0, size, len(data))
    pos, stop, count, most = 12, 8 + size, 0, max_chunks(len(data))
    while pos + 8 <= stop:
        count += 1
        if count > most:
            raise too_many_chunks("WebP", most)
        kind, n = struct.unpack_from("<4sI", data, pos)
        if pos + 8 + n > stop:
            raise PastEnd(f"chunk {kind.decode('latin-1')!r}", pos, n, len(data))
        yield Chunk(kind, pos, n)
        pos += 8 + n + (n & 1)  # chunks are padded to an even length


def chunk_data(data: bytes) -> Iterator[tuple[bytes, memoryview]]:
    """(name, data view) of each chunk; a damaged or hostile chunk sequence ends it (the length check refuses such
    a file before decoding)."""
    view = memoryview(data)
    try:
        for c in chunks(data):
            yield c.kind, c.body(view)
    except Damaged:
        return


def container(parts: list[tuple[bytes, bytes]]) -> bytes:
    """A WebP file of the chunks `parts` (name, data), in order."""
    body = b"".join(struct.pack("<4sI", k, len(b)) + b + (b"\x00" if len(b) & 1 else b"") for k, b in parts)
    return b"RIFF" + struct.pack("<I", 4 + len(body)) + b"WEBP" + body
