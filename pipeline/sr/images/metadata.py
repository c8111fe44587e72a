"""An image's colour profile (ICC), EXIF and XMP, read from the input's bytes and carried into the output's (issue 59
item 2): JPEG (APP1/APP2 segments), PNG (iCCP, eXIf, iTXt chunks) and WebP (RIFF ICCP, EXIF, XMP chunks) both ways;
a TIFF input's profile and XMP (its IFD0 tags) are read; BMP and TIFF outputs say in one line what they do not keep.

Metadata is data: it is copied as bytes, never interpreted beyond the EXIF orientation tag, and each piece is bounded
(MAX_BYTES; a compressed profile is inflated no further). EXIF's orientation is reset to 1 (normal): the pixels are
already turned upright when read (pipeline.sr.images.imageio).
"""
from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

MAX_BYTES = 16 << 20  # the most of any one piece carried (real ICC profiles are under 1 MiB, EXIF under 64 KiB)
JPEG_EXIF = b"Exif\x00\x00"
JPEG_XMP = b"http://ns.adobe.com/xap/1.0/\x00"
JPEG_ICC = b"ICC_PROFILE\x00"
PNG_XMP_KEY = b"XML:com.adobe.xmp"
ICC_CHUNK = 65519  # profile bytes per APP2 segment: 65535 - 2 (length) - 14 (name, sequence, count)


@dataclass(frozen=True)
class Metadata:
    icc: bytes | None = None
    exif: bytes | None = None  # the TIFF-structured block ("II*\0" / "MM\0*" first), orientation 1
    xmp: bytes | None = None

    def __bool__(self) -> bool:
        return bool(self.icc or self.exif or self.xmp)


NONE = Metadata()  # an image without metadata (or whose metadata is not carried)


def _bounded(data: bytes | None) -> bytes | None:
    return bytes(data) if data and len(data) <= MAX_BYTES else None


def read(data: bytes) -> Metadata:
    """The metadata of an encoded image (empty for formats and files where none is found; never raises)."""
    try:
        if data[:2] == b"\xff\xd8":
            meta = _read_jpeg(data)
        elif data[:8] == b"\x89PNG\r\n\x1a\n":
            meta = _read_png(data)
        elif data[:4] == b"RIFF" and data[8:12] == b"WEBP":
            meta = _read_webp(data)
        elif data[:4] in (b"II*\x00", b"MM\x00*"):
            meta = _read_tiff(data)
        else:
            return Metadata()
    except (struct.error, zlib.error, ValueError, IndexError):  # damaged metadata: the image goes on without it
        return Metadata()
    return Metadata(_bounded(meta.icc), _bounded(upright(meta.exif)) if meta.exif else None, _bounded(meta.xmp))


# -- reading ------------------------------------------------------------------------------------------------------

def _read_jpeg(data: bytes) -> Metadata:
    exif = xmp = None
    icc: dict[int, bytes] = {}
    pos = 2
    while pos + 4 <= len(data) and data[pos] == 0xFF:
        marker = data[pos + 1]
        if marker == 0xDA or marker == 0xD9:  # start of scan: no metadata after it
            break
        n = struct.unpack_from(">H", data, pos + 2)[0]
        body = data[pos + 4:pos + 2 + n]
        if marker == 0xE1 and body.startswith(JPEG_EXIF) and exif is None:
            exif = body[len(JPEG_EXIF):]
        elif marker == 0xE1 and body.startswith(JPEG_XMP) and xmp is None:
            xmp = body[len(JPEG_XMP):]
        elif marker == 0xE2 and body.startswith(JPEG_ICC) and len(body) > 14:
            icc.setdefault(body[12], body[14:])
        pos += 2 + n
    profile = b"".join(icc[k] for k in sorted(icc)) if icc and sorted(icc) == list(range(1, len(icc) + 1)) else None
    return Metadata(profile, exif, xmp)


def _inflate(data: bytes) -> bytes | None:
    """A zlib stream inflated to at most MAX_BYTES (None beyond: a profile that big is not carried)."""
    d = zlib.decompressobj()
    out = d.decompress(data, MAX_BYTES + 1)
    return out if len(out) <= MAX_BYTES and d.eof else None


def _png_chunks(data: bytes):
    pos = 8
    while pos + 12 <= len(data):
        n, kind = struct.unpack_from(">I4s", data, pos)
        if pos + 12 + n > len(data) or kind in (b"IDAT", b"IEND"):
            return
        yield kind, data[pos + 8:pos + 8 + n]
        pos += 12 + n


def _read_png(data: bytes) -> Metadata:
    icc = exif = xmp = None
    for kind, body in _png_chunks(data):
        if kind == b"iCCP" and icc is None:
            name_end = body.index(b"\x00")
            icc = _inflate(body[name_end + 2:]) if body[name_end + 1] == 0 else None
        elif kind == b"eXIf" and exif is None:
            exif = body
        elif kind == b"iTXt" and body.startswith(PNG_XMP_KEY + b"\x00") and xmp is None:
            xmp = _itxt_text(body[len(PNG_XMP_KEY) + 1:])
    return Metadata(icc, exif, xmp)


def _itxt_text(rest: bytes) -> bytes | None:
    compressed, method = rest[0], rest[1]
    lang_end = rest.index(b"\x00", 2)
    text = rest[rest.index(b"\x00", lang_end + 1) + 1:]
    if not compressed:
        return text
    return _inflate(text) if method == 0 else None


def _webp_chunks(data: bytes):
    end = min(len(data), 8 + struct.unpack_from("<I", data, 4)[0])
    pos = 12
    while pos + 8 <= end:
        kind, n = struct.unpack_from("<4sI", data, pos)
        if pos + 8 + n > end:
            return
        yield kind, data[pos + 8:pos + 8 + n]
        pos += 8 + n + (n & 1)


def _read_webp(data: bytes) -> Metadata:
    found = {kind: body for kind, body in _webp_chunks(data) if kind in (b"ICCP", b"EXIF", b"XMP ")}
    exif = found.get(b"EXIF")
    if exif and exif.startswith(JPEG_EXIF):  # some writers keep JPEG's prefix
        exif = exif[len(JPEG_EXIF):]
    return Metadata(found.get(b"ICCP"), exif, found.get(b"XMP "))


def _read_tiff(data: bytes) -> Metadata:
    """A TIFF's ICC profile (tag 34675) and XMP (700) of its first IFD; its EXIF (offsets into the file) is not
    lifted out."""
    e = "<" if data[:2] == b"II" else ">"
    ifd = struct.unpack_from(e + "I", data, 4)[0]
    count = struct.unpack_from(e + "H", data, ifd)[0]
    found = {}
    for i in range(count):
        tag, kind, n, value = struct.unpack_from(e + "HHII", data, ifd + 2 + 12 * i)
        if tag in (34675, 700) and kind in (1, 7) and n > 4 and value + n <= len(data):
            found[tag] = data[value:value + n]
    return Metadata(found.get(34675), None, found.get(700))


def upright(exif: bytes) -> bytes | None:
    """The EXIF block with IFD0's orientation (tag 274) set to 1; None when it is no TIFF structure."""
    if exif[:4] not in (b"II*\x00", b"MM\x00*"):
        return None
    e = "<" if exif[:2] == b"II" else ">"
    out = bytearray(exif)
    ifd = struct.unpack_from(e + "I", out, 4)[0]
    for i in range(struct.unpack_from(e + "H", out, ifd)[0]):
        entry = ifd + 2 + 12 * i
        if struct.unpack_from(e + "HH", out, entry) == (274, 3):  # SHORT, its value in the entry itself
            struct.pack_into(e + "H", out, entry + 8, 1)
    return bytes(out)


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
    segments = []
    if meta.exif and len(meta.exif) + len(JPEG_EXIF) <= 65533:
        segments.append(_segment(0xE1, JPEG_EXIF + meta.exif))
    if meta.xmp and len(meta.xmp) + len(JPEG_XMP) <= 65533:
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
    """One note for what a `fmt` output cannot carry of `meta` (formats without embed support here)."""
    if fmt not in ("bmp", "tiff") or not meta:
        return []
    what = [name for name, piece in (("colour profile", meta.icc), ("EXIF", meta.exif), ("XMP", meta.xmp)) if piece]
    holds = "bmp holds none" if fmt == "bmp" else "not written into tiff here; png, jpg and webp keep them"
    return [f"{' and '.join(what)} dropped ({holds})"]
