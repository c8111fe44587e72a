"""What the four container walkers (jpeg, png_chunks, riff, tiff) share: the two ways a walk stops on a damaged or
hostile file, and the chunk cap of PNG and WebP.

A walker raises PastEnd where a declared length runs past the end of the file (a 268-byte PNG whose IDAT said
2 GiB made OpenCV allocate 2-4 GB) and TooMany where a file holds more units than any encoder writes (issue 67:
5 M empty IDAT chunks took 1.5 GB, 200 MB of empty APP segments 545 s). The length check turns them into its
one-line refusal; the metadata reader keeps what it found before them; the header reader reports them as a
corrupt header.
"""
from __future__ import annotations

# Encoders write PNG image data in chunks of 8 KiB (libpng) to 64 KiB (Pillow), a WebP in a handful of chunks (one
# per frame): 10,000 chunks and one per KiB of file is far above any of them, and bounds the walks (ours and the
# decoder's) by the file's size.
CHUNKS_BASE, BYTES_PER_CHUNK = 10_000, 1024


class Damaged(ValueError):
    """A container walk stopped: the message is the one-line reason."""


class PastEnd(Damaged):
    """A unit (`what`, at byte `at`) declares `declared` bytes that run past the end of its container."""

    def __init__(self, what: str, at: int, declared: int, size: int):
        self.what, self.at, self.declared, self.size = what, at, declared, size
        super().__init__(f"{what} at byte {at:,} declares {declared:,} bytes, past the end of the file "
                         f"({size:,} bytes): a damaged or hostile file")


class TooMany(Damaged):
    """More units than any encoder writes; refused before a decoder (or a walk of ours) spends time on them."""


def max_chunks(size: int) -> int:
    """The most chunks a PNG or WebP of `size` bytes may have."""
    return CHUNKS_BASE + size // BYTES_PER_CHUNK


def too_many_chunks(fmt: str, most: int) -> TooMany:
    return TooMany(f"{fmt} of more than {most:,} chunks (one per KiB of file and 10,000 more): no encoder writes "
                   f"that many; refused before decoding (a hostile file)")
