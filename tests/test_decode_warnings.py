"""A damaged file's decoder warnings reach the console only as that file's own line, never as the C library's raw
line: libjpeg's "Corrupt JPEG data: ..." (our libjpeg reader hands it back) and libpng's "libpng warning: ..." (OpenCV
gets a PNG without the chunks libpng would warn of). Real files, a real `sr` run in a subprocess, its stderr read."""
import io
import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image as PilImage

from pipeline.errors import PipelineError
from pipeline.images import imageio
from pipeline.native import jpeg_codec
from pipeline.native import libraries as native

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def jpeg_reader():
    """The JPEG reader `make plugins` builds; built here (same cmake commands) when missing. Skipped where libjpeg's
    headers are not installed (no library: OpenCV reads JPEGs there)."""
    try:
        return native.jpeg_library()
    except PipelineError:
        native.build_jpeg()
    try:
        return native.jpeg_library()
    except PipelineError as e:
        pytest.skip(f"the JPEG reader is not built here: {e}")


def _photo(h=96, w=128) -> np.ndarray:
    y, x = np.mgrid[0:h, 0:w]
    rng = np.random.default_rng(0)
    return np.dstack([(x * 2) % 256, (y * 3) % 256, (x + y) % 256]).astype(np.uint8) ^ rng.integers(0, 32, (h, w, 3),
                                                                                                        np.uint8)


def _chunk(kind: bytes, body: bytes, crc: int | None = None) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) if crc is None
                                                                    else crc)


def _png(*extra: bytes) -> bytes:
    """A PNG of _photo() with `extra` chunks after its header (OpenCV's encoder writes IHDR, IDATs, IEND)."""
    data = cv2.imencode(".png", _photo())[1].tobytes()
    return data[:33] + b"".join(extra) + data[33:]


def _corrupt_jpeg() -> bytes:
    """A whole JPEG (its end marker kept) whose entropy-coded data lost 150 bytes: libjpeg warns 'Corrupt JPEG data'
    and fills in what it cannot read."""
    data = cv2.imencode(".jpg", _photo(), [cv2.IMWRITE_JPEG_QUALITY, 90])[1].tobytes()
    at = data.rfind(b"\xff\xda") + 200
    return data[:at] + data[at + 150:]


def test_jpeg_reader_matches_opencv(jpeg_reader):
    """Our libjpeg reader gives OpenCV's IMREAD_UNCHANGED bytes (gray, BGR; every chroma subsampling, progressive,
    restart markers), so which one reads a file changes nothing; a CMYK JPEG is left to OpenCV."""
    photo = _photo(233, 301)
    files = {f"{s}": cv2.imencode(".jpg", photo, [cv2.IMWRITE_JPEG_SAMPLING_FACTOR, f])[1].tobytes()
             for s, f in (("420", cv2.IMWRITE_JPEG_SAMPLING_FACTOR_420), ("422", cv2.IMWRITE_JPEG_SAMPLING_FACTOR_422),
                          ("444", cv2.IMWRITE_JPEG_SAMPLING_FACTOR_444), ("411", cv2.IMWRITE_JPEG_SAMPLING_FACTOR_411),
                          ("440", cv2.IMWRITE_JPEG_SAMPLING_FACTOR_440))}
    files["progressive"] = cv2.imencode(".jpg", photo, [cv2.IMWRITE_JPEG_PROGRESSIVE, 1])[1].tobytes()
    files["restarts"] = cv2.imencode(".jpg", photo, [cv2.IMWRITE_JPEG_RST_INTERVAL, 3])[1].tobytes()
    files["gray"] = cv2.imencode(".jpg", cv2.cvtColor(photo, cv2.COLOR_BGR2GRAY))[1].tobytes()
    for name, data in files.items():
        got = jpeg_codec.decode(data)
        assert got is not None and got[1] == "", name
        assert np.array_equal(got[0], cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)), name
    buf = io.BytesIO()  # a 4-component (CMYK) frame: OpenCV's to read
    PilImage.fromarray(photo[:, :, ::-1]).convert("CMYK").save(buf, "JPEG")
    assert jpeg_codec.decode(buf.getvalue()) is None


def test_png_without_warned_chunks_decodes_the_same():
    """The chunks OpenCV no longer sees (text, gamma, profiles, times) change nothing it returns."""
    meta = [_chunk(b"gAMA", struct.pack(">I", 45455)), _chunk(b"sRGB", b"\x00"), _chunk(b"tEXt", b"a\x00b"),
            _chunk(b"pHYs", struct.pack(">IIB", 2835, 2835, 1)), _chunk(b"sBIT", b"\x05\x06\x05")]
    data = _png(*meta, _chunk(b"tEXt", b"x\x00y", crc=1))  # a bad CRC: our reader leaves it to OpenCV's path
    image = imageio.decode(data)
    assert np.array_equal(image.pixels, _photo())
    assert image.notes == ("decoded with warnings: its tEXt chunk's CRC does not match (chunk ignored)",)
    with pytest.raises(imageio.ImageError, match="IDAT chunk's CRC does not match"):
        good = _png(_chunk(b"tEXt", b"x\x00y", crc=1))
        at = good.find(b"IDAT") + 4 + struct.unpack_from(">I", good, good.find(b"IDAT") - 4)[0]
        imageio.decode(good[:at] + b"\x00\x00\x00\x00" + good[at + 4:])


def test_library_warnings_become_the_files_own_lines(jpeg_reader, tmp_path):
    """libjpeg's and libpng's warnings: each file is upscaled and its own line says what the decoder warned of;
    stderr holds no line of the libraries' own."""
    src = tmp_path / "in"
    src.mkdir()
    (src / "corrupt.jpg").write_bytes(_corrupt_jpeg())
    (src / "text_crc.png").write_bytes(_png(_chunk(b"tEXt", b"Comment\x00hello", crc=0x12345678)))
    (src / "bad_iccp.png").write_bytes(_png(_chunk(b"iCCP", b"x\x00\x00" + zlib.compress(b"\x00" * 200)),
                                            _chunk(b"tRNS", b"\x00\x01\x00\x01\x00\x01", crc=1)))
    (src / "long_rows.png").write_bytes(_long_rows_png())
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run([sys.executable, "-m", "pipeline", "sr", str(src), str(tmp_path / "out"), "--model",
                        "srcnn-x3", "--backend", "ort-folded", "--threads", "1"], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=600)
    console = r.stdout + r.stderr
    assert r.returncode == 0, console[-3000:]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["bad_iccp.png", "corrupt.jpg", "long_rows.png",
                                                                    "text_crc.png"]
    lines = console.splitlines()
    raw = [ln for ln in lines if ln.startswith(("libpng", "Corrupt JPEG", "Premature end", "Warning:"))]
    assert raw == [], console
    said = {name: [ln for ln in lines if ln.startswith(f"{name}: decoded with warnings")]
            for name in ("corrupt.jpg", "text_crc.png", "bad_iccp.png", "long_rows.png")}
    assert len(said["corrupt.jpg"]) == 1, console  # libjpeg's words depend on where the data broke
    assert said["corrupt.jpg"][0].startswith("corrupt.jpg: decoded with warnings: Corrupt JPEG data: "), console
    assert said["text_crc.png"] == [
        "text_crc.png: decoded with warnings: its tEXt chunk's CRC does not match (chunk ignored)"], console
    assert said["bad_iccp.png"] == [
        "bad_iccp.png: decoded with warnings: its tRNS chunk's CRC does not match (chunk ignored)"], console
    assert said["long_rows.png"] == ["long_rows.png: decoded with warnings: its image data runs past the rows its "
                                     "header declares (the rest ignored)"], console


def _long_rows_png(extra: bytes = b"\x00" * 10) -> bytes:
    """A PNG whose image data inflates to more than its header's rows (libpng: 'IDAT: Too much image data')."""
    data = _png()
    header = data[8:33]
    rows = b"".join(b"\x00" + row.tobytes() for row in _photo()[:, :, ::-1])  # filter 0, RGB
    return data[:8] + header + _chunk(b"IDAT", zlib.compress(rows + extra)) + _chunk(b"IEND", b"")


def test_what_libpng_refuses_is_refused_without_its_line(capfd):
    """Each damage libpng refuses is our one-line refusal, and nothing reaches fd 2 (libpng prints 'libpng error: ...'
    before OpenCV returns nothing); what it reads with a warning is read, the same pixels, with the file's note."""
    good = _long_rows_png(b"")
    at = good.index(b"IDAT")
    n = struct.unpack_from(">I", good, at - 4)[0]
    stream = good[at + 4:at + 4 + n]
    rows = zlib.decompress(stream)
    adler = bytearray(stream)
    adler[-1] ^= 1
    bad_filter = bytearray(rows)
    bad_filter[0] = 5

    def with_idat(body: bytes) -> bytes:
        return good[:33] + _chunk(b"IDAT", body) + _chunk(b"IEND", b"")

    refused = {
        "CRC does not match": good[:at + 4 + n] + b"\x00\x00\x00\x00" + good[at + 8 + n:],
        "does not inflate": with_idat(bytes(adler)),
        "ends before the rows": with_idat(zlib.compress(rows[:-10])),
        "filter type PNG does not have": with_idat(zlib.compress(bytes(bad_filter))),
        "not consecutive": good[:33] + _chunk(b"IDAT", stream[:20]) + _chunk(b"tEXt", b"a\x00b")
        + _chunk(b"IDAT", stream[20:]) + _chunk(b"IEND", b""),
        "no reader knows": good[:33] + _chunk(b"ABCD", b"x") + good[33:],
    }
    for reason, data in refused.items():
        assert cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED) is None, reason  # libpng refuses
        capfd.readouterr()
        with pytest.raises(imageio.ImageError, match=reason):
            imageio.decode(data)
        assert capfd.readouterr().err == "", reason
    image = imageio.decode(_long_rows_png())
    assert capfd.readouterr().err == ""
    assert np.array_equal(image.pixels, _photo()) and image.notes[0].startswith("decoded with warnings: its image")


def test_a_jpeg_libjpeg_refuses_is_one_line_with_its_reason(jpeg_reader, capfd):
    """A JPEG whose header passes our checks but that libjpeg refuses (a Huffman table of more than 256 codes): the
    file's one line says libjpeg's reason (OpenCV, which reads what our libjpeg cannot, refuses it too)."""
    data = bytearray(cv2.imencode(".jpg", _photo())[1].tobytes())
    at = data.index(b"\xff\xc4")  # the first Huffman table: its 16 code counts
    data[at + 5:at + 21] = bytes([255] * 16)
    with pytest.raises(imageio.ImageError, match="^cannot decode: Bogus Huffman table definition$"):
        imageio.decode(bytes(data))
    assert capfd.readouterr().err == ""
