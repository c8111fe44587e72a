"""An image's colour profile, EXIF and XMP carried into its output (issue 59 item 2): JPEG, PNG and WebP outputs hold
the same ICC profile (byte-equal) and EXIF (orientation reset to 1: the pixels are turned upright); --strip-metadata
drops them; BMP says in one line what it dropped. Files are made and read back with Pillow, the writers' peer."""
from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image as PILImage
from PIL import ImageCms

from pipeline.cli import main
from pipeline.images import metadata
from tests.caches import one_thread_own_cache

NEAREST3 = "byom_nets:nearest3_factory"
XMP = b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF/></x:xmpmeta>'


_env = one_thread_own_cache()


@pytest.fixture(scope="module")
def icc() -> bytes:
    return ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()


def _exif(orientation: int) -> PILImage.Exif:
    exif = PILImage.Exif()
    exif[0x0112] = orientation
    exif[0x010F] = "SomeCamera"  # Make
    exif[0x0110] = "Model 7"
    return exif


@pytest.fixture(scope="module")
def photo(tmp_path_factory, icc):
    """A 24x16 JPEG stored sideways (orientation 6) with an sRGB profile, camera tags and XMP."""
    path = tmp_path_factory.mktemp("meta") / "photo.jpg"
    rgb = np.random.default_rng(0).integers(0, 256, (16, 24, 3), dtype=np.uint8)
    PILImage.fromarray(rgb).save(path, quality=95, icc_profile=icc, exif=_exif(6), xmp=XMP)
    return path


def _sr(capsys, src, dst, *extra):
    code = main(["sr", str(src), str(dst), "--model", NEAREST3, "--backend", "torch", "--threads", "1", *extra])
    err = capsys.readouterr().err
    assert code == 0, err
    return err


@pytest.mark.parametrize("ext", [".jpg", ".png", ".webp"])
def test_profile_exif_and_xmp_are_carried(photo, icc, tmp_path, capsys, ext):
    dst = tmp_path / f"out{ext}"
    _sr(capsys, photo, dst)
    with PILImage.open(dst) as im:
        assert im.info.get("icc_profile") == icc
        assert im.size == (16 * 3, 24 * 3)  # turned upright (orientation 6), then x3
        exif = im.getexif()
        assert exif[0x010F] == "SomeCamera" and exif[0x0110] == "Model 7"
        assert exif.get(0x0112, 1) == 1  # already applied to the pixels: a viewer must not turn them again
    assert metadata.read(dst.read_bytes()).xmp == XMP


@pytest.mark.parametrize("ext", [".jpg", ".png", ".webp"])
def test_strip_metadata_drops_them(photo, tmp_path, capsys, ext):
    dst = tmp_path / f"out{ext}"
    _sr(capsys, photo, dst, "--strip-metadata")
    with PILImage.open(dst) as im:
        assert "icc_profile" not in im.info and not im.getexif()
    assert not metadata.read(dst.read_bytes())


def test_bmp_output_says_what_it_dropped(photo, tmp_path, capsys):
    err = _sr(capsys, photo, tmp_path / "out.bmp")
    assert "colour profile and EXIF and XMP dropped (bmp holds none)" in err
    assert "dropped (bmp" not in _sr(capsys, photo, tmp_path / "out2.bmp", "--strip-metadata")


def test_png_input_profile_and_exif_reach_a_jpeg(icc, tmp_path, capsys):
    """A PNG's iCCP (compressed) and eXIf chunks are read by our own reader path too."""
    src = tmp_path / "in.png"
    PILImage.fromarray(np.full((8, 10, 3), 90, np.uint8)).save(src, icc_profile=icc, exif=_exif(1))
    _sr(capsys, src, tmp_path / "out.jpg")
    with PILImage.open(tmp_path / "out.jpg") as im:
        assert im.info.get("icc_profile") == icc and im.getexif()[0x010F] == "SomeCamera"


def test_large_profile_spans_app2_segments_and_comes_back_whole():
    big = bytearray(bytes(range(256)) * 700)  # 179,200 bytes: three APP2 segments
    big[:4], big[16:20], big[36:40] = len(big).to_bytes(4, "big"), b"RGB ", b"acsp"  # an ICC profile's header
    big = bytes(big)
    buf = io.BytesIO()
    PILImage.new("RGB", (4, 4)).save(buf, "JPEG")
    data = metadata.embed_jpeg(buf.getvalue(), metadata.Metadata(icc=big))
    assert data.count(metadata.JPEG_ICC) == 3
    assert metadata.read(data).icc == big
    with PILImage.open(io.BytesIO(data)) as im:
        assert im.info["icc_profile"] == big


def test_hostile_metadata_is_bounded_or_ignored():
    """A compressed profile that inflates past the bound is not carried; a truncated segment is no error."""
    bomb = zlib.compress(b"\x00" * (metadata.MAX_BYTES + 1024))
    png = io.BytesIO()
    PILImage.new("RGB", (2, 2)).save(png, "PNG")
    raw = png.getvalue()
    chunk = b"iCCP" + b"x\x00\x00" + bomb
    data = raw[:33] + struct.pack(">I", len(chunk) - 4) + chunk + struct.pack(">I", zlib.crc32(chunk)) + raw[33:]
    assert metadata.read(data).icc is None
    assert not metadata.read(b"\xff\xd8\xff\xe1\xff\xff" + b"Exif\x00\x00II")
    assert metadata.upright(b"MM\x00*\x00\x00\x00\x08\x00\x00") == b"MM\x00*\x00\x00\x00\x08\x00\x00"
