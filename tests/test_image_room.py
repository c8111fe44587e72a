"""One image room (issue 68 item 2): each container is walked by one module that the header check, the length check
and the metadata reader share; 16 -> 8-bit and gray -> RGB are written once; analysis's crop sheet reads images
through the limited reader the sr stage uses."""
from __future__ import annotations

import os
import struct
from pathlib import Path

import cv2
import numpy as np
import pytest

from pipeline.analysis import sheet
from pipeline.images import header, imageio, lengths, metadata, pixels, tiff

PIPELINE = Path(__file__).resolve().parents[1] / "pipeline"


@pytest.mark.parametrize(("needle", "owner"), [("RIFF", "riff.py"), ("IEND", "png_chunks.py"), ("APP1", "jpeg.py"),
                                               ("0x8769", "tiff.py")])
def test_each_container_fact_lives_in_one_module(needle, owner):
    """The issue's grep: a container's names appear in its walker only (they were in header, lengths, metadata,
    imageio and png)."""
    holders = sorted(str(p.relative_to(PIPELINE)) for p in PIPELINE.rglob("*.py") if needle in p.read_text())
    assert holders == [f"images/{owner}"]


def test_16_to_8_bit_rounds_every_value_to_nearest():
    every = np.arange(65536, dtype=np.uint16)
    assert np.array_equal(pixels.to_8bit(every), np.rint(every / 257.0).astype(np.uint8))
    eight = np.arange(256, dtype=np.uint8)
    assert pixels.to_8bit(eight) is eight


def test_to_rgb8_of_each_layout():
    gray = np.array([[0, 65535], [257, 32896]], np.uint16)
    assert pixels.to_rgb8(gray).tolist() == [[[0] * 3, [255] * 3], [[1] * 3, [128] * 3]]
    bgra = np.zeros((1, 2, 4), np.uint8)
    bgra[..., 0], bgra[..., 2], bgra[..., 3] = 10, 200, 7  # blue, red, alpha
    rgb = pixels.to_rgb8(bgra)
    assert rgb.shape == (1, 2, 3) and rgb.flags.c_contiguous and rgb[0, 0].tolist() == [200, 0, 10]


def test_written_16_bit_as_8_bit_is_the_same_conversion(tmp_path):
    """A 16-bit output written as JPEG (8-bit) holds to_8bit's samples, the ones preview and the sheet compare."""
    p = np.random.default_rng(1).integers(0, 65536, (9, 11, 3), dtype=np.uint16)
    converted, notes = imageio.convert_for_format(p, "bmp")
    assert notes and np.array_equal(converted, pixels.to_8bit(p))


def _tiff_with_exif_directory() -> bytes:
    """An 8x8 gray uncompressed little-endian TIFF whose IFD0 points at an (empty) EXIF directory after the pixels."""
    px = np.arange(64, dtype=np.uint8).reshape(8, 8)
    entries = [(256, 4, 8), (257, 4, 8), (258, 3, 8), (259, 3, 1), (262, 3, 1), (273, 4, "data"), (277, 3, 1),
               (278, 4, 8), (279, 4, 64), (tiff.EXIF_IFD, 4, "exif")]
    data_at = 8 + 2 + 12 * len(entries) + 4
    out = b"II*\x00" + struct.pack("<IH", 8, len(entries))
    for tag, typ, value in entries:
        value = {"data": data_at, "exif": data_at + 64}.get(value, value)
        out += struct.pack("<HHI", tag, typ, 1) + (struct.pack("<HH", value, 0) if typ == 3 else
                                                   struct.pack("<I", value))
    return out + b"\x00" * 4 + px.tobytes() + b"\x00" * 6


def test_a_tiff_inputs_exif_is_dropped_with_a_line():
    data = _tiff_with_exif_directory()
    assert header.check_header(data) == ("tiff", 8, 8) and lengths.tiff_problem(data) is None
    image = imageio.decode(data)
    assert image.pixels.shape == (8, 8) and image.meta.exif is None
    assert image.meta.notes == ("EXIF dropped (in a TIFF it is a directory pointing into the file: not lifted out "
                                "here)",)
    assert metadata.read(data).notes == image.meta.notes


def test_the_sheet_reads_as_sr_reads(tmp_path, monkeypatch):
    """analysis/sheet.py read with cv2.imread: no size cap, a FIFO hung it, EXIF orientation was not applied."""
    rgb = np.random.default_rng(0).integers(0, 255, (6, 10, 3), dtype=np.uint8)
    turned = tmp_path / "turned.jpg"
    exif = struct.pack("<2sHI", b"II", 42, 8) + struct.pack("<H", 1) + struct.pack("<HHIHH", 274, 3, 1, 6, 0)
    turned.write_bytes(imageio.encode(rgb, "jpg", meta=metadata.Metadata(exif=exif + b"\x00" * 4)))
    got = sheet.read_rgb8(turned)
    assert got.shape == (10, 6, 3)
    assert np.array_equal(got, pixels.to_rgb8(imageio.read_image(turned).pixels))

    fifo = tmp_path / "x.png"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match=r"^cannot read .*x\.png for the sheet: not a regular file"):
        sheet.read_rgb8(fifo)

    big = tmp_path / "big.png"
    cv2.imwrite(str(big), np.zeros((40, 40), np.uint8))
    monkeypatch.setenv("SRDEPLOY_MAX_PIXELS", "1000")
    with pytest.raises(ValueError, match=r"for the sheet: image is 40x40 .* over the limit of 1,000 pixels"):
        sheet.read_rgb8(big)
