"""`python -m pipeline sr` on videos: clips PyAV makes here (moving pattern + sine audio; H.264/MP4, FFV1/MKV,
VP9/WebM; odd sizes and frame rates) through the real torch backend, checked by decoding what was written."""
import json
import os
import re
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np
import pytest

from pipeline.backends.base import Backend
from pipeline.cli import main
from pipeline.images import tiling
from pipeline.sr import DEFAULT_PRESET
from pipeline.sr.video import yuv
from tests.caches import one_thread_own_cache
from tests.video_clips import audio_of, frames_of, layout, make_clip, subtitle_packets

SCALE = 2.0


_env = one_thread_own_cache()


def _sr(capsys, weights, *args, scale=SCALE):
    w = ["--weights", weights] if weights else []
    code = main(["sr", *map(str, args), "--model", "srcnn", "--scale", str(scale), "--backend", "torch",
                 "--threads", "1", *w])
    return code, capsys.readouterr().err


CLIPS = {  # name -> make_clip arguments
    "h264.mp4": dict(codec="libx264", w=64, h=48, frames=30, rate=Fraction(24000, 1001), audio="aac"),
    "ffv1.mkv": dict(codec="ffv1", w=63, h=47, frames=20, rate=Fraction(25, 2), audio="flac"),
    "vp9.webm": dict(codec="libvpx-vp9", w=62, h=45, frames=15, rate=30, audio="libopus"),
}


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    root = tmp_path_factory.mktemp("clips")
    for name, kw in CLIPS.items():
        make_clip(root / name, **kw)
    return root


def _rate(path):
    with av.open(str(path)) as c:
        return c.streams.video[0].average_rate


def _duration(path):
    with av.open(str(path)) as c:
        return c.duration / av.time_base


@pytest.mark.parametrize("name", list(CLIPS))
def test_clip_keeps_frames_rate_duration_layout_and_audio(clips, weights, tmp_path, capsys, name):
    src, dst = clips / name, tmp_path / name
    code, err = _sr(capsys, weights, src, dst, "--summary", tmp_path / "s.json")
    assert code == 0, err
    kw = CLIPS[name]
    inp, out = frames_of(src), frames_of(dst)
    assert len(out) == len(inp) == kw["frames"]
    w, h = tiling.output_length(kw["w"], SCALE), tiling.output_length(kw["h"], SCALE)
    assert (out[0].width, out[0].height) == (w, h)
    assert _rate(dst) == _rate(src)
    assert [f.pts * f.time_base for f in out] == [f.pts * f.time_base for f in inp]
    assert abs(_duration(dst) - _duration(src)) <= 1 / float(kw["rate"])
    assert layout(dst) == layout(src)
    assert np.array_equal(audio_of(dst), audio_of(src))
    rec = json.loads((tmp_path / "s.json").read_text())["images"][0]
    assert rec["status"] == "ok" and rec["out_size"] == [w, h]
    v = rec["video"]
    assert v["frames"] == kw["frames"] and v["frame_rate_in"] == v["frame_rate_out"] == round(float(kw["rate"]), 4)
    assert v["duration_s"] == pytest.approx(_duration(src), abs=0.05)
    assert v["fps"] > 0 and v["time_per_frame_s"] > 0
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".part")]


def _as_image(frame, matrix="ITU601", rng="MPEG"):
    """The frame as the BGR picture a user would save: converted with the stated matrix and range."""
    return frame.to_ndarray(format="bgr24", src_colorspace=matrix, dst_colorspace=matrix, src_color_range=rng,
                            dst_color_range="JPEG", interpolation=yuv.SWS)


@pytest.mark.parametrize("colour", [None, (1, 2, 1, 1)], ids=["untagged", "bt709-full"])
def test_ffv1_frame_equals_the_frame_upscaled_as_an_image(weights, tmp_path, capsys, colour):
    """Lossless round trip: frame k of the upscaled clip is bit-exact the PNG of frame k upscaled as an image, with
    the YUV->RGB conversion that uses the clip's own matrix and range (BT.601 limited when untagged, SD)."""
    src = make_clip(tmp_path / "in.mkv", "ffv1", 41, 33, 6, 24, colour=colour)
    assert _sr(capsys, weights, src, tmp_path / "out.mkv")[0] == 0
    k = 4
    conv = ("ITU709", "JPEG") if colour else ("ITU601", "MPEG")
    picture = _as_image(frames_of(src)[k], *conv)
    cv2.imwrite(str(tmp_path / "frame.png"), picture)
    assert _sr(capsys, weights, tmp_path / "frame.png", tmp_path / "frame_sr.png")[0] == 0
    expected = cv2.imread(str(tmp_path / "frame_sr.png"))
    got = frames_of(tmp_path / "out.mkv")[k]
    assert got.format.name == "bgr0"
    assert np.array_equal(got.to_ndarray(format="bgr24"), expected)
    other = ("ITU601", "MPEG") if colour else ("ITU709", "JPEG")  # the conversion must be the clip's, not another
    assert not np.array_equal(_as_image(frames_of(src)[k], *other), picture)


def test_h264_frame_is_the_image_path_within_codec_error(clips, weights, tmp_path, capsys):
    assert _sr(capsys, weights, clips / "h264.mp4", tmp_path / "out.mp4")[0] == 0
    k = 7
    cv2.imwrite(str(tmp_path / "frame.png"), _as_image(frames_of(clips / "h264.mp4")[k]))
    assert _sr(capsys, weights, tmp_path / "frame.png", tmp_path / "frame_sr.png")[0] == 0
    expected = cv2.imread(str(tmp_path / "frame_sr.png"))
    # the expected picture through 4:2:0 alone (this pattern's sharp hue edges: ~39 dB, chroma interpolated at full
    # resolution both ways); x264 at crf 16 costs this 128x96 pattern about 5 dB more
    sub = av.VideoFrame.from_ndarray(expected, format="bgr24").reformat(
        format="yuv420p", dst_colorspace="ITU601", src_color_range="JPEG", dst_color_range="MPEG",
        interpolation=yuv.SWS)
    floor = _psnr(_as_image(sub), expected)
    out = frames_of(tmp_path / "out.mp4")
    assert _psnr(_as_image(out[k]), expected) > floor - 7
    assert _psnr(_as_image(out[k + 1]), expected) < floor - 10  # the neighbour frame is far: the check can fail


def _psnr(a, b):
    return 10 * np.log10(255**2 / np.mean((a.astype(float) - b.astype(float)) ** 2))


def test_tags_rotation_vfr_and_10bit_are_kept(weights, tmp_path, capsys):
    tb = Fraction(1, 1000)
    pts = [0, 40, 80, 150, 190, 300, 340, 400]  # variable frame rate
    src = make_clip(tmp_path / "in.mkv", "ffv1", 40, 30, len(pts), 25, pix_fmt="yuv420p10le", pts=pts, time_base=tb,
                    colour=(1, 1, 1, 1), rotation=90, audio="flac")
    for codec, pix in (("h265", "yuv420p10le"), ("ffv1", "gbrp10le")):
        dst = tmp_path / f"out_{codec}.mkv"
        code, err = _sr(capsys, weights, src, dst, "--codec", codec)
        assert code == 0, err
        out = frames_of(dst)
        assert [f.pts for f in out] == pts
        assert out[0].format.name == pix and out[0].rotation == 90
        if codec == "h265":
            assert (out[0].colorspace, out[0].color_range, out[0].color_primaries, out[0].color_trc) == (1, 1, 1, 1)
        assert np.array_equal(audio_of(dst), audio_of(src))


def test_odd_output_is_cropped_by_one_pixel_and_the_first_line_says_so(weights, tmp_path, capsys):
    src = make_clip(tmp_path / "in.mkv", "ffv1", 21, 15, 3, 10)
    code, err = _sr(capsys, weights, src, tmp_path / "out.mp4", scale=3)
    assert code == 0, err
    first = err.splitlines()[0]
    assert first.startswith("sr: ") and "63x45 cropped to 62x44" in first
    out = frames_of(tmp_path / "out.mp4")
    assert (out[0].width, out[0].height) == (62, 44) and len(out) == 3
    # the kept pixels are those of the uncropped upscale: the lossless run keeps all 63x45
    assert _sr(capsys, weights, src, tmp_path / "full.mkv", scale=3)[0] == 0
    full = frames_of(tmp_path / "full.mkv")[1].to_ndarray(format="bgr24")
    assert full.shape == (45, 63, 3)
    cropped = _as_image(out[1])
    kept = _psnr(cropped, full[:44, :62])  # the first 62x44 pixels, not a resize or a shift
    assert kept > 25 and kept > _psnr(cropped, full[1:, 1:]) + 5
    assert kept > _psnr(cropped, cv2.resize(full, (62, 44))) + 3


@pytest.mark.parametrize(("name", "codec", "options", "of"), [
    ("cut.mkv", "ffv1", None, "~20"),                            # MKV states no count: from its duration
    ("cut.mp4", "libx264", {"movflags": "faststart"}, "20"),     # the MP4 index (first) counts the frames
])
def test_truncated_clip_keeps_the_frames_that_decode(weights, tmp_path, capsys, name, codec, options, of):
    src = make_clip(tmp_path / f"whole{Path(name).suffix}", codec, 32, 24, 20, 10, audio="flac" if codec == "ffv1"
                    else "aac", options=options)
    data = src.read_bytes()
    cut = tmp_path / name
    cut.write_bytes(data[: len(data) * 6 // 10])
    out = tmp_path / f"out{Path(name).suffix}"
    code, err = _sr(capsys, weights, cut, out, "--summary", tmp_path / "s.json")
    assert code == 1
    failed = [ln for ln in err.splitlines() if ln.startswith("failed ")]
    assert len(failed) == 1 and "truncated" in failed[0]
    n = len(frames_of(out))
    assert 0 < n < 20 and f"upscaled the {n} of {of} frames that decoded" in failed[0]
    assert json.loads((tmp_path / "s.json").read_text())["images"][0]["video"]["frames"] == n


def test_mp4_cut_before_its_index_is_one_line(clips, weights, tmp_path, capsys):
    """FFmpeg writes an MP4's index at the end: without it nothing can be decoded, and nothing is written."""
    data = (clips / "h264.mp4").read_bytes()
    (tmp_path / "cut.mp4").write_bytes(data[: len(data) // 2])
    code, err = _sr(capsys, weights, tmp_path / "cut.mp4", tmp_path / "out.mp4")
    assert code == 1
    assert [ln for ln in err.splitlines() if ln.startswith("failed ")] == [
        "failed cut.mp4: not a readable video (Invalid data found when processing input)"]
    assert not (tmp_path / "out.mp4").exists()


def test_audio_only_and_non_video_files_are_one_line_each(weights, tmp_path, capsys):
    src = tmp_path / "in"
    src.mkdir()
    make_clip(src / "sound.mkv", "", 0, 0, 10, 10, audio="flac", video=False)
    (src / "notes.mp4").write_text("not a video")
    make_clip(src / "ok.mkv", "ffv1", 16, 12, 3, 10)
    cv2.imwrite(str(src / "still.png"), np.full((12, 16, 3), 90, np.uint8))
    code, err = _sr(capsys, weights, src, tmp_path / "out", "--summary", tmp_path / "s.json")
    assert code == 1
    failed = sorted(ln for ln in err.splitlines() if ln.startswith("failed "))
    assert len(failed) == 2
    assert failed[0].startswith("failed notes.mp4: not a readable video")
    assert failed[1].startswith("failed sound.mkv: no video stream (audio streams only)")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["ok.mkv", "still.png"]
    counts = json.loads((tmp_path / "s.json").read_text())["counts"]
    assert counts["ok"] == 2 and counts["failed"] == 2


class _Interrupt(Backend):
    """A real backend that raises KeyboardInterrupt (Ctrl-C) on its n-th call: a run stopped mid-clip."""

    name, device, precision, model_name = "interrupted", "cpu", "fp32", "srcnn"

    def __init__(self, real, n):
        self.real, self.n, self.spec = real, n, real.spec

    @classmethod
    def status(cls, spec, precision, **_):
        return cls.ok("a test's wrapper")

    def load(self):
        return self

    def infer(self, batch, scale):
        self.n -= 1
        if self.n == 0:
            raise KeyboardInterrupt
        return self.real.infer(batch, scale)

    def describe(self):
        return "torch, interrupted"


def test_interrupted_run_resumes_with_skip_existing(weights, tmp_path, capsys):
    from pipeline import backends
    from pipeline.sr import upscale

    src = tmp_path / "in"
    src.mkdir()
    for name in ("a.mkv", "b.mkv"):
        make_clip(src / name, "ffv1", 24, 18, 8, 10, audio="flac")
    real = backends.create("torch", "srcnn", "fp32", **({"weights": weights} if weights else {}))
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):  # stopped at b.mkv's 4th frame
        upscale(src, out, scale=SCALE, backend=_Interrupt(real, 8 + 4), progress=False)
    assert sorted(p.name for p in out.iterdir()) == ["a.mkv"]  # no half-written b.mkv, no temp file left
    a_time = (out / "a.mkv").stat().st_mtime_ns
    s = upscale(src, out, scale=SCALE, backend=real, progress=False, skip_existing=True)
    assert s.counts == {"ok": 1, "failed": 0, "skipped": 1, "ignored": 0}
    assert (out / "a.mkv").stat().st_mtime_ns == a_time
    assert len(frames_of(out / "b.mkv")) == 8


@pytest.mark.parametrize(("extra", "needle"), [
    (("--codec", "h264"), "--codec h264 cannot be written into .webm"),
    (("--crf", "70"), "--crf must be from 0 to 51"),
    (("--codec", "ffv1", "--crf", "10"), "--crf does not apply to --codec ffv1"),
    (("--codec", "vp9", "--crf", "64"), "--crf for vp9 must be from 0 to 63"),
    (("--preset", "ludicrous"), "unknown --preset 'ludicrous' (choose from: ultrafast, superfast"),
    (("--preset", "fast"), "--preset applies to h264 and h265 only, not to .webm output, which is vp9 by default"),
    (("--codec", "av1", "--preset", "fast"), "--preset applies to h264 and h265 only, not to --codec av1"),
])
def test_bad_video_options_fail_before_any_work(clips, weights, tmp_path, capsys, extra, needle):
    code, err = _sr(capsys, weights, clips / "vp9.webm", tmp_path / "o.webm", *extra)
    assert code == 2
    assert err.strip().splitlines() == [f"error: {needle}" + err.strip().split(needle, 1)[1]]
    assert not os.listdir(tmp_path)


def test_video_output_name_must_be_a_video(clips, weights, tmp_path, capsys):
    code, err = _sr(capsys, weights, clips / "h264.mp4", tmp_path / "o.png")
    assert code == 2 and "is not a video file name" in err
    code, err = _sr(capsys, weights, clips / "h264.mp4", tmp_path / "o.mkv", "--format", "png")
    assert code == 2 and "--format png applies to images" in err and not (tmp_path / "o.mkv").exists()
    code, err = _sr(capsys, weights, clips / "h264.mp4", tmp_path / "folder")
    assert code == 0 and Path(tmp_path / "folder" / "h264.mp4").is_file()


def test_frames_in_flight_stay_bounded_whatever_the_length(weights, tmp_path, capsys, monkeypatch):
    """Decoding never runs more than a few frames ahead of inference, nor inference ahead of encoding."""
    from pipeline.sr.video import av_io as video_io

    src = make_clip(tmp_path / "long.mkv", "ffv1", 16, 12, 30, 30)
    counts = {"read": 0, "encoded": 0, "ahead": 0, "behind": 0}
    read_pixels, frame = video_io.frame_pixels, video_io.Writer.frame

    def counted_read(*a):
        counts["read"] += 1
        counts["ahead"] = max(counts["ahead"], counts["read"] - counts["encoded"])
        return read_pixels(*a)

    def counted_write(self, *a):
        counts["encoded"] += 1
        return frame(self, *a)

    monkeypatch.setattr(video_io, "frame_pixels", counted_read)
    monkeypatch.setattr(video_io.Writer, "frame", counted_write)
    for batch in (1, 4):
        counts.update(read=0, encoded=0, ahead=0)
        assert _sr(capsys, weights, src, tmp_path / f"out{batch}.mkv", "--batch", batch)[0] == 0
        assert counts["read"] == counts["encoded"] == 30
        # reader queue + one batch being upscaled + writer queue + one in each thread's hands
        assert counts["ahead"] <= 3 * batch + 2 * 2 + 2, counts


def test_bench_video_rows_and_report(weights):
    from pipeline import backends, report
    from pipeline.bench.video import video_fps

    be = backends.create("torch", "srcnn", "fp32", **({"weights": weights} if weights else {}))
    rows = video_fps("srcnn", 3, backend=be, log=lambda _m: None, sizes={"tiny": (48, 32)})
    (row,) = rows
    assert row["frames"] == 3 and row["input"] == [48, 32] and row["output"] == [144, 96]
    assert row["fps"] > 0 and row["inference_fps"] > 0 and row["codec"] == "h264"
    assert row["preset"] == DEFAULT_PRESET["h264"] and row["encode_fps"] > 0 and 0 < row["encoder_share"] < 1
    assert row["of_inference"] == round(row["fps"] / row["inference_fps"], 3)
    (skipped,) = video_fps("srcnn", 3, backend=be, log=lambda _m: None, sizes={"tiny": (48, 32)}, max_frame_s=0)
    assert skipped["fps"] is None and "would take" in skipped["skipped"] and "limit 0 s" in skipped["skipped"]
    md = "\n".join(report.video_markdown(rows + [skipped]))
    assert "## Video" in md and "tiny 48x32" in md and "vs-mlrt" in md
    assert "encoder share" in md and f"| {DEFAULT_PRESET['h264']} |" in md


def _x264_options(path) -> str:
    """The options x264 wrote into the stream (its SEI text), e.g. 'cabac=1 ref=1 ...'."""
    data = Path(path).read_bytes()
    start = data.index(b"options: ") + len(b"options: ")
    return data[start:data.index(b"\0", start)].decode()


def test_preset_reaches_the_encoder_and_the_done_line_splits_the_time(clips, weights, tmp_path, capsys):
    """--preset is the encoder's (x264's own record of its options says it), the default is DEFAULT_PRESET, the
    record keeps it, and a clip's done line ends with the decode / inference / encode split."""
    opts = {}
    for preset in ("ultrafast", None, "medium"):
        out = tmp_path / f"{preset}.mp4"
        code, err = _sr(capsys, weights, clips / "h264.mp4", out, *(("--preset", preset) if preset else ()),
                        "--summary", tmp_path / f"{preset}.json")
        assert code == 0, err
        chosen = preset or DEFAULT_PRESET["h264"]
        assert f"crf 16 {chosen} (x2" in err
        (done,) = [ln for ln in err.splitlines() if ln.startswith("done: ")]
        m = re.fullmatch(r"done: .* \(setup \d+\.\d s, then \S+ frames/s\); decode (\d+) %, inference (\d+) %, "
                         r"encode (\d+) %", done)
        assert m and 98 <= sum(map(int, m.groups())) <= 102, done
        summary = json.loads((tmp_path / f"{preset}.json").read_text())
        assert summary["images"][0]["video"]["preset"] == chosen
        assert set(summary["video_stage_s"]) == {"decode", "inference", "encode"}
        opts[chosen] = _x264_options(out)
    # x264's presets differ in these (its documented preset table): ultrafast has no CABAC, medium 3 references
    assert "cabac=0" in opts["ultrafast"] and "cabac=1" in opts["medium"] and " ref=3 " in opts["medium"]
    assert len({*opts.values()}) == 3


def test_preset_and_encoder_threads_are_in_the_segment_key(tmp_path):
    from models.lookup import get_spec
    from pipeline.sr.video.segment_files import segment_key
    from pipeline.sr.video.segments import segment_identity

    src = make_clip(tmp_path / "c.mkv", "ffv1", 16, 12, 2, 10)
    spec = get_spec("srcnn")
    keys = {segment_key(src, segment_identity(spec, None, {"backend": "torch", "precision": "fp32"},
                                                    {"codec": "h264", "preset": p, "encoder_threads": t}))
            for p in (None, "veryfast", "medium") for t in (1, 2)}
    assert len(keys) == 6  # the preset and the encoder's threads both change x264's bytes


def test_segment_seconds_is_checked_before_any_work(clips, weights, tmp_path, capsys):
    for extra in (("--ray",), ()):  # local runs take it too; the check comes before Ray starts
        code, err = _sr(capsys, weights, clips, tmp_path / "out", *extra, "--segment-seconds", "0")
        assert code == 2 and err.strip() == "error: --segment-seconds must be more than 0, got 0"
    code, err = _sr(capsys, weights, clips, tmp_path / "out", "--triton", "http://127.0.0.1:9", "--segment-seconds",
                    "5")
    assert code == 2 and "--segment-seconds apply only to local runs; with --triton" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("codec", "out_name", "pix", "note"), [
    ("av1", "o.mp4", "yuv420p10le", None),
    ("vp9", "o.webm", "yuv420p", "10-bit written as 8-bit (vp9 here encodes 8-bit only)"),
])
def test_10bit_input_per_codec(weights, tmp_path, capsys, codec, out_name, pix, note):
    src = make_clip(tmp_path / "in.mkv", "ffv1", 32, 32, 3, 10, pix_fmt="yuv420p10le")
    code, err = _sr(capsys, weights, src, tmp_path / out_name, "--codec", codec)
    assert code == 0, err
    out = frames_of(tmp_path / out_name)
    assert len(out) == 3 and out[0].format.name == pix and (out[0].width, out[0].height) == (64, 64)
    assert note is None or note in err.splitlines()[0]


def test_subtitles_are_copied_or_refused_before_work_in_one_line(weights, tmp_path, capsys):
    srt = tmp_path / "cues.srt"
    srt.write_text("1\n00:00:00,100 --> 00:00:00,500\nhello\n\n2\n00:00:00,600 --> 00:00:00,900\nworld\n")
    src = make_clip(tmp_path / "in.mkv", "ffv1", 24, 16, 10, 10, audio="flac", subtitles=srt)
    assert layout(src) == ["subtitle:srt", "video:ffv1", "audio:flac"]  # the output keeps this order
    assert _sr(capsys, weights, src, tmp_path / "out.mkv")[0] == 0
    assert layout(tmp_path / "out.mkv") == layout(src)
    assert subtitle_packets(tmp_path / "out.mkv") == subtitle_packets(src) == [(b"hello", 0.1), (b"world", 0.6)]
    code, err = _sr(capsys, weights, src, tmp_path / "out.mp4")  # MP4 holds no SubRip: refused before any work
    assert code == 2
    assert err.strip().splitlines()[-1] == "error: in.mkv: subtitle srt cannot be copied into .mp4 (write .mkv, " \
                                           "which holds it)"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cues.srt", "in.mkv", "out.mkv"]


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="per-thread CPU times come from /proc")
def test_cpu_split_counts_a_named_threads_children_with_it():
    """A thread named for a stage, and a thread it starts (as FFmpeg's and x264's pools are), count for that
    stage even after they end, sampled before; nothing else does."""
    import threading
    import time

    from pipeline.sr.video.cpu_split import ENCODE, CpuMeter, name_thread

    meter = CpuMeter()

    def burn():
        t0 = time.thread_time()
        while time.thread_time() - t0 < 0.3:
            sum(range(1000))
        meter.sample()  # as the stages do before their threads end

    def stage():
        name_thread(ENCODE)
        child = threading.Thread(target=burn)
        child.start()
        child.join()

    t = threading.Thread(target=stage)
    t.start()
    t.join()
    split = meter.stages()
    assert split["encode"] >= 0.25 and split["decode"] == 0.0, split
