"""An image's colour profile (ICC), EXIF and XMP, read from the input's bytes and carried into the output's (issue 59
item 2): JPEG (APP1/APP2 segments), PNG (iCCP, eXIf, iTXt chunks) and WebP (RIFF ICCP, EXIF, XMP chunks) both ways;
a TIFF input's profile and XMP (its IFD0 tags) are read; BMP and TIFF outputs say in one line what they do not keep.

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

from pipeline.images.lengths import JPEG_MAX_SEGMENTS, max_chunks

MAX_BYTES = 1 << 20  # the most of any one piece kept: Pillow's PNG reader refuses a profile inflating to more
JPEG_EXIF = b"Exif\x00\x00"
JPEG_XMP = b"http://ns.adobe.com/xap/1.0/\x00"
JPEG_ICC = b"ICC_PROFILE\x00"
PNG_XMP_KEY = b"XML:com.adobe.xmp"
ICC_CHUNK = 65519  # profile bytes per APP2 segment: 65535 - 2 (length) - 14 (name, sequence, count)
JPEG_SEGMENT = 65533  # bytes in one APP1 segment after its length: EXIF and XMP each take one
ORIENTATION = 274
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
        elif data[:8] == b"\x89PNG\r\n\x1a\n":
            found = _read_png(data)
        elif data[:4] == b"RIFF" and data[8:12] == b"WEBP":
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
    """The first EXIF and XMP APP1 segments and the ICC profile's APP2 segments (views), up to the first scan; at
    most JPEG_MAX_SEGMENTS markers (lengths.jpeg_problem refuses a file with more)."""
    view, found, icc = memoryview(data), {}, []
    pos = 2
    for _ in range(JPEG_MAX_SEGMENTS):
        if pos + 4 > len(data) or data[pos] != 0xFF:
            break
        marker = data[pos + 1]
        if marker == 0xFF or marker in (0x01, *range(0xD0, 0xD8)):  # a fill byte, a marker without a length
            pos += 1 if marker == 0xFF else 2
            continue
        if marker in (0xDA, 0xD9):  # start of scan: no metadata after it
            break
        n = struct.unpack_from(">H", data, pos + 2)[0]
        body, end = pos + 4, min(pos + 2 + n, len(data))
        if marker == 0xE1 and data.startswith(JPEG_EXIF, body, end):
            found.setdefault("exif", view[body + len(JPEG_EXIF):end])
        elif marker == 0xE1 and data.startswith(JPEG_XMP, body, end):
            found.setdefault("xmp", view[body + len(JPEG_XMP):end])
        elif marker == 0xE2 and data.startswith(JPEG_ICC, body, end) and end - body >= 14:
            icc.append((data[body + 12], data[body + 13], view[body + 14:end]))
        pos += 2 + n
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


def _png_chunks(data: bytes):
    """(name, body view) of each chunk before the image data; at most max_chunks of them."""
    pos, view = 8, memoryview(data)
    for _ in range(max_chunks(len(data))):
        if pos + 12 > len(data):
            return
        n, kind = struct.unpack_from(">I4s", data, pos)
        if pos + 12 + n > len(data) or kind in (b"IDAT", b"IEND"):
            return
        yield kind, view[pos + 8:pos + 8 + n]
        pos += 12 + n


def _read_png(data: bytes) -> dict:
    found = {}
    for kind, body in _png_chunks(data):
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


def _webp_chunks(data: bytes):
    end = min(len(data), 8 + struct.unpack_from("<I", data, 4)[0])
    pos, view = 12, memoryview(data)
    for _ in range(max_chunks(len(data))):
        if pos + 8 > end:
            return
        kind, n = struct.unpack_from("<4sI", data, pos)
        if pos + 8 + n > end:
            return
        yield kind, view[pos + 8:pos + 8 + n]
        pos += 8 + n + (n & 1)


def _read_webp(data: bytes) -> dict:
    found = {}
    for kind, body in _webp_chunks(data):
        name = {b"ICCP": "icc", b"EXIF": "exif", b"XMP ": "xmp"}.get(kind)
        if name:
            found.setdefault(name, body)
    exif = found.get("exif")
    if exif is not None and bytes(exif[:len(JPEG_EXIF)]) == JPEG_EXIF:  # some writers keep JPEG's prefix
        found["exif"] = exif[len(JPEG_EXIF):]
    return found


def _read_tiff(data: bytes) -> dict:
    """A TIFF's ICC profile (tag 34675), XMP (700) and orientation (274) of its first IFD, the first of a repeated
    tag as libtiff reads them; its EXIF (offsets into the file) is not lifted out."""
    e = "<" if data[:2] == b"II" else ">"
    ifd = struct.unpack_from(e + "I", data, 4)[0]
    count = struct.unpack_from(e + "H", data, ifd)[0]
    view, found = memoryview(data), {}
    for i in range(min(count, 4096)):
        tag, kind, n, value = struct.unpack_from(e + "HHII", data, ifd + 2 + 12 * i)
        name = {34675: "icc", 700: "xmp"}.get(tag)
        if name and kind in (1, 7) and n > 4 and value + n <= len(data):
            found.setdefault(name, view[value:value + n])
        elif tag == ORIENTATION and "orientation" not in found and kind in (3, 4) and n == 1:
            v = struct.unpack_from(e + ("H" if kind == 3 else "I"), data, ifd + 2 + 12 * i + 8)[0]
            found["orientation"] = v if 1 <= v <= 8 else 1
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


def _segment(marker: int, body: bytes) -> bytes:
    return struct.pack(">BBH", 0xFF, marker, len(body) + 2) + body


def embed_jpeg(data: bytes, meta: Metadata) -> bytes:
    """A JPEG with `meta`'s segments after its JFIF header (APP0, when it has one)."""
    segments = []  # a piece too big for its segment is not written (dropped() says so)
    if meta.exif and len(meta.exif) + len(JPEG_EXIF) <= JPEG_SEGMENT:
        segments.append(_segment(0xE1, JPEG_EXIF + meta.exif))
    if meta.xmp and len(meta.xmp) + len(JPEG_XMP) <= JPEG_SEGMENT:
        segments.append(_segment(0xE1, JPEG_XMP + meta.xmp))
    if meta.icc:
        parts = [meta.icc[i:i + ICC_CHUNK] for i in range(0, len(meta.icc), ICC_CHUNK)]
        if len(parts) <= 255:
            segments += [_segment(0xE2, JPEG_ICC + bytes([k + 1, len(parts)]) + p) for k, p in enumerate(parts)]
    at = 2
    if data[2:4] == b"\xff\xe0":
        at = 4 + struct.unpack_from(">H", data, 4)[0]
    return data[:at] + b"".join(segments) + data[at:]


def embed_webp(data: bytes, meta: Metadata, width: int, height: int, alpha: bool) -> bytes:
    """A WebP in the extended layout (VP8X) with `meta`'s ICCP, EXIF and XMP chunks where the format puts them."""
    chunks = [(k, b) for k, b in _webp_chunks(data) if k not in (b"VP8X", b"ICCP", b"EXIF", b"XMP ")]
    flags = (0x20 if meta.icc else 0) | (0x10 if alpha else 0) | (0x08 if meta.exif else 0) | (0x04 if meta.xmp else 0)
    vp8x = struct.pack("<I", flags) + (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    order = [(b"VP8X", vp8x)] + ([(b"ICCP", meta.icc)] if meta.icc else []) + chunks
    order += ([(b"EXIF", meta.exif)] if meta.exif else []) + ([(b"XMP ", meta.xmp)] if meta.xmp else [])
    body = b"".join(struct.pack("<4sI", k, len(b)) + b + (b"\x00" if len(b) & 1 else b"") for k, b in order)
    return b"RIFF" + struct.pack("<I", 4 + len(body)) + b"WEBP" + body


def dropped(meta: Metadata, fmt: str) -> list[str]:
    """One note for each piece of `meta` dropped on reading (meta.notes) and for what a `fmt` output cannot carry:
    everything in BMP and TIFF (no embed support here), EXIF or XMP too big for a JPEG's one APP1 segment."""
    notes = list(meta.notes)
    if fmt in ("bmp", "tiff") and meta:
        what = [name for name, piece in (("colour profile", meta.icc), ("EXIF", meta.exif), ("XMP", meta.xmp))
                if piece]
        holds = "bmp holds none" if fmt == "bmp" else "not written into tiff here; png, jpg and webp keep them"
        notes.append(f"{' and '.join(what)} dropped ({holds})")
    elif fmt == "jpg":
        for what, piece, prefix in (("EXIF", meta.exif, JPEG_EXIF), ("XMP", meta.xmp, JPEG_XMP)):
            if piece and len(piece) + len(prefix) > JPEG_SEGMENT:
                notes.append(f"{what} dropped ({len(piece):,} bytes; a JPEG holds {JPEG_SEGMENT - len(prefix):,} "
                             f"in its one segment; png and webp keep it)")
    return notes
