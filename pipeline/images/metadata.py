"""An image's colour profile (ICC), EXIF and XMP, read from the input's bytes and carried into the output's (issue 59
item 2): JPEG (its APPn segments), PNG (iCCP, eXIf, iTXt chunks) and WebP (ICCP, EXIF, XMP chunks) both ways; a
TIFF input's profile and XMP (its IFD0 tags) are read, its EXIF dropped with a note; BMP and TIFF outputs say in
one line what they do not keep.
The containers are walked by their walkers (jpeg, png_chunks, riff, tiff), the same walks the header and length
checks make; this module decides which pieces are kept.

Metadata is data: it is copied as bytes, never interpreted beyond what a reader needs to read it back (issue 67). A
piece is kept only when a reader can: an ICC profile whose header gives its size, carries the `acsp` signature and
names the output's colour space (RGB on colour, GRAY on gray), whole (every APP2 segment of its sequence); an EXIF
block whose first directory lies within it; each piece at most 1 MiB (Pillow opens no PNG whose profile inflates to
more; real profiles are under 1 MiB, EXIF under 64 KiB). Anything else is dropped with one line (`notes`),
the image goes on. The walks hold views, not copies, so a file's metadata costs no more than what is kept.

Orientation: the EXIF tag (274 in IFD0, SHORT or LONG, the first of a repeat) is what we turn the pixels by for
JPEG, PNG and WebP (OpenCV ignores it there); a TIFF's own tag is applied by OpenCV's decoder (libtiff). XMP's
`tiff:Orientation` is applied by neither, so it is never applied here. The output's EXIF orientation is set to 1,
and its XMP orientation to 1 when the pixels were turned, so no viewer turns them again (pipeline.images.imageio).
"""
from __future__ import annotations

import re
import struct
import zlib
from dataclasses import dataclass

from pipeline.images import jpeg, riff, tiff
from pipeline.images import png_chunks as png_walk

MAX_BYTES = 1 << 20  # the most of any one piece kept: Pillow's PNG reader refuses a profile inflating to more
JPEG_EXIF, JPEG_XMP, JPEG_ICC = jpeg.EXIF[1], jpeg.XMP[1], jpeg.ICC[1]  # the names a JPEG's pieces start with
PNG_XMP_KEY = b"XML:com.adobe.xmp"
ICC_CHUNK = jpeg.ICC_PART  # profile bytes per APP2 segment
ORIENTATION = tiff.ORIENTATION  # in a TIFF's IFD0 and in EXIF's
ICC_SPACE = {True: b"GRAY", False: b"RGB "}  # the profile's colour space a gray / colour output takes
# XMP's orientation, as an attribute or an element (Pillow's pattern, with spaces and single quotes)
XMP_ORIENTATION = re.compile(rb"""(tiff:Orientation\s*(?:=\s*["']|>)\s*)(\d+)""")


@dataclass(frozen=True)
class Metadata:
    icc: bytes | None = None
    exif: bytes | None = None  # the TIFF-structured block ("II*\0" / "MM\0*" first); orientation 1 once fitted
    xmp: bytes | None = None
    orientation: int = 1  # the input's orientation tag (1-8; 1 when absent or invalid): EXIF's, or a TIFF's own
    notes: tuple[str, ...] = ()  # one line for each piece dropped as unreadable or too large

    def __bool__(self) -> bool:
        return bool(self.icc or self.exif or self.xmp)


NONE = Metadata()  # an image without metadata (or whose metadata is not carried)


class _Drop(ValueError):
    """A piece a reader could not read back: the message says why, for its one line."""


def read(data: bytes) -> Metadata:
    """The metadata of an encoded image, each piece checked (empty for formats and files where none is found; never
    raises: a damaged container reads as no metadata, a damaged piece is dropped with a note)."""
    try:
        if data[:2] == b"\xff\xd8":
            found = _read_jpeg(data)
        elif data[:8] == png_walk.SIGNATURE:
            found = _read_png(data)
        elif riff.is_webp(data):
            found = _read_webp(data)
        elif data[:4] in (b"II*\x00", b"MM\x00*"):
            found = _read_tiff(data)
        else:
            return NONE
    except (struct.error, ValueError, IndexError):  # a damaged container: the image goes on without its metadata
        return NONE
    return _checked(found)


def _checked(found: dict) -> Metadata:
    """Metadata of the pieces `found` (name -> bytes, a view, or a _Drop) that a reader can read back."""
    notes, kept = [], {}
    for name, what, check in (("icc", "colour profile", _icc_problem), ("exif", "EXIF", _exif_problem),
                              ("xmp", "XMP", None)):
        piece = found.get(name)
        try:
            if isinstance(piece, _Drop):
                raise piece
            if piece is None:
                continue
            if len(piece) > MAX_BYTES:
                raise _Drop(f"{len(piece):,} bytes, over the {MAX_BYTES >> 20} MiB kept: readers refuse larger")
            if check is not None:
                check(piece)
            kept[name] = bytes(piece)
        except (_Drop, struct.error) as e:
            notes.append(f"{what} dropped ({e if isinstance(e, _Drop) else 'damaged'})")
    orientation = found.get("orientation") or (_orientation(kept["exif"]) if "exif" in kept else 1)
    return Metadata(kept.get("icc"), kept.get("exif"), kept.get("xmp"), orientation, tuple(notes))


def _icc_problem(icc) -> None:
    """_Drop unless `icc` is an ICC profile by its header: its size, the `acsp` signature."""
    if len(icc) < 132:
        raise _Drop(f"{len(icc):,} bytes: too short for an ICC profile")
    size = int.from_bytes(icc[:4], "big")
    if size != len(icc):
        raise _Drop(f"its header says {size:,} bytes, it holds {len(icc):,}: not a whole ICC profile")
    if bytes(icc[36:40]) != b"acsp":
        raise _Drop("no 'acsp' signature: not an ICC profile")


def _ifd0(exif) -> tuple[str, int, int]:
    """(byte order, first entry, entry count) of an EXIF block's first directory; _Drop where it is damaged."""
    if bytes(exif[:4]) not in (b"II*\x00", b"MM\x00*") or len(exif) < 8:
        raise _Drop("damaged: no TIFF header")
    e = "<" if exif[:2] == b"II" else ">"
    ifd = struct.unpack_from(e + "I", exif, 4)[0]
    if ifd < 8 or ifd + 2 > len(exif):
        raise _Drop(f"damaged: its first directory at byte {ifd:,} lies outside its {len(exif):,} bytes")
    n = struct.unpack_from(e + "H", exif, ifd)[0]
    if ifd + 2 + 12 * n > len(exif):
        raise _Drop(f"damaged: its first directory's {n:,} entries run past its {len(exif):,} bytes")
    return e, ifd + 2, n


def _exif_problem(exif) -> None:
    _ifd0(exif)


def _orientation(exif) -> int:
    """IFD0's orientation (the first tag 274, BYTE, SHORT or LONG, as Pillow and exiftool take it): 1-8, else 1."""
    e, first, n = _ifd0(exif)
    for k in range(n):
        tag, typ, count = struct.unpack_from(e + "HHI", exif, first + 12 * k)
        if tag == ORIENTATION:
            fmt = {1: "B", 3: "H", 4: "I"}.get(typ)
            value = struct.unpack_from(e + fmt, exif, first + 12 * k + 8)[0] if fmt and count == 1 else 0
            return value if 1 <= value <= 8 else 1
    return 1


def upright(exif: bytes) -> bytes:
    """The EXIF block with every IFD0 orientation entry made SHORT 1 (normal), whatever type it had (a LONG 6 left
    in place made viewers turn the upright pixels again); _Drop when its directory is damaged."""
    e, first, n = _ifd0(exif)
    out = bytearray(exif)
    for k in range(n):
        at = first + 12 * k
        if struct.unpack_from(e + "H", out, at)[0] == ORIENTATION:
            struct.pack_into(e + "HHIHH", out, at, ORIENTATION, 3, 1, 1, 0)
    return bytes(out)


def fitted(meta: Metadata, gray: bool, turned: bool) -> Metadata:
    """`meta` as the output carries it: a profile of the output's colour space only (`gray`: a gray image), EXIF's
    orientation 1 (the pixels are upright), XMP's orientation 1 when the pixels were `turned`."""
    notes, icc = list(meta.notes), meta.icc
    if icc is not None and icc[16:20] != ICC_SPACE[gray]:
        space = icc[16:20].decode("latin-1").strip() or "?"
        notes.append(f"colour profile dropped (a {space} profile on a {'gray' if gray else 'colour'} image)")
        icc = None
    exif = upright(meta.exif) if meta.exif else None
    xmp = XMP_ORIENTATION.sub(rb"\g<1>1", meta.xmp) if meta.xmp and turned else meta.xmp
    return Metadata(icc, exif, xmp, meta.orientation, tuple(notes))


# -- reading ------------------------------------------------------------------------------------------------------

def _read_jpeg(data: bytes) -> dict:
    """The first EXIF and XMP segments and the ICC profile's segments (views), up to the first scan; the walk's cap
    is jpeg.MAX_SEGMENTS markers (the length check refuses a file with more)."""
    found, icc = {}, []
    for kind, body in jpeg.app_data(data, (jpeg.EXIF, jpeg.XMP, jpeg.ICC)):
        if kind == jpeg.ICC:
            if len(body) >= 2:
                icc.append((body[0], body[1], body[2:]))
        else:
            found.setdefault("exif" if kind == jpeg.EXIF else "xmp", body)
    if icc:
        found["icc"] = _icc_segments(icc)
    return found


def _icc_segments(parts: list) -> bytes | _Drop:
    """An ICC profile from its APP2 segments (sequence number, count, bytes): whole only when the segments are
    exactly 1..count of one count; _Drop otherwise, before any is joined."""
    counts = {count for _, count, _ in parts}
    numbers = sorted(seq for seq, _, _ in parts)
    count = counts.pop() if len(counts) == 1 else 0
    if numbers != list(range(1, count + 1)):
        return _Drop(f"its {len(parts)} APP2 segments are not one whole sequence (numbers "
                     f"{', '.join(map(str, numbers[:6]))}{', ...' if len(numbers) > 6 else ''} of {count or '?'})")
    size = sum(len(p) for _, _, p in parts)
    if size > MAX_BYTES:
        return _Drop(f"{size:,} bytes, over the {MAX_BYTES >> 20} MiB kept: readers refuse larger")
    return b"".join(p for _, _, p in sorted(parts, key=lambda part: part[0]))


def _inflate(data) -> bytes | _Drop:
    """A zlib stream inflated to at most MAX_BYTES (a _Drop beyond: a piece that big is not carried)."""
    d = zlib.decompressobj()
    try:
        out = d.decompress(data, MAX_BYTES + 1)
    except zlib.error:
        return _Drop("damaged: its compressed data does not inflate")
    if len(out) > MAX_BYTES:
        return _Drop(f"inflates past the {MAX_BYTES >> 20} MiB kept: readers refuse larger")
    return out if d.eof else _Drop("damaged: its compressed data is cut short")


def _read_png(data: bytes) -> dict:
    found = {}
    for kind, body in png_walk.before_image_data(data):
        if kind == b"iCCP" and "icc" not in found:
            name_end = bytes(body[:80]).find(b"\x00")
            found["icc"] = (_inflate(body[name_end + 2:]) if name_end > 0 and body[name_end + 1] == 0
                            else _Drop("damaged: not a zlib-compressed profile"))
        elif kind == b"eXIf" and "exif" not in found:
            found["exif"] = body
        elif kind == b"iTXt" and bytes(body[:len(PNG_XMP_KEY) + 1]) == PNG_XMP_KEY + b"\x00" and "xmp" not in found:
            found["xmp"] = _itxt_text(body[len(PNG_XMP_KEY) + 1:])
    return found


def _itxt_text(rest) -> bytes | _Drop:
    compressed, method = rest[0], rest[1]
    head = bytes(rest[2:2 + 1024])  # the language tag and translated keyword (short by nature)
    lang_end = head.find(b"\x00")
    text_at = head.find(b"\x00", lang_end + 1) if lang_end >= 0 else -1
    if text_at < 0:
        return _Drop("damaged: its iTXt chunk has no text")
    text = rest[2 + text_at + 1:]
    if not compressed:
        return text
    return _inflate(text) if method == 0 else _Drop("damaged: an unknown compression method")


def _read_webp(data: bytes) -> dict:
    found = {}
    for kind, body in riff.chunk_data(data):
        name = {b"ICCP": "icc", b"EXIF": "exif", b"XMP ": "xmp"}.get(kind)
        if name:
            found.setdefault(name, body)
    exif = found.get("exif")
    if exif is not None and bytes(exif[:len(JPEG_EXIF)]) == JPEG_EXIF:  # some writers keep JPEG's prefix
        found["exif"] = exif[len(JPEG_EXIF):]
    return found


def _read_tiff(data: bytes) -> dict:
    """A TIFF's ICC profile, XMP and orientation of its first IFD, the first of a repeated tag as libtiff reads them
    (tiff's walk); its EXIF (a directory at an offset into the file) is not lifted out: a note says so."""
    ifd = tiff.first_ifd(data)
    found = {}
    for name, tag in (("icc", tiff.ICC), ("xmp", tiff.XMP)):
        piece = tiff.blob(data, ifd, ifd.entries.get(tag))
        if piece is not None:
            found[name] = piece
    entry = ifd.entries.get(tiff.ORIENTATION)
    if entry is not None and entry.type in (3, 4) and entry.count == 1:  # SHORT, LONG
        v = tiff.first_integer(data, ifd, entry)
        found["orientation"] = v if 1 <= v <= 8 else 1
    if tiff.EXIF_IFD in ifd.entries:
        found["exif"] = _Drop("in a TIFF it is a directory pointing into the file: not lifted out here")
    return found


# -- writing ------------------------------------------------------------------------------------------------------

def png_chunks(meta: Metadata) -> list[tuple[bytes, bytes]]:
    """The chunks (name, data) a PNG carries `meta` in, to go after IHDR."""
    chunks = []
    if meta.icc:
        chunks.append((b"iCCP", b"ICC Profile\x00\x00" + zlib.compress(meta.icc)))
    if meta.exif:
        chunks.append((b"eXIf", meta.exif))
    if meta.xmp:
        chunks.append((b"iTXt", PNG_XMP_KEY + b"\x00\x00\x00\x00\x00" + meta.xmp))
    return chunks


def embed_jpeg(data: bytes, meta: Metadata) -> bytes:
    """A JPEG with `meta`'s segments after its JFIF header (APP0, when it has one)."""
    segments = []  # a piece too big for its segment is not written (dropped() says so)
    if meta.exif and len(meta.exif) <= jpeg.room(jpeg.EXIF):
        segments.append(jpeg.segment(jpeg.EXIF, meta.exif))
    if meta.xmp and len(meta.xmp) <= jpeg.room(jpeg.XMP):
        segments.append(jpeg.segment(jpeg.XMP, meta.xmp))
    if meta.icc:
        parts = [meta.icc[i:i + ICC_CHUNK] for i in range(0, len(meta.icc), ICC_CHUNK)]
        if len(parts) <= 255:
            segments += [jpeg.segment(jpeg.ICC, bytes([k + 1, len(parts)]) + p) for k, p in enumerate(parts)]
    return jpeg.insert_segments(data, b"".join(segments))


def embed_webp(data: bytes, meta: Metadata, width: int, height: int, alpha: bool) -> bytes:
    """A WebP in the extended layout (VP8X) with `meta`'s ICCP, EXIF and XMP chunks where the format puts them."""
    chunks = [(k, b) for k, b in riff.chunk_data(data) if k not in (b"VP8X", b"ICCP", b"EXIF", b"XMP ")]
    flags = (0x20 if meta.icc else 0) | (0x10 if alpha else 0) | (0x08 if meta.exif else 0) | (0x04 if meta.xmp else 0)
    vp8x = struct.pack("<I", flags) + (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    order = [(b"VP8X", vp8x)] + ([(b"ICCP", meta.icc)] if meta.icc else []) + chunks
    order += ([(b"EXIF", meta.exif)] if meta.exif else []) + ([(b"XMP ", meta.xmp)] if meta.xmp else [])
    return riff.container(order)


def dropped(meta: Metadata, fmt: str) -> list[str]:
    """One note for each piece of `meta` dropped on reading (meta.notes) and for what a `fmt` output cannot carry:
    everything in BMP and TIFF (no embed support here), EXIF or XMP too big for a JPEG's one segment."""
    notes = list(meta.notes)
    if fmt in ("bmp", "tiff") and meta:
        what = [name for name, piece in (("colour profile", meta.icc), ("EXIF", meta.exif), ("XMP", meta.xmp))
                if piece]
        holds = "bmp holds none" if fmt == "bmp" else "not written into tiff here; png, jpg and webp keep them"
        notes.append(f"{' and '.join(what)} dropped ({holds})")
    elif fmt == "jpg":
        for what, piece, kind in (("EXIF", meta.exif, jpeg.EXIF), ("XMP", meta.xmp, jpeg.XMP)):
            if piece and len(piece) > jpeg.room(kind):
                notes.append(f"{what} dropped ({len(piece):,} bytes; a JPEG holds {jpeg.room(kind):,} "
                             f"in its one segment; png and webp keep it)")
    return notes
