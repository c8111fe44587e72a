"""Hostile input trees and image files (issue 24 Reliability, issue 23's 60000^2 PNG): decompression bombs are
refused from their header before decoding (peak memory measured in a subprocess), only regular files are read,
links do not lead the run outside INPUT or OUTPUT, and outputs never replace inputs or non-image files."""
from __future__ import annotations

import contextlib
import io
import json
import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image as PILImage

from pipeline.cli import main
from pipeline.images import imageio
from pipeline.images.imageio import ImageError

MAX_PIXELS_ENV = "SRDEPLOY_MAX_PIXELS"  # documented in the README


# -- bombs: small files claiming huge images ---------------------------------------------------------------
def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_bomb(side: int, color_type: int = 6, depth: int = 16) -> bytes:
    """A PNG header claiming side x side (RGBA 16-bit by default) with a few real compressed rows."""
    ihdr = struct.pack(">IIBBBBB", side, side, depth, color_type, 0, 0, 0)
    row = b"\x00" + bytes(side * 8)
    idat = zlib.compress(row * 4, 9)
    return b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr) + _png_chunk(b"IDAT", idat) + _png_chunk(b"IEND", b"")


def jpeg_bomb(side: int) -> bytes:
    """A real 16x16 JPEG whose frame header is patched to claim side x side (about 1 KB)."""
    data = bytearray(cv2.imencode(".jpg", np.full((16, 16, 3), 90, np.uint8))[1].tobytes())
    i = data.index(b"\xff\xc0")
    data[i + 5:i + 9] = struct.pack(">HH", side, side)
    return bytes(data)


def bmp_bomb(side: int) -> bytes:
    """An RLE8 BMP claiming side x side whose pixel data is just end-of-bitmap (about 1 KB)."""
    palette = bytes(4 * 256)
    pixels = b"\x00\x01"
    offset = 14 + 40 + len(palette)
    info = struct.pack("<IiiHHIIiiII", 40, side, side, 1, 8, 1, len(pixels), 2835, 2835, 256, 0)
    return b"BM" + struct.pack("<IHHI", offset + len(pixels), 0, 0, offset) + info + palette + pixels


def tiff_bomb(side: int) -> bytes:
    """A real small TIFF whose width and length tags are patched to claim side x side."""
    data = bytearray(cv2.imencode(".tif", np.full((16, 16, 3), 90, np.uint8))[1].tobytes())
    end = "<" if data[:2] == b"II" else ">"
    (ifd,) = struct.unpack(end + "I", data[4:8])
    (n,) = struct.unpack(end + "H", data[ifd:ifd + 2])
    for k in range(n):
        e = ifd + 2 + 12 * k
        tag, typ = struct.unpack(end + "HH", data[e:e + 4])
        if tag in (256, 257):
            data[e + 2:e + 12] = struct.pack(end + "HII", 4, 1, side)
    return bytes(data)


def webp_bomb() -> bytes:
    """A real lossy WebP patched to claim 16383x16383 (WebP's largest, 268 megapixels)."""
    data = bytearray(cv2.imencode(".webp", np.full((16, 16, 3), 90, np.uint8), [cv2.IMWRITE_WEBP_QUALITY, 80])[1])
    assert data[12:16] == b"VP8 "
    data[26:30] = struct.pack("<HH", 16383, 16383)
    return bytes(data)


BOMBS = {
    "png-32000-rgba16.png": lambda: png_bomb(32000),
    "png-60000.png": lambda: png_bomb(60000, 2, 8),
    "jpeg-32000.jpg": lambda: jpeg_bomb(32000),
    "jpeg-32000-b.jpg": lambda: jpeg_bomb(32000),
    "bmp-rle-30000.bmp": lambda: bmp_bomb(30000),
    "tiff-30000.tif": lambda: tiff_bomb(30000),
    "webp-16383.webp": webp_bomb,
}

_PEAK = """
import json, sys
from pipeline.images.imageio import read_image, ImageError
out = {}
for p in sys.argv[1:]:
    try:
        read_image(p)
        out[p] = "decoded"
    except ImageError as e:
        out[p] = str(e)
# VmHWM, not ru_maxrss: the latter keeps the forking parent's (pytest's) high-water mark across exec
hwm = next(int(ln.split()[1]) for ln in open("/proc/self/status") if ln.startswith("VmHWM:"))
print(json.dumps({"reasons": out, "peak_kb": hwm}))
"""


def test_bombs_are_refused_from_the_header_with_bounded_memory(tmp_path):
    files = []
    for name, make in BOMBS.items():
        (tmp_path / name).write_bytes(make())
        files.append(str(tmp_path / name))
    # a 2 GiB address-space cap keeps a regression from taking the machine down (it fails the test instead)
    cap = "import resource; resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))\n"
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    env.pop(MAX_PIXELS_ENV, None)
    proc = subprocess.run([sys.executable, "-c", cap + _PEAK, *files], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    for path, reason in result["reasons"].items():
        assert "over the limit of 100,000,000 pixels" in reason and MAX_PIXELS_ENV in reason, (path, reason)
    assert "60000x60000" in result["reasons"][str(tmp_path / "png-60000.png")]
    assert result["peak_kb"] < 400 * 1024, f"peak RSS {result['peak_kb'] / 1024:.0f} MiB"


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_header_sizes_are_read_right(name):
    from pipeline.images.header import image_size

    side = {"png-32000-rgba16.png": 32000, "png-60000.png": 60000, "bmp-rle-30000.bmp": 30000,
            "tiff-30000.tif": 30000, "webp-16383.webp": 16383}.get(name, 32000)
    assert image_size(BOMBS[name]())[1:] == (side, side)


@pytest.mark.parametrize("ext", [".png", ".jpg", ".bmp", ".tif", ".webp"])
def test_real_images_header_matches_decoder(ext):
    from pipeline.images.header import image_size

    img = np.random.default_rng(0).integers(0, 255, (37, 53, 3), dtype=np.uint8)
    data = cv2.imencode(ext, img)[1].tobytes()
    assert image_size(data)[1:] == (53, 37)
    assert imageio.decode(data).pixels.shape[:2] == (37, 53)


def test_pixel_limit_is_overridable(monkeypatch):
    data = cv2.imencode(".png", np.zeros((12, 10, 3), np.uint8))[1].tobytes()
    monkeypatch.setenv(MAX_PIXELS_ENV, "119")
    with pytest.raises(ImageError, match=f"12 .*{MAX_PIXELS_ENV}=120|10x12.*{MAX_PIXELS_ENV}=120"):
        imageio.decode(data)
    monkeypatch.setenv(MAX_PIXELS_ENV, "120")
    assert imageio.decode(data).width == 10


def test_other_formats_behind_an_image_name_are_refused():
    """OpenCV decodes by content: a PPM named .png would skip the header check, so it is refused."""
    with pytest.raises(ImageError, match="not a PNG, JPEG"):
        imageio.decode(b"P6\n60000 60000\n255\n" + bytes(64))


# -- the input tree -----------------------------------------------------------------------------------------
@pytest.fixture
def tree(tmp_path):
    src, out, outside = tmp_path / "in", tmp_path / "out", tmp_path / "outside"
    src.mkdir()
    outside.mkdir()
    cv2.imwrite(str(src / "good.png"), np.full((12, 10, 3), 128, np.uint8))
    cv2.imwrite(str(outside / "private.png"), np.full((12, 10, 3), 7, np.uint8))
    return {"src": src, "out": out, "outside": outside, "tmp": tmp_path}


def _sr(capsys, *argv) -> tuple[int, str, dict]:
    summary = Path(argv[1]).parent / "summary.json"
    code = main(["sr", *map(str, argv), "--backend", "ort", "--quiet", "--summary", str(summary)])
    err = capsys.readouterr().err
    records = {}
    if summary.is_file():
        records = {r["input"]: r for r in json.loads(summary.read_text())["images"]}
    return code, err, records


def test_special_files_are_failed_entries_not_hangs(capsys, tree):
    src = tree["src"]
    os.mkfifo(src / "x.png")
    (src / "zero.png").symlink_to("/dev/zero")
    (src / "l1.png").symlink_to("l2.png")
    (src / "l2.png").symlink_to("l1.png")
    (src / "private.png").symlink_to(tree["outside"] / "private.png")
    (src / "bomb.jpg").write_bytes(jpeg_bomb(32000))
    code, err, records = _sr(capsys, src, tree["out"])
    assert code == 1, err
    assert records["good.png"]["status"] == "ok"
    assert "regular file" in records["x.png"]["reason"]
    assert "regular file" in records["zero.png"]["reason"]
    assert "symbolic links" in records["l1.png"]["reason"] and "symbolic links" in records["l2.png"]["reason"]
    assert "outside INPUT" in records["private.png"]["reason"]
    assert "over the limit" in records["bomb.jpg"]["reason"]
    assert sorted(p.name for p in tree["out"].iterdir()) == ["good.png"]


def test_folder_link_inside_output_is_not_written_through(capsys, tree):
    (tree["src"] / "sub").mkdir()
    cv2.imwrite(str(tree["src"] / "sub" / "a.png"), np.full((12, 10, 3), 50, np.uint8))
    tree["out"].mkdir()
    (tree["out"] / "sub").symlink_to(tree["outside"])
    code, err, records = _sr(capsys, tree["src"], tree["out"])
    assert code == 1
    assert "link inside OUTPUT" in records["sub/a.png"]["reason"]
    assert sorted(p.name for p in tree["outside"].iterdir()) == ["private.png"]


# -- data loss ---------------------------------------------------------------------------------------------
def test_summary_naming_an_input_image_is_refused_before_work(capsys, tree):
    good = tree["src"] / "good.png"
    before = good.read_bytes()
    for args in ([tree["src"], tree["out"]], [good, tree["tmp"] / "o.png"]):
        code = main(["sr", *map(str, args), "--backend", "ort", "--summary", str(good)])
        err = capsys.readouterr().err
        assert code == 2 and "--summary" in err and err.count("\n") == 1, err
        assert good.read_bytes() == before
    assert not tree["out"].exists() and not (tree["tmp"] / "o.png").exists()


def test_single_image_output_naming_a_non_image_file_is_refused(capsys, tree):
    notes = tree["tmp"] / "notes.txt"
    notes.write_text("my notes")
    code = main(["sr", str(tree["src"] / "good.png"), str(notes), "--backend", "ort"])
    err = capsys.readouterr().err
    assert code == 2 and "not an image" in err and err.count("\n") == 1, err
    assert notes.read_text() == "my notes"


def test_output_with_a_suffix_sr_does_not_write_is_refused_not_made_a_folder(capsys, tree):
    """`sr one.png out.jgp` (a typo) wrote the folder out.jgp/one.png: a 2-5 letter suffix sr does not write is one
    line and exit 2, before any work, unless OUTPUT ends with / or is an existing folder; a suffix with digits
    stays a folder name."""
    good, tmp = tree["src"] / "good.png", tree["tmp"]
    for name, says in (("out.jgp", "did you mean .jpg? for a folder, end it with /"),
                       ("out.txt", "sr writes .avi, .bmp"), ("notes.tar.gz", "for a folder, end it with /")):
        code = main(["sr", str(good), str(tmp / name), "--backend", "ort"])
        err = capsys.readouterr().err
        assert code == 2 and says in err and err.count("\n") == 1, err
        assert not (tmp / name).exists()
    code = main(["sr", str(tree["src"]), str(tmp / "out.jgp"), "--backend", "ort"])  # a folder INPUT too
    assert code == 2 and "did you mean .jpg?" in capsys.readouterr().err
    (tmp / "made.txt").mkdir()
    for out, written in ((str(tmp / "out.jgp") + "/", tmp / "out.jgp" / "good.png"),
                         (str(tmp / "made.txt"), tmp / "made.txt" / "good.png"),
                         (str(tmp / "runs" / "v1.2"), tmp / "runs" / "v1.2" / "good.png")):
        assert main(["sr", str(good), out, "--backend", "ort", "--quiet"]) == 0, capsys.readouterr().err
        assert cv2.imread(str(written)).shape == (36, 30, 3)


def test_oversized_file_is_not_read_into_memory(tmp_path, monkeypatch):
    """A file bigger than any image within the limit could be (a sparse 2 GiB `.bmp` here) is refused from its size."""
    big = tmp_path / "huge.bmp"
    with open(big, "wb") as f:
        f.write(bmp_bomb(100))
        f.truncate(2 << 30)
    monkeypatch.setenv(MAX_PIXELS_ENV, "1000000")
    with pytest.raises(ImageError, match="MiB, more than an image"):
        imageio.read_image(big)


# -- declared lengths the file cannot hold (issue 59) ------------------------------------------------------
def lying_png(seed: int, length: int) -> bytes:
    """A real 8x8 RGB PNG (268 bytes) whose IDAT length is patched to `length`."""
    buf = io.BytesIO()
    PILImage.fromarray(np.random.default_rng(seed).integers(0, 255, (8, 8, 3), dtype=np.uint8)).save(buf, "PNG")
    data = bytearray(buf.getvalue())
    at = data.index(b"IDAT") - 4
    data[at:at + 4] = struct.pack(">I", length)
    return bytes(data)


_RUN_PEAK = """
import resource, subprocess, sys
resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))  # a regression fails the run, not the machine
proc = subprocess.run([sys.executable, "-m", "pipeline", *sys.argv[1:]], capture_output=True, text=True)
sys.stderr.write(proc.stderr)
print(proc.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def test_lying_png_lengths_are_refused_before_a_decoder_allocates_them(tmp_path):
    """Four 268-byte PNGs whose IDAT says 0x7fffffff or 0xffffffff bytes (OpenCV allocated 2-4 GB for each): one
    line each, exit 1, and the run's peak RSS (the sr process's, from RUSAGE_CHILDREN) under 400 MB. The model's
    ONNX file is exported first (in this process, into the session's cache), so the run measured is a user's second
    run: reading files, not torch's first export (~1 GB)."""
    src = tmp_path / "lying"
    src.mkdir()
    cv2.imwrite(str(tmp_path / "good.png"), np.full((12, 10, 3), 128, np.uint8))
    assert main(["sr", str(tmp_path / "good.png"), str(tmp_path / "good-x3.png"), "--backend", "ort", "--quiet"]) == 0
    for k, length in enumerate([0x7FFFFFFF, 0xFFFFFFFF] * 2):
        data = lying_png(k, length)
        assert len(data) == 268
        (src / f"l{k}.png").write_bytes(data)
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.run([sys.executable, "-c", _RUN_PEAK, "sr", str(src), str(tmp_path / "out"), "--backend", "ort"],
                          capture_output=True, text=True, env=env, timeout=300)
    code, peak_kb = map(int, proc.stdout.split())
    failed = [ln for ln in proc.stderr.splitlines() if ln.startswith("failed ")]
    assert code == 1, proc.stderr
    assert len(failed) == 4 and all("past the end of the file (268 bytes)" in ln for ln in failed), proc.stderr
    assert "declares 2,147,483,647 bytes" in proc.stderr and "declares 4,294,967,295 bytes" in proc.stderr
    assert peak_kb < 400 * 1024, f"peak RSS {peak_kb / 1024:.0f} MiB"


def _tiff_entry(data: bytes, tag: int) -> int:
    """Where a TIFF's first IFD entry for `tag` starts."""
    end = "<" if data[:2] == b"II" else ">"
    (ifd,) = struct.unpack(end + "I", data[4:8])
    (n,) = struct.unpack(end + "H", data[ifd:ifd + 2])
    return next(ifd + 2 + 12 * k for k in range(n) if struct.unpack_from(end + "H", data, ifd + 2 + 12 * k)[0] == tag)


def _lying_files() -> dict[str, bytes]:
    img = np.random.default_rng(1).integers(0, 255, (16, 16, 3), dtype=np.uint8)
    tif = bytearray(cv2.imencode(".tif", img)[1].tobytes())
    end = "<" if tif[:2] == b"II" else ">"
    counts = _tiff_entry(tif, 279)  # StripByteCounts, one strip: the value is in the entry
    tif[counts + 2:counts + 12] = struct.pack(end + "HII", 4, 1, 0x7FFFFFFF)
    webp = bytearray(cv2.imencode(".webp", img)[1].tobytes())
    webp[4:8] = struct.pack("<I", 0xFFFFFFF0)
    webp_chunk = bytearray(cv2.imencode(".webp", img)[1].tobytes())
    webp_chunk[16:20] = struct.pack("<I", 0x7FFFFFFF)
    jpg = bytearray(cv2.imencode(".jpg", img)[1].tobytes())
    dqt = jpg.index(b"\xff\xdb")
    jpg[dqt + 2:dqt + 4] = b"\xff\xf0"
    return {"tiff strip": bytes(tif), "tiff tile": _lying_tiles(img), "webp riff": bytes(webp),
            "webp chunk": bytes(webp_chunk), "jpeg segment": bytes(jpg), "png idat": lying_png(0, 0x7FFFFFFF)}


def _lying_tiles(img: np.ndarray) -> bytes:
    """A tiled TIFF (tifffile, 16x16 tiles) whose last tile's byte count is the largest its type holds (past the
    7 KB file); the counts lie at an offset (nine of them do not fit the entry)."""
    tifffile = pytest.importorskip("tifffile")
    buf = io.BytesIO()
    tifffile.imwrite(buf, np.pad(img, ((0, 24), (0, 24), (0, 0))), tile=(16, 16))
    data = bytearray(buf.getvalue())
    end = "<" if data[:2] == b"II" else ">"
    entry = _tiff_entry(data, 325)  # TileByteCounts
    typ, count, at = struct.unpack_from(end + "HII", data, entry + 2)
    form = {3: "H", 4: "I"}[typ]  # SHORT or LONG
    assert count == 9 and struct.calcsize(form) * count > 4  # at an offset
    struct.pack_into(end + form, data, at + struct.calcsize(form) * (count - 1), 2 ** (8 * struct.calcsize(form)) - 1)
    return bytes(data)


@pytest.mark.parametrize("name", sorted(_lying_files()))
def test_declared_lengths_past_the_end_are_refused_in_our_words(name):
    pattern = r"^corrupt (PNG|JPEG|TIFF|WebP): .* past the end of the file \([\d,]+ bytes\)"
    with pytest.raises(ImageError, match=pattern):
        imageio.decode(_lying_files()[name])


@pytest.mark.parametrize("ext", [".png", ".jpg", ".tif", ".webp"])
def test_lengths_of_real_files_fit(ext):
    """Files from OpenCV's and Pillow's writers (progressive JPEG, multi-strip and tiled-free TIFF, lossless and
    VP8X WebP with alpha) pass the length check and decode as before."""
    from pipeline.images.lengths import length_problem

    rgba = np.random.default_rng(2).integers(0, 255, (67, 45, 4), dtype=np.uint8)
    fmt = imageio.format_of(Path("x" + ext))
    files = [cv2.imencode(ext, rgba[:, :, :3])[1].tobytes()]
    for kw in ({"progressive": True}, {"lossless": True}, {"compression": "tiff_lzw"}, {}):
        buf = io.BytesIO()
        mode = "RGB" if ext == ".jpg" else "RGBA"
        with contextlib.suppress(TypeError, ValueError):
            PILImage.fromarray(rgba[:, :, :len(mode)], mode).save(buf, ext.lstrip(".").replace("jpg", "jpeg")
                                                                  .replace("tif", "tiff"), **kw)
            files.append(buf.getvalue())
    for data in files:
        assert length_problem(fmt, data) is None
        assert imageio.decode(data).pixels.shape[:2] == (67, 45)
