"""The sr stage's PNG writer's C++ encoder (sr_png_idat_u8): every stream inflates (zlib checks its Adler-32) to the
filtered rows of the very pixels, across shapes, channel counts, band splits, repeats, stored blocks and codes."""
from __future__ import annotations

import heapq
import io
import os
import struct
import subprocess
import sys
import zlib

import cv2
import numpy as np
import pytest
from PIL import Image as PILImage

from pipeline.data.sample_images import HELD_OUT, load_rgb
from pipeline.images import png
from pipeline.native import png_codec

pytestmark = pytest.mark.usefixtures("png_library")


def _unfilter(stream: bytes, h: int, w: int, c: int) -> np.ndarray:
    """PNG's Up and Average filters undone, a row at a time (Average's left neighbour is sequential: a loop over
    pixels); the encoder writes no other filter."""
    rows = np.frombuffer(zlib.decompress(stream), np.uint8).reshape(h, 1 + w * c)
    assert set(rows[:, 0]) <= {2, 3}, set(rows[:, 0])
    out = np.zeros((h, w * c), np.int32)
    prior = np.zeros(w * c, np.int32)
    for y in range(h):
        f = rows[y, 1:].astype(np.int32)
        cur = out[y]
        if rows[y, 0] == 2:
            cur[:] = (f + prior) & 255
        else:
            for x in range(0, w * c, c):
                left = cur[x - c:x] if x else np.zeros(c, np.int32)
                cur[x:x + c] = (f[x:x + c] + ((left + prior[x:x + c]) >> 1)) & 255
        prior = cur
    return out.reshape(h, w, c).astype(np.uint8)


def _images(rng):
    """Content that takes each of the encoder's ways: smooth (dynamic codes), noise (stored blocks), one value (the
    smallest codes), few values (long codes for the rare ones)."""
    yield "smooth", lambda s: np.linspace(0, 255, int(np.prod(s))).reshape(s).astype(np.uint8)
    yield "noise", lambda s: rng.integers(0, 256, s, dtype=np.uint8)
    yield "constant", lambda s: np.full(s, 77, np.uint8)
    yield "skewed", lambda s: np.where(rng.random(s) < 0.999, 0, rng.integers(0, 256, s)).astype(np.uint8)


@pytest.mark.parametrize("shape", [(1, 1, 1), (1, 5, 3), (7, 1, 4), (13, 17, 2), (40, 33, 3), (3, 70, 4)])
def test_streams_inflate_to_the_filtered_pixels(shape):
    rng = np.random.default_rng(sum(shape))
    h, w, c = shape
    for name, make in _images(rng):
        pixels = make(shape)
        stream = bytes(png_codec.png_idat_u8(pixels, swap_red_blue=False))
        assert np.array_equal(_unfilter(stream, h, w, c), pixels), name


@pytest.mark.parametrize("channels", [1, 3, 4])
@pytest.mark.parametrize("kind", ["smooth", "noise", "constant", "skewed"])
def test_large_images_across_bands_decode_exactly(channels, kind):
    """Several bands of rows (each its own block), in OpenCV and Pillow; BGR(A) written as RGB(A)."""
    rng = np.random.default_rng(channels)
    shape = (700, 301, channels)
    pixels = dict(_images(rng))[kind](shape)
    pixels = pixels[:, :, 0] if channels == 1 else pixels
    data = png.encode_png(pixels)
    assert data[:8] == png.SIGNATURE
    idat = _idat(data)
    assert zlib.decompress(idat)[0] == 3  # the C++ encoder wrote it (its first row: Average), not the Up fallback
    assert len(idat) <= png_codec.library().sr_png_idat_bound(700, 301, channels)
    back = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    assert np.array_equal(back, pixels)
    rgb = pixels if channels == 1 else pixels[:, :, [2, 1, 0, 3][:channels]]
    with PILImage.open(io.BytesIO(data)) as im:
        assert np.array_equal(np.asarray(im), rgb)
    if kind == "noise":  # incompressible: stored blocks, a few bytes over the raw size, never the codes' worst
        assert len(idat) < 700 * (1 + 301 * channels) * 1.01


def _idat(data: bytes) -> bytes:
    """The IDAT chunk's payload, its CRC checked."""
    pos, found = 8, []
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        assert struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])[0] == zlib.crc32(body, zlib.crc32(kind))
        if kind == b"IDAT":
            found.append(body)
        pos += 12 + n
    return b"".join(found)


def test_sizes_against_the_up_filter_with_isal_and_opencv():
    """Upscaled photos: smaller in total than the Up filter with ISA-L level 1 (the writer before it, still the 16-bit
    and no-library path); an upscaled drawing (flat areas, edges): smaller than OpenCV's default PNG. Every file
    reads back the same pixels."""
    ours = up = 0
    for name in HELD_OUT:
        img = cv2.resize(load_rgb(name)[:256, :256, ::-1], (768, 768), interpolation=cv2.INTER_CUBIC)
        data = png.encode_png(img)
        ours, up = ours + len(data), up + len(png.encode_png(img, native=False))
        assert np.array_equal(cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED), img)
    assert ours < up
    rng = np.random.default_rng(0)
    drawing = np.zeros((256, 256, 3), np.uint8)
    for _ in range(20):
        y, x, h, w = rng.integers(0, 200, 4)
        drawing[y:y + h, x:x + w] = rng.integers(0, 256, 3)
    cv2.circle(drawing, (120, 120), 80, (10, 200, 30), 3)
    drawing = cv2.resize(drawing, (768, 768), interpolation=cv2.INTER_CUBIC)
    data = png.encode_png(drawing)
    assert len(data) < len(cv2.imencode(".png", drawing)[1])
    assert np.array_equal(cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED), drawing)


def test_bad_arguments_are_refused_in_one_line():
    lib = png_codec.library()
    with pytest.raises(png_codec.PipelineError, match="expected a non-empty"):
        png_codec.png_idat_u8(np.zeros((4, 4, 3), np.uint16), swap_red_blue=False)
    with pytest.raises(png_codec.PipelineError, match="expected a non-empty"):
        png_codec.png_idat_u8(np.zeros((0, 4), np.uint8), swap_red_blue=False)
    assert lib.sr_png_idat_bound(0, 4, 3) == 0
    out, written = np.empty(16, np.uint8), png_codec.ctypes.c_size_t(0)
    pixels = np.zeros((4, 4, 3), np.uint8)
    assert lib.sr_png_idat_u8(pixels.ctypes.data, 4, 4, 3, 0, out.ctypes.data, out.size,
                              png_codec.ctypes.byref(written)) != 0
    assert "smaller than sr_png_idat_bound" in lib.sr_png_last_error().decode()


def test_property_random_repeats_round_trip():
    """Rows of random pixels and repeats of random lengths (matches of every length, split at 258 with the 1-2 byte
    rests as literals), 1-4 channels: each stream inflates to the pixels."""
    hypothesis = pytest.importorskip("hypothesis", reason="hypothesis is not installed (the `test` extra)")
    st = hypothesis.strategies

    @hypothesis.settings(max_examples=60, deadline=None)
    @hypothesis.given(h=st.integers(1, 12), w=st.integers(1, 200), c=st.integers(1, 4), seed=st.integers(0, 2**31),
                      repeat_pct=st.integers(0, 100))  # no floats: a library in the process may flush subnormals
    def check(h, w, c, seed, repeat_pct):
        rng = np.random.default_rng(seed)
        pixels = rng.integers(0, 256, (h, w, c), dtype=np.uint8)
        for y in range(h):
            for x in range(1, w):
                if rng.integers(100) < repeat_pct:  # a pixel equal to the one before: runs of random lengths
                    pixels[y, x] = pixels[y, x - 1]
        stream = bytes(png_codec.png_idat_u8(pixels, swap_red_blue=False))
        assert np.array_equal(_unfilter(stream, h, w, c), pixels)

    check()


def _literal_code_lengths(stream: bytes) -> list[int]:
    """The literal/length code lengths of a zlib stream's first block (RFC 1951, 3.2.7), which must be dynamic."""
    bits = int.from_bytes(stream[2:2 + 2048], "little")  # a block header fits in far fewer bytes
    pos = 0

    def take(n: int) -> int:
        nonlocal pos
        v = (bits >> pos) & ((1 << n) - 1)
        pos += n
        return v

    take(1)
    assert take(2) == 2, "not a dynamic block"
    hlit, hdist, hclen = take(5) + 257, take(5) + 1, take(4) + 4
    order = [16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15]
    cl = [0] * 19
    for i in range(hclen):
        cl[order[i]] = take(3)
    table, code = {}, 0  # canonical codes of the code-length code: (length, code) -> symbol
    for length in range(1, 8):
        for sym in range(19):
            if cl[sym] == length:
                table[(length, code)] = sym
                code += 1
        code <<= 1
    lengths: list[int] = []
    while len(lengths) < hlit + hdist:
        code, length = 0, 0
        while (length, code) not in table:
            code, length = code << 1 | take(1), length + 1  # Huffman codes come most significant bit first
        sym = table[(length, code)]
        if sym < 16:
            lengths.append(sym)
        else:
            repeat = [3 + take(2), 3 + take(3), 11 + take(7)][sym - 16]
            lengths += [lengths[-1] if sym == 16 else 0] * repeat
    return lengths[:hlit]


def _huffman_depth(counts: list[int]) -> int:
    """The depth of a plain (unlimited) Huffman tree over `counts`."""
    heap = [(c, i, 0) for i, c in enumerate(counts)]
    heapq.heapify(heap)
    while len(heap) > 1:
        a, b = heapq.heappop(heap), heapq.heappop(heap)
        heapq.heappush(heap, (a[0] + b[0], min(a[1], b[1]), max(a[2], b[2]) + 1))
    return heap[0][2]


def test_codes_longer_than_the_limit_are_limited():
    """Byte frequencies 1, 2, 4, ... 65536 make a plain Huffman tree 17 levels deep, past deflate's 15 bits (and the
    encoder's 14): the block's codes are limited and the stream decodes. One gray row whose Average-filtered bytes are
    exactly those bytes (one band, one block)."""
    target = np.repeat(np.arange(17, dtype=np.int64) * 10, [2**k for k in range(17)])
    np.random.default_rng(0).shuffle(target)
    raw = np.zeros(target.size, np.int64)
    for x in range(target.size):  # the first row's Average prediction is half the left neighbour
        raw[x] = (target[x] + (raw[x - 1] >> 1 if x else 0)) & 255
    pixels = raw.astype(np.uint8)[None, :]
    data = png.encode_png(pixels)
    assert np.array_equal(cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED), pixels)
    stream = _idat(data)
    filtered = np.frombuffer(zlib.decompress(stream), np.uint8)
    assert filtered[0] == 3 and np.array_equal(filtered[1:], target.astype(np.uint8))
    counts = [int(c) for c in np.bincount(filtered) if c] + [1]  # + the end of block
    assert _huffman_depth(counts) > 15  # a plain Huffman code of these bytes would be no deflate stream at all
    assert max(_literal_code_lengths(stream)) <= 14


def test_chromium_shows_the_very_pixels(tmp_path):
    """A browser's PNG decoder (Debian's chromium, headless, a screenshot of the image at 1:1) reads the encoder's
    file as the same pixels: flat, smooth and noisy areas (repeats, both filters, stored-like bands)."""
    import base64
    import shutil
    import subprocess

    if shutil.which("chromium") is None:
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    rng = np.random.default_rng(3)
    img = np.zeros((200, 300, 3), np.uint8)
    img[:, :100] = np.linspace(0, 255, 100, dtype=np.uint8)[None, :, None]
    img[:, 100:200] = (30, 140, 220)
    img[:, 200:] = rng.integers(0, 256, (200, 100, 3))
    data = png.encode_png(img)
    page = tmp_path / "page.html"
    page.write_text('<html><body style="margin:0"><img src="data:image/png;base64,'
                    f'{base64.b64encode(data).decode()}"></body></html>')
    shot = tmp_path / "shot.png"
    subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    "--force-device-scale-factor=1", "--window-size=300,200", f"--user-data-dir={tmp_path / 'profile'}",
                    f"--screenshot={shot}", page.as_uri()], capture_output=True, timeout=120, check=True)
    assert np.array_equal(cv2.imread(str(shot))[:200, :300], img)


def _simd_levels() -> list[str]:
    """The codec's SIMD levels this CPU has (as capped); skips where there is only one to hold the others to."""
    levels = [lv for lv in png_codec.SIMD if png_codec.set_simd(lv) == lv]
    png_codec.set_simd(png_codec.SIMD[-1])  # back to the most the CPU has (the default)
    if len(levels) < 2:
        pytest.skip(f"this CPU has only the {levels[0]} kernels: nothing to compare them with")
    return levels


def _simd_cases():
    """Upscaled photos (nearest: rows repeated, as the stand-in device's; bicubic), 1-4 channels, widths that leave
    every tail a 32-byte kernel leaves, flat and noisy rows, repeats of every length across word boundaries."""
    rng = np.random.default_rng(7)
    photo = load_rgb(HELD_OUT[0])[:96, :96, ::-1]
    yield np.repeat(np.repeat(photo, 3, 0), 3, 1)
    yield cv2.resize(photo, (301, 287), interpolation=cv2.INTER_CUBIC)
    yield cv2.cvtColor(cv2.resize(photo, (133, 97)), cv2.COLOR_BGR2BGRA)
    yield cv2.cvtColor(photo, cv2.COLOR_BGR2GRAY)[:, :91]
    for c in (1, 2, 3, 4):
        for w in (1, 5, 11, 31, 33, 67):
            rows = rng.integers(0, 256, (9, w, c), dtype=np.uint8)
            rows[3] = rows[2]  # a repeated row: Up's zeros
            rows[4, w // 2:] = rows[4, w // 2]  # a pixel repeated to the row's end
            rows[5] = 200
            yield rows
    for _ in range(40):
        c = int(rng.integers(1, 5))
        row = rng.integers(0, 256, 700 * c, dtype=np.uint8)
        for _ in range(10):  # repeats of 1-80 pixels at random places
            at, length = int(rng.integers(1, 690)) * c, int(rng.integers(1, 80)) * c
            seg = row[at:at + length]
            seg[:] = np.resize(row[at - c:at], seg.size)
        yield row.reshape(1, 700, c).repeat(int(rng.integers(1, 4)), axis=0)


def test_every_simd_level_writes_the_same_bytes():
    """The AVX2, SSSE3 and SSE2 kernels (filters, residuals, repeats, checksum, red-blue swap) write the very same
    stream, and read it back to the same pixels."""
    levels = _simd_levels()
    try:
        for i, pixels in enumerate(_simd_cases()):
            pixels = pixels[:, :, 0] if pixels.shape[2:] == (1,) else pixels
            h, w = pixels.shape[:2]
            c = 1 if pixels.ndim == 2 else pixels.shape[2]
            streams, back = {}, {}
            for level in levels:
                png_codec.set_simd(level)
                streams[level] = bytes(png_codec.png_idat_u8(pixels, swap_red_blue=True))
                back[level] = png_codec.png_unfilter_u8(zlib.decompress(streams[level]), h, w, c, swap_red_blue=True)
            assert len(set(streams.values())) == 1, (i, pixels.shape, {k: len(v) for k, v in streams.items()})
            for level in levels:
                assert np.array_equal(back[level], pixels), (i, level)
    finally:
        png_codec.set_simd(png_codec.SIMD[-1])


def test_the_isa_cap_keeps_the_codec_below_it():
    """ONEDNN_MAX_CPU_ISA=SSE41 (the cap pipeline.native.cpu honours, as oneDNN does) keeps the codec off AVX2, even
    when asked for it: one machine can run the lower kinds' kernels."""
    code = "from pipeline.native import png_codec as p; print(p.set_simd('avx2'))"
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": "SSE41"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() in ("ssse3", "sse2"), out.stdout + out.stderr
