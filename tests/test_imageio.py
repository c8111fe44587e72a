"""Image decode/encode for the sr stage: orientation, layouts, bit depths, bad files, atomic writes."""
import io
import os

import cv2
import numpy as np
import pytest
from PIL import Image as PILImage
from PIL import ImageOps
from skimage import data

from pipeline.images import imageio
from pipeline.images.imageio import ImageError


@pytest.fixture(scope="module")
def rgb():
    return np.ascontiguousarray(data.astronaut()[::8, ::6])  # 64x86 RGB, non-square to catch transposes


def _png(arr_bgr):
    ok, buf = cv2.imencode(".png", arr_bgr)
    assert ok
    return buf.tobytes()


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientation_matches_pillow(rgb, orientation):
    im = PILImage.fromarray(rgb)
    exif = im.getexif()
    exif[0x0112] = orientation
    buf = io.BytesIO()
    im.save(buf, format="JPEG", quality=98, exif=exif)
    got = imageio.decode(buf.getvalue())
    assert got.orientation == orientation
    expected = np.asarray(ImageOps.exif_transpose(PILImage.open(io.BytesIO(buf.getvalue()))))
    assert got.pixels.shape[:2] == expected.shape[:2]
    # same pixels up to the two JPEG decoders' rounding
    diff = np.abs(got.pixels[:, :, ::-1].astype(int) - expected.astype(int))
    assert diff.mean() < 2.0


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "WEBP"])
def test_exif_orientation_in_other_containers(rgb, fmt):
    im = PILImage.fromarray(rgb)
    exif = im.getexif()
    exif[0x0112] = 6
    with_tag, without = io.BytesIO(), io.BytesIO()
    im.save(with_tag, format=fmt, exif=exif)
    im.save(without, format=fmt)
    assert imageio.exif_orientation(with_tag.getvalue()) == 6
    assert imageio.exif_orientation(without.getvalue()) == 1


def test_layouts_and_float_regions(rgb):
    bgr = rgb[:, :, ::-1]
    img = imageio.decode(_png(bgr))
    assert (img.mode, img.depth, img.channels) == ("rgb", 8, 3)
    reg = img.region_rgb(2, 10, 3, 20)
    assert reg.shape == (3, 8, 17) and reg.dtype == np.float32
    np.testing.assert_allclose(reg, rgb[2:10, 3:20].transpose(2, 0, 1) / 255.0, atol=1e-7)

    gray = imageio.decode(_png(rgb[:, :, 0]))
    assert gray.gray and gray.mode == "gray"
    g = gray.region_rgb(0, 4, 0, 4)
    assert np.array_equal(g[0], g[2])

    rgba = np.dstack([bgr, np.arange(rgb.shape[1], dtype=np.uint8)[None].repeat(rgb.shape[0], 0)])
    im4 = imageio.decode(_png(rgba))
    assert im4.has_alpha and im4.mode == "rgba"
    np.testing.assert_allclose(im4.region_alpha(0, 2, 0, 5), rgba[:2, :5, 3] / 255.0, atol=1e-7)

    deep = (rgb.astype(np.uint16) * 257 + 3)[:, :, ::-1]
    im16 = imageio.decode(_png(np.ascontiguousarray(deep)))
    assert im16.depth == 16 and im16.max_value == 65535.0
    np.testing.assert_allclose(im16.region_rgb(0, 1, 0, 1)[:, 0, 0], deep[0, 0, ::-1] / 65535.0, atol=1e-7)


def test_gray_alpha_png_becomes_rgba():
    ga = np.zeros((5, 6, 2), np.uint8)
    ga[..., 0], ga[..., 1] = 100, 200
    buf = io.BytesIO()
    PILImage.fromarray(ga, mode="LA").save(buf, format="PNG")
    img = imageio.decode(buf.getvalue())
    assert img.channels == 4 and int(img.pixels[0, 0, 3]) == 200 and int(img.pixels[0, 0, 0]) == 100


@pytest.mark.parametrize("payload,reason", [
    (b"", "empty file"),
    (b"just some text, not pixels", "not a readable image"),
    (b"\x89PNG\r\n\x1a\n" + b"\0" * 40, "truncated PNG"),
])
def test_bad_payloads_raise_one_line(payload, reason):
    with pytest.raises(ImageError, match=reason) as e:
        imageio.decode(payload)
    assert "\n" not in str(e.value)


def test_truncated_files_are_rejected(rgb):
    ok, jpg = cv2.imencode(".jpg", rgb)
    jpg = jpg.tobytes()
    with pytest.raises(ImageError, match="truncated JPEG"):
        imageio.decode(jpg[: len(jpg) // 2])
    png = _png(rgb)
    with pytest.raises(ImageError, match="truncated PNG|not a readable"):
        imageio.decode(png[: len(png) // 2])
    assert imageio.decode(jpg).pixels.shape == rgb.shape


@pytest.mark.parametrize("ext", [".png", ".webp", ".bmp"])
def test_content_decides_whatever_the_name_says(rgb, ext, tmp_path):
    """A PNG/WebP/BMP renamed .jpg is read by its content (as --triton already did), not refused as a truncated JPEG."""
    ok, buf = cv2.imencode(ext, rgb)
    assert ok
    liar = tmp_path / f"{ext[1:]}_as.jpg"
    liar.write_bytes(buf.tobytes())
    assert imageio.read_image(liar).pixels.shape == rgb.shape
    cut = tmp_path / "cut_jpeg.png"  # and the truncation check follows the content too
    ok, jpg = cv2.imencode(".jpg", rgb)
    cut.write_bytes(jpg.tobytes()[: len(jpg) // 2])
    with pytest.raises(ImageError, match="truncated JPEG"):
        imageio.read_image(cut)


def test_unreadable_file(tmp_path):
    p = tmp_path / "locked.png"
    p.write_bytes(_png(np.zeros((2, 2, 3), np.uint8)))
    p.chmod(0)
    try:
        if os.access(p, os.R_OK):
            pytest.skip("running as a user that ignores file permissions (root)")
        with pytest.raises(ImageError, match="permission denied"):
            imageio.read_image(p)
    finally:
        p.chmod(0o644)
    with pytest.raises(ImageError, match="directory"):
        imageio.read_image(tmp_path)


def test_quantize_rounds_and_clips_once():
    x = np.array([-0.2, 0.0, 0.5 / 255, 1.49 / 255, 1.51 / 255, 0.999999, 1.7], np.float32)
    assert imageio.quantize(x, 8).tolist() == [0, 0, 0, 1, 2, 255, 255]
    assert imageio.quantize(np.float32([1 / 65535, 2.6 / 65535]), 16).tolist() == [1, 3]
    assert imageio.quantize(x, 16).dtype == np.uint16


@pytest.mark.parametrize("depth", [8, 16])
def test_store_rgb_equals_quantize_per_channel(depth):
    rgb = np.random.default_rng(1).random((3, 37, 41), dtype=np.float32) * 1.2 - 0.1  # out of range too
    out = imageio.new_output(40, 45, 3, depth)
    imageio.store_rgb(out, 2, 3, rgb, depth)
    for c in range(3):
        assert np.array_equal(out[2:39, 3:44, 2 - c], imageio.quantize(rgb[c], depth))


def test_store_rgb_writes_bgr_and_gray_luma():
    rgb = np.stack([np.full((2, 2), v, np.float32) for v in (1.0, 0.5, 0.0)])
    out = imageio.new_output(3, 3, 3, 8)
    imageio.store_rgb(out, 1, 1, rgb, 8)
    assert out[1, 1].tolist() == [0, 128, 255]  # BGR
    g = imageio.new_output(2, 2, 1, 16)
    imageio.store_rgb(g, 0, 0, rgb, 16)
    assert int(g[0, 0]) == round((0.299 + 0.587 * 0.5) * 65535)


def test_format_conversion_and_roundtrip(tmp_path, rgb):
    deep = np.dstack([rgb[:, :, ::-1].astype(np.uint16) * 257, np.full(rgb.shape[:2], 65535, np.uint16)])
    for fmt in ("png", "tiff"):
        p = tmp_path / f"x{imageio.FORMAT_EXT[fmt]}"
        assert imageio.write_image(p, deep, fmt) == []
        back = imageio.read_image(p)
        assert back.depth == 16 and back.has_alpha and np.array_equal(back.pixels, deep)
    notes = imageio.write_image(tmp_path / "x.jpg", deep, "jpg")
    assert any("8-bit" in n for n in notes) and any("alpha dropped" in n for n in notes)
    back = imageio.read_image(tmp_path / "x.jpg")
    assert back.depth == 8 and back.channels == 3
    p8, _ = imageio.convert_for_format(np.array([[0, 128, 65535, 65406]], np.uint16), "bmp")
    assert p8.tolist() == [[0, 0, 255, 254]]
    for fmt in ("bmp", "webp"):
        imageio.write_image(tmp_path / f"y{imageio.FORMAT_EXT[fmt]}", deep[:, :, :3], fmt)
        assert imageio.read_image(tmp_path / f"y{imageio.FORMAT_EXT[fmt]}").pixels.shape == rgb.shape


def test_normalize_format():
    assert imageio.normalize_format("JPEG") == "jpg"
    assert imageio.normalize_format(".tif") == "tiff"
    with pytest.raises(ValueError, match="unknown output format"):
        imageio.normalize_format("gif")


@pytest.mark.parametrize("depth", [8, 16])
@pytest.mark.parametrize("channels", [1, 3, 4])
def test_png_writer_round_trips_exactly(channels, depth, tmp_path):
    """Our PNG writer (Up filter + ISA-L) is lossless: OpenCV and Pillow read back the very samples."""
    rng = np.random.default_rng(channels * depth)
    dtype = np.uint16 if depth == 16 else np.uint8
    shape = (37, 53) if channels == 1 else (37, 53, channels)
    smooth = np.linspace(0, np.iinfo(dtype).max, 37 * 53 * channels).reshape(shape)
    pixels = np.where(rng.random(shape) < 0.3, rng.integers(0, np.iinfo(dtype).max, shape), smooth).astype(dtype)
    data = imageio.encode(pixels, "png")
    back = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    assert back.dtype == dtype and np.array_equal(back, pixels)
    with PILImage.open(io.BytesIO(data)) as im:  # a second, independent decoder (RGB order there)
        im.load()
        assert im.size == (53, 37)
    if depth == 8:
        rgb = pixels if channels == 1 else cv2.cvtColor(pixels, cv2.COLOR_BGR2RGB if channels == 3
                                                        else cv2.COLOR_BGRA2RGBA)
        assert np.array_equal(np.asarray(PILImage.open(io.BytesIO(data))), rgb)


def test_png_writer_refuses_other_sample_types():
    with pytest.raises(imageio.ImageError, match="cannot encode png"):
        imageio.encode(np.zeros((4, 4, 3), np.float32), "png")
