"""Brightness and colour kept through video (issue 59 item 1): clips through a model that is exactly x3
nearest-neighbour, so what comes back shows the YUV <-> RGB conversions' own error. A flat-gray ramp (every luma
level, limited and full range, 8 and 10 bit) comes back level for level; coloured patches tagged BT.601 and BT.709
come back within 1 of the exact RGB; the output is tagged with the matrix and range its samples were made with."""
from __future__ import annotations

from fractions import Fraction

import av
import numpy as np
import pytest

from pipeline.cli import main
from pipeline.sr.video import yuv
from tests.caches import one_thread_own_cache
from tests.video_clips import frames_of, make_clip, stream_facts

NEAREST3 = "byom_nets:nearest3_factory"
BLOCK = 2  # each level a 2x2 block: whole 4:2:0 chroma samples, all neutral
KR_KB = {1: (0.2126, 0.0722), 6: (0.299, 0.114)}


_env = one_thread_own_cache()


def _sr(capsys, src, dst, *extra):
    code = main(["sr", str(src), str(dst), "--model", NEAREST3, "--backend", "torch", "--threads", "1", *extra])
    err = capsys.readouterr().err
    assert code == 0, err
    return err


def _planes_clip(path, planes: list[np.ndarray], pix_fmt: str, colour: tuple[int, int, int, int], frames: int = 2):
    """An FFV1 clip whose every frame holds exactly these Y, Cb, Cr samples (4:2:0: chroma at half size)."""
    h, w = planes[0].shape
    with av.open(str(path), "w") as out:
        v = out.add_stream("ffv1", rate=10)
        v.width, v.height, v.pix_fmt = w, h, pix_fmt
        ctx = v.codec_context
        ctx.colorspace, ctx.color_range, ctx.color_primaries, ctx.color_trc = colour
        for i in range(frames):
            f = av.VideoFrame(w, h, pix_fmt)
            for plane, samples in zip(f.planes, planes, strict=True):
                row = plane.line_size // samples.itemsize
                buf = np.zeros((samples.shape[0], row), samples.dtype)
                buf[:, :samples.shape[1]] = samples
                plane.update(buf.tobytes())
            f.pts = i
            f.colorspace, f.color_range, f.color_primaries, f.color_trc = colour
            for p in v.encode(f):
                out.mux(p)
        for p in v.encode():
            out.mux(p)
    return path


def _ramp(full: bool, bits: int) -> np.ndarray:
    """Every 8-bit luma level of the range (at 10 bits: the same levels x 4), as 2x2 blocks on a 16x16 grid."""
    levels = np.arange(256) if full else np.arange(16, 236)
    levels = np.resize(levels, 256) << (bits - 8)
    return np.kron(levels.reshape(16, 16), np.ones((BLOCK, BLOCK), int))


def _gray_clip(path, full: bool, bits: int):
    dtype = np.uint16 if bits > 8 else np.uint8
    y = _ramp(full, bits).astype(dtype)
    c = np.full((y.shape[0] // 2, y.shape[1] // 2), 1 << (bits - 1), dtype)
    pix_fmt = "yuv420p10le" if bits > 8 else "yuv420p"
    return _planes_clip(path, [y, c, c], pix_fmt, (6, 2 if full else 1, 6, 6))


def _luma(frame: av.VideoFrame) -> np.ndarray:
    dtype = np.uint16 if frame.format.name.endswith("10le") else np.uint8
    plane = frame.planes[0]
    rows = np.frombuffer(plane, dtype).reshape(frame.height, plane.line_size // np.dtype(dtype).itemsize)
    return rows[:, :frame.width]


def _planes(frame: av.VideoFrame) -> list[np.ndarray]:
    """An 8-bit YUV frame's planes as they are (libswscale refuses to convert a frame tagged YCgCo)."""
    out = []
    for plane in frame.planes:
        rows = np.frombuffer(plane, np.uint8).reshape(plane.height, plane.line_size)
        out.append(rows[:, :plane.width])
    return out


def _shrink(a: np.ndarray) -> np.ndarray:
    """The x3 nearest-neighbour output back at the input's size."""
    return a[::3, ::3]


CASES = [(False, 8), (True, 8), (False, 10), (True, 10)]
IDS = ["8bit-limited", "8bit-full", "10bit-limited", "10bit-full"]


@pytest.mark.parametrize(("full", "bits"), CASES, ids=IDS)
def test_gray_ramp_ffv1_rgb_is_the_exact_conversion_rounded_to_nearest(tmp_path, capsys, full, bits):
    src = _gray_clip(tmp_path / "in.mkv", full, bits)
    _sr(capsys, src, tmp_path / "out.mkv")
    y = _ramp(full, bits).astype(np.float64)
    top = (1 << bits) - 1
    exact = y / top if full else (y - (16 << (bits - 8))) / (219 << (bits - 8))
    want = np.clip(np.rint(exact * top), 0, top)
    for f in frames_of(tmp_path / "out.mkv"):
        assert f.format.name == ("gbrp10le" if bits > 8 else "bgr0")
        rgb = _shrink(f.to_ndarray(format="gbrp10le" if bits > 8 else "rgb24"))
        for c in range(3):
            diff = rgb[..., c].astype(np.int64) - want
            assert not diff.any(), (c, np.argwhere(diff)[:5], diff[diff != 0][:5])


@pytest.mark.parametrize(("full", "bits"), CASES, ids=IDS)
def test_gray_ramp_h264_lossless_gives_the_input_levels_back(tmp_path, capsys, full, bits):
    src = _gray_clip(tmp_path / "in.mkv", full, bits)
    _sr(capsys, src, tmp_path / "out.mp4", "--codec", "h264", "--crf", "0")
    out = frames_of(tmp_path / "out.mp4")
    assert len(out) == 2
    for f in out:
        assert f.format.name.replace("yuvj", "yuv") == ("yuv420p10le" if bits > 8 else "yuv420p")
        assert np.array_equal(_shrink(_luma(f)), _ramp(full, bits))
        assert (f.colorspace, f.color_range) == (6, 2 if full else 1)


def _exact_rgb(y, cb, cr, matrix: int) -> np.ndarray:
    """8-bit limited-range samples -> RGB 0..255 (float), ITU-T H.273's equations."""
    kr, kb = KR_KB[matrix]
    yn, pb, pr = (y - 16) / 219, (cb - 128) / 224, (cr - 128) / 224
    r, b = yn + (2 - 2 * kr) * pr, yn + (2 - 2 * kb) * pb
    g = (yn - kr * r - kb * b) / (1 - kr - kb)
    return np.stack([r, g, b], -1) * 255


@pytest.mark.parametrize("matrix", [6, 1], ids=["bt601", "bt709"])
def test_coloured_patches_come_back_within_one_of_the_exact_rgb(tmp_path, capsys, matrix):
    rng = np.random.default_rng(matrix)
    patch = 8  # 8x8 patches on an 8x8 grid; their centres are far from any chroma edge
    yc = rng.integers(40, 200, (8, 8))
    cb, cr = rng.integers(90, 166, (8, 8)), rng.integers(90, 166, (8, 8))
    planes = [np.kron(a, np.ones((s, s), int)).astype(np.uint8) for a, s in ((yc, patch), (cb, patch // 2),
                                                                             (cr, patch // 2))]
    src = _planes_clip(tmp_path / "in.mkv", planes, "yuv420p", (matrix, 1, matrix, matrix), frames=1)
    _sr(capsys, src, tmp_path / "out.mkv")
    centres = slice(3 * patch // 2, None, 3 * patch)
    got = frames_of(tmp_path / "out.mkv")[0].to_ndarray(format="rgb24")[centres, centres]
    exact = np.clip(_exact_rgb(yc.astype(float), cb.astype(float), cr.astype(float), matrix), 0, 255)
    assert np.abs(got.astype(float) - exact).max() <= 1
    other = np.clip(_exact_rgb(yc.astype(float), cb.astype(float), cr.astype(float), 7 - matrix), 0, 255)
    assert np.abs(got.astype(float) - other).max() > 3  # the clip's matrix, not the other one


def test_untagged_clip_output_is_tagged_with_the_conversion_it_was_made_with(tmp_path, capsys):
    """An untagged SD clip is read as BT.601 limited (players' rule); its x3 output is HD, which a player would read
    as BT.709 were it untagged: so it says BT.601 (SMPTE 170M) and limited range."""
    src = make_clip(tmp_path / "in.mkv", "ffv1", 64, 48, 2, 10)
    assert stream_facts(src)["colour"][:2] == (2, 0)
    _sr(capsys, src, tmp_path / "out.mp4", "--codec", "h264")
    assert stream_facts(tmp_path / "out.mp4")["colour"][:2] == (6, 1)


def test_h264_clip_keeps_its_mean_luma(tmp_path, capsys):
    """issue 59's done-when: a 640x360 H.264 clip through the nearest-neighbour model, --crf 0 (was 1.6 darker)."""
    src = make_clip(tmp_path / "in.mp4", "libx264", 640, 360, 3, Fraction(24))
    _sr(capsys, src, tmp_path / "out.mp4", "--crf", "0")
    means = [np.mean([_luma(f).mean() for f in frames_of(p)]) for p in (src, tmp_path / "out.mp4")]
    assert abs(means[0] - means[1]) < 0.1, means


def test_deep_conversions_round_to_nearest_both_ways():
    """The float path's own round trip: 16-bit BGR -> 10-bit 4:4:4 -> 16-bit BGR is the 10-bit value rounded."""
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 65536, (8, 8, 3)).astype(np.uint16)
    gray = np.repeat(pixels[..., :1], 3, -1)
    for pix_fmt in ("gbrp10le", "yuv444p10le"):
        f = yuv.from_bgr(gray, pix_fmt, "ITU709", False)
        back = yuv.to_bgr(f, "ITU709", False, False, True)
        top = 1023 if pix_fmt.startswith("gbrp") else 876
        assert np.abs(back.astype(float) - gray).max() <= 65535 / top / 2 + 1, pix_fmt


def _ycgco_rgb(y, cg, co, full: bool) -> np.ndarray:
    """8-bit YCgCo samples (ITU-T H.273 matrix 8) -> RGB 0..255 (float)."""
    yn = y / 255 if full else (y - 16) / 219
    g, o = (cg - 128) / (255 if full else 224), (co - 128) / (255 if full else 224)
    t = yn - g
    return np.stack([t + o, yn + g, t - o], -1) * 255


@pytest.mark.parametrize("full", [False, True], ids=["limited", "full"])
def test_ycgco_is_read_and_written_as_ycgco(tmp_path, capsys, full):
    """issue 67: a clip tagged YCgCo was read as BT.601 (channel means off by up to 11 levels). Its patches come
    back within 1 of the exact RGB in FFV1, and through lossless H.264 as the same YCgCo samples, tagged so."""
    rng = np.random.default_rng(8)
    patch = 8
    yc, cg, co = rng.integers(70, 180, (8, 8)), rng.integers(100, 156, (8, 8)), rng.integers(100, 156, (8, 8))
    planes = [np.kron(a, np.ones((s, s), int)).astype(np.uint8) for a, s in ((yc, patch), (cg, patch // 2),
                                                                             (co, patch // 2))]
    src = _planes_clip(tmp_path / "in.mkv", planes, "yuv420p", (8, 2 if full else 1, 1, 1), frames=1)
    _sr(capsys, src, tmp_path / "out.mkv")
    centres = slice(3 * patch // 2, None, 3 * patch)
    got = frames_of(tmp_path / "out.mkv")[0].to_ndarray(format="rgb24")[centres, centres].astype(float)
    exact = _ycgco_rgb(*(a.astype(float) for a in (yc, cg, co)), full)
    assert np.abs(got - np.clip(exact, 0, 255)).max() <= 1
    _sr(capsys, src, tmp_path / "out.mp4", "--codec", "h264", "--crf", "0")
    f = frames_of(tmp_path / "out.mp4")[0]
    assert (f.colorspace, f.color_range) == (8, 2 if full else 1)
    half = slice(3 * patch // 4, None, 3 * patch // 2)  # the same centres in the 4:2:0 chroma planes
    for plane, want, at in zip(_planes(f), (yc, cg, co), (centres, half, half), strict=True):
        assert np.abs(plane[at, at].astype(int) - want).max() <= 1


def test_ycgco_conversions_round_trip():
    rng = np.random.default_rng(1)
    pixels = rng.integers(0, 256, (8, 8, 3)).astype(np.uint8)
    for pix_fmt, full in (("yuv444p", False), ("yuv444p", True), ("yuv444p10le", False)):
        f = yuv.from_bgr(pixels, pix_fmt, yuv.YCGCO, full)
        back = yuv.to_bgr(f, yuv.YCGCO, full, False, pix_fmt.endswith("10le"))
        scale = 257.0 if back.dtype == np.uint16 else 1.0
        assert np.abs(back / scale - pixels).max() <= 1.5, pix_fmt
