"""The sr stage's PNG reader (pipeline.images.png.decode_png: ISA-L's inflate and our C++ unfilter): for plain
8-bit PNGs the very array OpenCV's IMREAD_UNCHANGED gives, whoever wrote the file; everything else is left to OpenCV
(None), damaged files included, so their errors stay OpenCV's."""
from __future__ import annotations

import io
import struct
import zlib

import cv2
import numpy as np
import pytest
from PIL import Image as PILImage
from PIL import PngImagePlugin

from pipeline.images import imageio, png

pytestmark = pytest.mark.usefixtures("png_library")


def _opencv(data: bytes):
    return cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)


def _as_opencv_says(data: bytes, name: str) -> None:
    """imageio.decode reads `data` as OpenCV does, or refuses it where OpenCV does."""
    expected = _opencv(data)
    if expected is None:
        with pytest.raises(imageio.ImageError):
            imageio.decode(data)
        return
    if expected.ndim == 3 and expected.shape[2] == 2:  # gray + alpha: imageio expands it to BGRA
        g, a = expected[:, :, 0], expected[:, :, 1]
        expected = np.stack([g, g, g, a], axis=2)
    assert np.array_equal(imageio.decode(data).pixels, expected), name


def _pillow(arr: np.ndarray, mode: str, **kw) -> bytes:
    buf = io.BytesIO()
    PILImage.fromarray(arr, mode).save(buf, "PNG", **kw)
    return buf.getvalue()


def _chunks(data: bytes) -> list[tuple[bytes, bytes]]:
    out, pos = [], 8
    while pos < len(data):
        n, kind = struct.unpack_from(">I4s", data, pos)
        out.append((kind, data[pos + 8:pos + 8 + n]))
        pos += 12 + n
    return out


def _file(chunks: list[tuple[bytes, bytes]]) -> bytes:
    return png.SIGNATURE + b"".join(struct.pack(">I", len(body)) + kind + body
                                    + struct.pack(">I", zlib.crc32(body, zlib.crc32(kind))) for kind, body in chunks)


def _image(h=37, w=53, seed=0):
    rng = np.random.default_rng(seed)
    smooth = np.linspace(0, 255, h * w * 4).reshape(h, w, 4)
    return np.where(rng.random((h, w, 4)) < 0.3, rng.integers(0, 256, (h, w, 4)), smooth).astype(np.uint8)


@pytest.mark.parametrize("mode", ["L", "RGB", "RGBA"])
def test_plain_pngs_from_every_writer_read_as_opencv_reads_them(mode):
    """Pillow at every compression (its filters and zlib's levels, text and ICC chunks), OpenCV's own writer at levels
    0, 1 and 9, and ours: the same array as OpenCV, by the fast path."""
    rgba = _image()
    arr = {"L": rgba[:, :, 0], "RGB": rgba[:, :, :3], "RGBA": rgba}[mode]
    info = PngImagePlugin.PngInfo()
    info.add_text("Comment", "a text chunk, ancillary")
    files = [_pillow(arr, mode, compress_level=level, pnginfo=info) for level in (0, 1, 6, 9)]
    files.append(_pillow(arr, mode, optimize=True))
    if mode != "L":  # an sRGB profile in an iCCP chunk: OpenCV does not apply it
        from PIL import ImageCms

        files.append(_pillow(arr, mode, icc_profile=ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()))
    bgr = arr if mode == "L" else cv2.cvtColor(arr, cv2.COLOR_RGB2BGR if mode == "RGB" else cv2.COLOR_RGBA2BGRA)
    files += [cv2.imencode(".png", bgr, [cv2.IMWRITE_PNG_COMPRESSION, level])[1].tobytes() for level in (0, 1, 9)]
    files.append(png.encode_png(bgr))
    for i, data in enumerate(files):
        ours = png.decode_png(data)
        assert ours is not None, i
        assert ours.dtype == np.uint8 and np.array_equal(ours, _opencv(data)), i


def test_other_pngs_are_left_to_opencv():
    """Palette, transparency, 16-bit, gray + alpha, interlaced, APNG-like, unknown critical chunks and a chunk name with
    the reserved bit set (libpng refuses it): None, and imageio.decode reads or refuses them as OpenCV does."""
    rgba = _image()
    plain = _pillow(rgba[:, :, :3], "RGB")
    ihdr = dict(_chunks(plain))[b"IHDR"]
    interlaced = _file([(kind, ihdr[:12] + b"\x01" if kind == b"IHDR" else body) for kind, body in _chunks(plain)])
    palette = io.BytesIO()
    PILImage.fromarray(rgba[:, :, :3]).convert("P", palette=PILImage.ADAPTIVE).save(palette, "PNG")
    others = {
        "palette": palette.getvalue(),
        "transparency": _pillow(rgba[:, :, :3], "RGB", transparency=(1, 2, 3)),
        "16-bit": cv2.imencode(".png", rgba[:, :, :3].astype(np.uint16) * 257)[1].tobytes(),
        "gray + alpha": _pillow(np.dstack([rgba[:, :, 0], rgba[:, :, 3]]), "LA"),
        "interlaced": interlaced,
        "animation control": _file([_chunks(plain)[0], (b"acTL", struct.pack(">II", 1, 0)), *_chunks(plain)[1:]]),
        "unknown critical": _file([_chunks(plain)[0], (b"ABCD", b"x"), *_chunks(plain)[1:]]),
        "chunk name not letters": _file([_chunks(plain)[0], (b"a1cd", b"x"), *_chunks(plain)[1:]]),
        "reserved bit set (third letter lowercase)": _file([_chunks(plain)[0], (b"tExt", b"a\x00b"),
                                                           *_chunks(plain)[1:]]),
    }
    for name, data in others.items():
        assert png.decode_png(data) is None, name
        _as_opencv_says(data, name)


def test_a_header_claiming_2_to_the_31_each_way_is_declined_not_an_overflow():
    """PNG allows at most 2^31 - 1 per side; 2^31 x 2^31 (or anything past the pixel limit) is OpenCV's to refuse,
    not an OverflowError from sizing the inflated rows."""
    plain = _pillow(_image()[:, :, :3], "RGB")
    for side in (2**31, 2**31 - 1, 60000):
        head = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)
        data = _file([(b"IHDR", head), *_chunks(plain)[1:]])
        assert png.decode_png(data) is None, side


def test_damaged_files_take_opencvs_path_and_errors():
    """A flipped bit in the image data (CRC), a CRC fixed up over damaged data (Adler-32), rows missing or extra, an
    IDAT split by another chunk, a filter type PNG lacks: the fast path declines each, and imageio.decode says what it
    said before (OpenCV's reading or refusal)."""
    arr = _image()[:, :, :3]
    data = _pillow(arr, "RGB", compress_level=1)
    chunks = _chunks(data)
    idat = b"".join(body for kind, body in chunks if kind == b"IDAT")
    rows = zlib.decompress(idat)
    head = [c for c in chunks if c[0] == b"IHDR"]

    def rebuilt(stream: bytes, split: bool = False) -> bytes:
        parts = [(b"IDAT", stream[:50]), (b"tEXt", b"a\x00b"), (b"IDAT", stream[50:])] if split else [
            (b"IDAT", stream)]
        return _file([*head, *parts, (b"IEND", b"")])

    bad_crc = bytearray(data)
    bad_crc[data.index(b"IDAT") + 20] ^= 1
    flipped = bytearray(idat)
    flipped[-1] ^= 1  # the Adler-32's last byte
    unknown_filter = bytearray(rows)
    unknown_filter[0] = 5
    damaged = {
        "crc": bytes(bad_crc),
        "adler": rebuilt(bytes(flipped)),
        "short": rebuilt(zlib.compress(rows[:-10])),
        "long": rebuilt(zlib.compress(rows + b"\x00" * 10)),
        "split": rebuilt(zlib.compress(rows), split=True),
        "filter": rebuilt(zlib.compress(bytes(unknown_filter))),
    }
    for name, bad in damaged.items():
        assert png.decode_png(bad) is None, name
        _as_opencv_says(bad, name)


def test_property_random_plain_pngs():
    hypothesis = pytest.importorskip("hypothesis", reason="hypothesis is not installed (the `test` extra)")
    st = hypothesis.strategies

    @hypothesis.settings(max_examples=50, deadline=None)
    @hypothesis.given(h=st.integers(1, 40), w=st.integers(1, 40), mode=st.sampled_from(["L", "RGB", "RGBA"]),
                      level=st.integers(0, 9), seed=st.integers(0, 2**31))
    def check(h, w, mode, level, seed):
        rgba = _image(h, w, seed)
        arr = {"L": rgba[:, :, 0], "RGB": rgba[:, :, :3], "RGBA": rgba}[mode]
        data = _pillow(arr, mode, compress_level=level)
        assert np.array_equal(png.decode_png(data), _opencv(data))

    check()
