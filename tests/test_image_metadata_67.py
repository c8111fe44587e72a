"""Image headers and metadata read the way the decoder and the readers read them (issue 67): a TIFF's repeated size
tags (first wins, as libtiff), orientation applied exactly once and reset in the output's EXIF and XMP, damaged EXIF
dropped with the image upscaled, metadata kept only when a reader can read it back, and the work per file bounded
before any decoder runs. Every hostile file is built here."""
from __future__ import annotations

import io
import struct
import tracemalloc
import warnings
import zlib

import cv2
import numpy as np
import pytest
from PIL import Image as PILImage
from PIL import ImageCms, ImageOps

from pipeline.cli import main
from pipeline.images import header, imageio, lengths, metadata, png
from pipeline.images.header import HeaderError
from pipeline.images.imageio import ImageError
from tests.caches import one_thread_own_cache

NEAREST3 = "byom_nets:nearest3_factory"

_env = one_thread_own_cache()


# -- builders ------------------------------------------------------------------------------------------------------

def gray_tiff(pixels: np.ndarray, sizes: list[tuple[int, int]] | None = None, orientation: int | None = None,
              orientation_type: int = 3, xmp: bytes | None = None) -> bytes:
    """An uncompressed 8-bit gray little-endian TIFF of `pixels` in one strip; `sizes`: the (width, length) pairs
    its directory declares, in order (the first is the one libtiff reads)."""
    h, w = pixels.shape
    sizes = sizes or [(w, h)]
    entries = [(256, 4, 1, sw) for sw, _ in sizes] + [(257, 4, 1, sh) for _, sh in sizes]
    entries += [(258, 3, 1, 8), (259, 3, 1, 1), (262, 3, 1, 1), (273, 4, 1, "data"), (277, 3, 1, 1),
                (278, 4, 1, h), (279, 4, 1, pixels.size)]
    if orientation is not None:
        entries.append((274, orientation_type, 1, orientation))
    if xmp is not None:
        entries.append((700, 1, len(xmp), "xmp"))
    entries.sort(key=lambda e: e[0])
    data_at = 8 + 2 + 12 * len(entries) + 4
    xmp_at = data_at + pixels.size
    out = b"II*\x00" + struct.pack("<IH", 8, len(entries))
    for tag, typ, count, value in entries:
        value = {"data": data_at, "xmp": xmp_at}.get(value, value)
        out += struct.pack("<HHI", tag, typ, count)
        out += struct.pack("<HH", value, 0) if typ == 3 else struct.pack("<I", value)
    return out + b"\x00" * 4 + pixels.tobytes() + (xmp or b"")


def exif_block(entries: list[tuple[int, int, int, bytes]], ifd: int = 8, extra: bytes = b"") -> bytes:
    """A little-endian EXIF (TIFF-structured) block: IFD0 at `ifd` with (tag, type, count, 4 value bytes) entries,
    then `extra` (values stored past the directory)."""
    body = struct.pack("<H", len(entries)) + b"".join(struct.pack("<HHI", t, ty, c) + v for t, ty, c, v in entries)
    return b"II*\x00" + struct.pack("<I", ifd) + body + b"\x00" * 4 + extra


def make_tag() -> tuple[int, int, int, bytes]:
    return (0x010F, 2, 4, b"Cam\x00")  # Make: "Cam"


def jpeg(rgb: np.ndarray, meta: metadata.Metadata = metadata.NONE, **pil) -> bytes:
    buf = io.BytesIO()
    PILImage.fromarray(rgb).save(buf, "JPEG", quality=95, **pil)
    return metadata.embed_jpeg(buf.getvalue(), meta) if meta else buf.getvalue()


def png_bytes(rgb: np.ndarray, **pil) -> bytes:
    buf = io.BytesIO()
    PILImage.fromarray(rgb).save(buf, "PNG", **pil)
    return buf.getvalue()


def png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def with_png_chunks(data: bytes, chunks: bytes) -> bytes:
    """`chunks` inserted right after IHDR."""
    return data[:33] + chunks + data[33:]


def profile(space: bytes = b"RGB ", size: int | None = None) -> bytes:
    """An ICC profile: sRGB's, its colour space field set to `space`, or a header-shaped one of `size` bytes."""
    icc = bytearray(ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes())
    if size is not None:
        icc = icc + bytes(size - len(icc))
        icc[:4] = size.to_bytes(4, "big")
    icc[16:20] = space
    return bytes(icc)


@pytest.fixture(scope="module")
def rgb() -> np.ndarray:
    return np.random.default_rng(67).integers(0, 256, (16, 24, 3), dtype=np.uint8)


@pytest.fixture
def no_decoder(monkeypatch):
    """Fail the test if any decoder runs."""
    def refuse(*_a, **_k):
        raise AssertionError("a decoder ran")
    monkeypatch.setattr(imageio.cv2, "imdecode", refuse)
    monkeypatch.setattr(imageio.png, "decode_png", refuse)


def _sr(capsys, src, dst, *extra) -> tuple[int, str]:
    code = main(["sr", str(src), str(dst), "--model", NEAREST3, "--backend", "torch", "--threads", "1", *extra])
    return code, capsys.readouterr().err


# -- 1. a TIFF's size read as libtiff reads it -----------------------------------------------------------------------

def test_repeated_tiff_size_tags_read_first_as_libtiff():
    """The first ImageWidth/ImageLength win, as libtiff (and so OpenCV) reads them."""
    pixels = np.arange(48 * 64, dtype=np.uint32).reshape(48, 64).astype(np.uint8)
    data = gray_tiff(pixels, sizes=[(64, 48), (16, 16)])
    decoded = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    assert decoded.shape == (48, 64)
    assert header.image_size(data) == ("tiff", 64, 48)
    assert lengths.tiff_problem(data) is None


def test_repeated_tiff_size_tags_over_the_limit_are_refused_before_decoding(no_decoder):
    """12000x12000 then 16x16: libtiff decodes 144 MP; refused from the header, no decoder run."""
    data = gray_tiff(np.zeros((16, 16), np.uint8), sizes=[(12000, 12000), (16, 16)])
    with pytest.raises(HeaderError, match="12000x12000"):
        header.check_header(data)
    with pytest.raises(ImageError, match="12000x12000 .*over the limit"):
        imageio.decode(data)


def test_sr_refuses_the_repeated_tag_tiff(capsys, tmp_path, no_decoder):
    src = tmp_path / "dup.tif"
    src.write_bytes(gray_tiff(np.zeros((16, 16), np.uint8), sizes=[(12000, 12000), (16, 16)]))
    code, err = _sr(capsys, src, tmp_path / "out")
    assert code == 1 and "12000x12000" in err and "over the limit" in err
    assert not (tmp_path / "out" / "dup.tif").exists()


# -- 2. orientation applied exactly once -----------------------------------------------------------------------------

ROTATED = {1: lambda p: p, 3: lambda p: np.rot90(p, 2), 6: lambda p: np.rot90(p, -1), 8: lambda p: np.rot90(p, 1)}


@pytest.mark.parametrize("orientation", sorted(ROTATED))
@pytest.mark.parametrize("typ", [3, 4], ids=["short", "long"])
def test_tiff_orientation_is_applied_once(orientation, typ):
    """OpenCV turns a TIFF by its own tag; we must not turn it again (6 came out 180 degrees with the unrotated
    size, 3 not turned)."""
    pixels = np.random.default_rng(orientation).integers(0, 256, (12, 20), dtype=np.uint8)
    image = imageio.decode(gray_tiff(pixels, orientation=orientation, orientation_type=typ))
    want = ROTATED[orientation](pixels)
    assert image.pixels.shape == want.shape
    np.testing.assert_array_equal(image.pixels, want)
    assert image.orientation == orientation


def test_colour_tiff_orientation_from_pillow_is_applied_once(rgb):
    exif = PILImage.Exif()
    exif[0x0112] = 6
    buf = io.BytesIO()
    PILImage.fromarray(rgb).save(buf, "TIFF", exif=exif)
    image = imageio.decode(buf.getvalue())
    np.testing.assert_array_equal(image.pixels, np.rot90(rgb[:, :, ::-1], -1))


def test_sr_writes_an_orientation_6_tiff_turned_once(capsys, tmp_path):
    pixels = np.random.default_rng(6).integers(0, 256, (10, 14), dtype=np.uint8)
    src = tmp_path / "six.tif"
    src.write_bytes(gray_tiff(pixels, orientation=6))
    code, err = _sr(capsys, src, tmp_path / "six.png")
    assert code == 0, err
    out = cv2.imread(str(tmp_path / "six.png"), cv2.IMREAD_UNCHANGED)
    want = np.rot90(pixels, -1)
    assert out.shape == (want.shape[0] * 3, want.shape[1] * 3)
    np.testing.assert_array_equal(out[1::3, 1::3], want)  # nearest x3: the middle of each 3x3 block


# -- 3. damaged EXIF: dropped, the image upscaled --------------------------------------------------------------------

@pytest.mark.parametrize("block", [
    exif_block([(0x0112, 3, 1, b"\x06\x00\x00\x00")], ifd=4000),  # IFD0 past the block's end
    b"II*\x00\x08\x00\x00\x00\xff\x00" + b"\x00" * 20,  # 255 entries in 30 bytes
], ids=["ifd-offset", "entry-count"])
def test_damaged_exif_is_dropped_and_the_image_decoded(rgb, block):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no Pillow warning either
        image = imageio.decode(jpeg(rgb, metadata.Metadata(exif=block)))
    assert image.pixels.shape == rgb.shape and image.orientation == 1
    assert image.meta.exif is None
    assert len(image.meta.notes) == 1 and image.meta.notes[0].startswith("EXIF dropped (damaged:")


def test_sr_upscales_a_jpeg_with_a_damaged_exif_ifd(capsys, tmp_path, rgb):
    src = tmp_path / "bad_exif.jpg"
    src.write_bytes(jpeg(rgb, metadata.Metadata(exif=exif_block([make_tag()], ifd=4000), xmp=b"<x/>")))
    code, err = _sr(capsys, src, tmp_path / "out.jpg")
    assert code == 0, err
    assert err.count("EXIF dropped (damaged:") == 1
    with PILImage.open(tmp_path / "out.jpg") as im:
        assert im.size == (24 * 3, 16 * 3) and not im.getexif()
    assert metadata.read((tmp_path / "out.jpg").read_bytes()).xmp == b"<x/>"


# -- 4. orientation as LONG, and in XMP ------------------------------------------------------------------------------

def test_long_orientation_is_applied_and_reset(rgb, tmp_path, capsys):
    block = exif_block([make_tag(), (0x0112, 4, 1, struct.pack("<I", 6))])
    src = tmp_path / "long.jpg"
    src.write_bytes(jpeg(rgb, metadata.Metadata(exif=block)))
    image = imageio.decode(src.read_bytes())
    assert image.orientation == 6 and image.pixels.shape[:2] == (24, 16)
    code, err = _sr(capsys, src, tmp_path / "long_out.jpg")
    assert code == 0, err
    with PILImage.open(tmp_path / "long_out.jpg") as im:
        assert im.getexif().get(0x0112) == 1 and im.getexif()[0x010F] == "Cam"
        assert ImageOps.exif_transpose(im).size == im.size == (16 * 3, 24 * 3)  # a viewer does not turn it again


XMP6 = b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:Description tiff:Orientation="6"/></x:xmpmeta>'


def test_xmp_orientation_is_reset_when_the_pixels_were_turned(rgb, tmp_path, capsys):
    exif = PILImage.Exif()
    exif[0x0112] = 6
    src = tmp_path / "both.jpg"
    src.write_bytes(jpeg(rgb, exif=exif, xmp=XMP6))
    code, err = _sr(capsys, src, tmp_path / "both.png")
    assert code == 0, err
    out = metadata.read((tmp_path / "both.png").read_bytes())
    assert b'tiff:Orientation="1"' in out.xmp and b'"6"' not in out.xmp
    with PILImage.open(tmp_path / "both.png") as im:
        assert ImageOps.exif_transpose(im).size == im.size == (16 * 3, 24 * 3)


@pytest.mark.parametrize("with_exif", [True, False], ids=["exif-without-orientation", "no-exif"])
def test_xmp_orientation_alone_is_not_applied_and_kept(rgb, with_exif):
    """OpenCV applies no XMP orientation, nor do we (Pillow's getexif did, but only when EXIF was present)."""
    exif = PILImage.Exif()
    exif[0x010F] = "Cam"
    image = imageio.decode(jpeg(rgb, xmp=XMP6, **({"exif": exif} if with_exif else {})))
    assert image.orientation == 1 and image.pixels.shape == rgb.shape
    assert image.meta.xmp == XMP6  # not turned: the input's XMP, as it was


@pytest.mark.parametrize("form", [b'tiff:Orientation="8"', b"<tiff:Orientation>8</tiff:Orientation>",
                                  b"tiff:Orientation = '8'"])
def test_every_xmp_orientation_form_is_reset(form):
    meta = metadata.fitted(metadata.Metadata(xmp=b"<x " + form + b"/>", orientation=8), gray=False, turned=True)
    assert b"8" not in meta.xmp and b"1" in meta.xmp


# -- 5. metadata a reader can read back ------------------------------------------------------------------------------

def test_a_profile_too_big_for_readers_is_dropped_and_the_png_opens(rgb, tmp_path, capsys):
    """A 2 MiB profile in a PNG made Pillow unable to open the output."""
    src = tmp_path / "big_icc.jpg"
    src.write_bytes(jpeg(rgb, metadata.Metadata(icc=profile(size=2 << 20))))
    code, err = _sr(capsys, src, tmp_path / "big_icc.png")
    assert code == 0, err
    assert "colour profile dropped (2,097,152 bytes, over the 1 MiB" in err
    with PILImage.open(tmp_path / "big_icc.png") as im:
        im.load()
        assert "icc_profile" not in im.info


@pytest.mark.parametrize(("icc", "reason"), [
    (bytes(300_000), "its header says 0 bytes"),  # zeros
    (profile()[:-10], "not a whole ICC profile"),  # cut short
    (b"\x00\x00\x01\x00" + bytes(252), "no 'acsp' signature"),
    (bytes(100), "too short"),
])
def test_what_is_not_an_icc_profile_is_dropped(rgb, icc, reason):
    image = imageio.decode(jpeg(rgb, metadata.Metadata(icc=icc)))
    assert image.meta.icc is None
    assert len(image.meta.notes) == 1 and reason in image.meta.notes[0]


def test_partial_app2_sequences_are_not_assembled(rgb):
    big = profile(size=200_000)  # four APP2 segments
    data = jpeg(rgb, metadata.Metadata(icc=big))
    starts = [i for i in range(len(data)) if data.startswith(b"\xff\xe2", i) and data.startswith(metadata.JPEG_ICC,
                                                                                                  i + 4)]
    assert len(starts) == 4
    third = starts[2]
    n = struct.unpack_from(">H", data, third + 2)[0]
    cut = data[:third] + data[third + 2 + n:]  # segments 1, 2, 4 of 4
    meta = metadata.read(cut)
    assert meta.icc is None and "not one whole sequence" in meta.notes[0]
    assert metadata.read(data).icc == big


@pytest.mark.parametrize(("space", "gray", "kept"), [
    (b"RGB ", False, True), (b"CMYK", False, False), (b"RGB ", True, False), (b"GRAY", True, True),
])
def test_profile_colour_space_must_match_the_output(rgb, space, gray, kept):
    pixels = rgb[:, :, 0] if gray else rgb
    image = imageio.decode(jpeg(pixels, metadata.Metadata(icc=profile(space))))
    assert (image.meta.icc is not None) is kept
    if not kept:
        assert image.meta.notes == (f"colour profile dropped (a {space.decode().strip()} profile on a "
                                    f"{'gray' if gray else 'colour'} image)",)


# -- 6. bounded work per file, before any decoder ----------------------------------------------------------------

def test_a_png_of_too_many_chunks_is_refused_before_decoding(rgb, no_decoder):
    """5 M empty IDAT chunks took 1.5 GB; 200,000 of them make the point."""
    data = png_bytes(rgb)
    data = with_png_chunks(data, png_chunk(b"IDAT", b"") * 200_000)
    with pytest.raises(ImageError, match=r"PNG of more than [\d,]+ chunks"):
        imageio.decode(data)


def _peak(fn, *args) -> int:
    tracemalloc.start()
    try:
        fn(*args)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_webp_of_too_many_chunks_is_refused_before_decoding(no_decoder):
    data = cv2.imencode(".webp", np.full((16, 16, 3), 90, np.uint8))[1].tobytes()
    body = data[12:] + b"JUNK\x00\x00\x00\x00" * 200_000
    with pytest.raises(ImageError, match=r"WebP of more than [\d,]+ chunks"):
        imageio.decode(b"RIFF" + struct.pack("<I", 4 + len(body)) + b"WEBP" + body)


def test_a_tiff_entry_of_too_many_values_is_refused_before_reading_them(no_decoder):
    """2 M strip offsets (the file holds them): each would have been a Python int before the check."""
    data = bytearray(gray_tiff(np.zeros((16, 16), np.uint8)))
    entry = next(10 + 12 * k for k in range(struct.unpack_from("<H", data, 8)[0])
                 if struct.unpack_from("<H", data, 10 + 12 * k)[0] == 273)
    struct.pack_into("<HHII", data, entry, 273, 4, 2_000_000, len(data))
    data += bytes(4 * 2_000_000)
    with pytest.raises(ImageError, match="TIFF tag 273 of 2,000,000 values, over the 1,048,576"):
        imageio.decode(bytes(data))


def test_our_png_reader_keeps_nothing_per_chunk(rgb):
    """IDAT chunks inflated as read: 20,000 more (empty) IDATs cost nothing more (a view each, 5.5 MB, before)."""
    raw = png_bytes(rgb)
    if png.decode_png(raw) is None:
        pytest.skip("the PNG codec library is not built here")
    idat_at = raw.index(b"IDAT") - 4
    end = idat_at + 12 + struct.unpack_from(">I", raw, idat_at)[0]
    stream = raw[idat_at + 8:end - 4]
    split = b"".join(png_chunk(b"IDAT", stream[i:i + 7]) for i in range(0, len(stream), 7))
    many = raw[:idat_at] + split + png_chunk(b"IDAT", b"") * 20_000 + raw[end:]
    np.testing.assert_array_equal(png.decode_png(many), png.decode_png(raw))
    assert _peak(png.decode_png, many) - _peak(png.decode_png, raw) < 256 * 1024


def test_a_jpeg_of_too_many_markers_is_refused_before_decoding(rgb, no_decoder):
    """200 MB of empty APP segments took 545 s of Python walking; 20,000 of them make the point."""
    data = jpeg(rgb)
    data = data[:2] + b"\xff\xe5\x00\x02" * 20_000 + data[2:]
    with pytest.raises(ImageError, match="JPEG of more than 10,000 markers before its first scan"):
        imageio.decode(data)
    assert metadata.read(data) == metadata.NONE  # our metadata walk stops at the same bound


def _progressive(rgb: np.ndarray, extra_scans: int) -> bytes:
    """A progressive JPEG with its last scan repeated `extra_scans` times."""
    data = jpeg(rgb, progressive=True)
    last = data.rindex(b"\xff\xda")
    return data[:-2] + data[last:-2] * extra_scans + b"\xff\xd9"


def test_a_progressive_jpeg_of_too_many_scans_is_refused_before_decoding(rgb, no_decoder):
    with pytest.raises(ImageError, match="JPEG of more than 500 scans"):
        imageio.decode(_progressive(rgb, 600))


def test_real_progressive_jpegs_and_motion_photos_pass_the_scan_bound(rgb):
    data = jpeg(rgb, progressive=True)
    assert 2 < data.count(b"\xff\xda") <= 20 and lengths.jpeg_problem(data) is None
    assert lengths.jpeg_problem(_progressive(rgb, 400)) is None
    video = b"\xff\xda\x00\x02" * 1000  # what follows the end of image (a motion photo's video) is not counted
    assert lengths.jpeg_problem(data + video) is None


def test_metadata_costs_no_more_than_what_is_kept(rgb):
    """16.7 MB of zeros in 255 APP2 segments: dropped without copying them (views; the size checked before any
    join)."""
    data = jpeg(rgb)
    zeros = b"".join(b"\xff\xe2" + struct.pack(">H", 65535) + metadata.JPEG_ICC + bytes([k + 1, 255])
                     + bytes(metadata.ICC_CHUNK) for k in range(255))
    data = data[:2] + zeros + data[2:]
    meta = metadata.read(data)
    assert meta.icc is None and "over the 1 MiB kept" in meta.notes[0]
    assert _peak(metadata.read, data) < 1 << 20


def test_big_exif_is_dropped_with_a_line():
    big = exif_block([make_tag(), (0x927C, 7, 2 << 20, struct.pack("<I", 30))], extra=bytes(2 << 20))
    meta = metadata.read(with_png_chunks(png_bytes(np.zeros((4, 4, 3), np.uint8)), png_chunk(b"eXIf", big)))
    assert meta.exif is None and meta.notes == ("EXIF dropped (2,097,190 bytes, over the 1 MiB kept: readers "
                                                "refuse larger)",)


# -- 7. low: JPEG's segment limit said, one decode per PNG, no leaked warnings --------------------------------------

def test_exif_too_big_for_a_jpeg_output_is_said(tmp_path, capsys):
    block = exif_block([make_tag(), (0x927C, 7, 100_000, struct.pack("<I", 30))], extra=bytes(100_000))
    src = tmp_path / "big_exif.png"
    src.write_bytes(with_png_chunks(png_bytes(np.full((6, 8, 3), 77, np.uint8)), png_chunk(b"eXIf", block)))
    code, err = _sr(capsys, src, tmp_path / "big_exif.jpg")
    assert code == 0, err
    assert "EXIF dropped (100,038 bytes; a JPEG holds 65,527 in its one segment" in err
    code, err = _sr(capsys, src, tmp_path / "big_exif_out.png")
    assert code == 0 and "EXIF dropped" not in err
    assert metadata.read((tmp_path / "big_exif_out.png").read_bytes()).exif is not None


def test_a_png_with_exif_is_decoded_once(rgb, monkeypatch):
    """Pillow's getexif loaded (decoded) the whole PNG for its eXIf: any PNG holding those bytes was decoded twice."""
    exif = PILImage.Exif()
    exif[0x0112] = 6

    def refuse(*_a, **_k):
        raise AssertionError("Pillow opened the image")
    data = png_bytes(rgb, exif=exif)
    monkeypatch.setattr(PILImage, "open", refuse)
    image = imageio.decode(data)
    assert image.orientation == 6 and image.pixels.shape[:2] == (24, 16)


def test_decoder_warnings_do_not_reach_the_terminal(capfd, rgb):
    """libtiff's warning on the repeated tags came out as an OpenCV log line; Pillow's on damaged EXIF with a
    site-packages path."""
    capfd.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        imageio.decode(gray_tiff(np.zeros((8, 8), np.uint8), sizes=[(8, 8), (4, 4)]))
        imageio.decode(jpeg(rgb, metadata.Metadata(exif=exif_block([(0x0112, 3, 1, b"\x06\x00\x00\x00")],
                                                                     ifd=900))))
    out, err = capfd.readouterr()
    assert out == "" and err == ""
