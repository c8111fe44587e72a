"""Hostile and unlucky video files (issue 27): only the demuxer a file's extension means reads it, through the file
protocol alone (an ffconcat script or a PNG named .mp4 fails alone, a FIFO never hangs the run); the pixel limit
holds for the stream header and every frame; a size change mid-clip fails the clip; alpha is kept in FFV1 and said
to be dropped elsewhere; encoder size limits are checked before any work."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
from fractions import Fraction

import cv2
import numpy as np
import pytest

from pipeline.cli import main
from pipeline.sr.video import av_io as video_io
from tests.video_clips import frames_of, make_clip, make_png_mov

MAX_PIXELS_ENV = "SRDEPLOY_MAX_PIXELS"


def _sr(capsys, weights, *args):
    w = ["--weights", weights] if weights else []
    code = main(["sr", *map(str, args), "--model", "srcnn", "--scale", "2", "--backend", "torch", "--threads", "1", *w])
    return code, capsys.readouterr().err


def _failed(err: str) -> dict[str, str]:
    return dict(ln[len("failed "):].split(": ", 1) for ln in err.splitlines() if ln.startswith("failed "))


def test_content_of_another_format_fails_alone_and_nothing_outside_input_is_read(weights, tmp_path):
    """An ffconcat script named a.mp4 that names a link inside INPUT to a clip outside, another naming a FIFO in
    INPUT, and a PNG named p.mp4: each fails alone with one line, the good clip is written, nothing hangs (the CLI
    runs in a subprocess under a time limit)."""
    outside = make_clip(tmp_path / "outside.mkv", "ffv1", 16, 12, 3, 10)
    src = tmp_path / "in"
    src.mkdir()
    (src / "inner.mkv").symlink_to(outside)
    (src / "a.mp4").write_text("ffconcat version 1.0\nfile inner.mkv\n")
    os.mkfifo(src / "pipe.mkv")
    (src / "b.mov").write_text("ffconcat version 1.0\nfile pipe.mkv\n")
    cv2.imwrite(str(src / "p.png"), np.full((20, 30, 3), 90, np.uint8))
    (src / "p.png").rename(src / "p.mp4")
    make_clip(src / "ok.mkv", "ffv1", 16, 12, 3, 10)
    w = ["--weights", weights] if weights else []
    run = subprocess.run([sys.executable, "-m", "pipeline", "sr", str(src), str(tmp_path / "out"), "--model",
                          "srcnn", "--scale", "2", "--backend", "torch", "--threads", "1", *w],
                         capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert run.returncode == 1, run.stderr
    failed = _failed(run.stderr)
    for name in ("a.mp4", "b.mov", "p.mp4"):
        assert failed[name].startswith("not a readable video (its content is not MP4/MOV"), run.stderr
    assert "link leading outside INPUT" in failed["inner.mkv"]
    assert "not a regular file" in failed["pipe.mkv"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["ok.mkv"]


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "clip.mp4"
    os.mkfifo(fifo)
    outcome: list[BaseException] = []
    t = threading.Thread(target=lambda: outcome.append(pytest.raises(video_io.VideoError, video_io.probe, fifo).value),
                         daemon=True)
    t.start()
    t.join(30)
    if not outcome:  # blocked in open(): a writer lets the thread end
        with open(fifo, "wb"):
            pass
        pytest.fail("opening a FIFO named .mp4 blocked")
    assert "not a regular file" in str(outcome[0])


def test_pixel_limit_holds_for_the_stream_header(weights, tmp_path, capsys, monkeypatch):
    src = tmp_path / "in"
    src.mkdir()
    make_clip(src / "big.mp4", "libx264", 64, 48, 3, 10)
    make_clip(src / "small.mkv", "ffv1", 16, 12, 3, 10)
    monkeypatch.setenv(MAX_PIXELS_ENV, "1000")
    code, err = _sr(capsys, weights, src, tmp_path / "out")
    assert code == 1, err
    assert _failed(err)["big.mp4"].startswith("video is 64x48 (0.0031 megapixels), over the limit of 1,000 pixels")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["small.mkv"]


def test_a_clip_over_the_limit_is_refused_before_any_backend_loads(tmp_path, capsys, monkeypatch):
    """issue 67: the 64x48 clip was refused only after the backend had loaded (898 MB); now from its header, with
    the image's exit code and one line, and nothing loaded."""
    from pipeline.sr.local import LocalExecutor

    def loads(*_a, **_k):
        raise AssertionError("the backend was loaded")

    monkeypatch.setattr(LocalExecutor, "start", loads)
    clip = make_clip(tmp_path / "big.mp4", "libx264", 64, 48, 3, 10)
    monkeypatch.setenv(MAX_PIXELS_ENV, "1000")
    code = main(["sr", str(clip), str(tmp_path / "out.mp4"), "--model", "srcnn", "--scale", "2"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert _failed(err) == {"big.mp4": "video is 64x48 (0.0031 megapixels), over the limit of 1,000 pixels that "
                                       "guards against decompression bombs; if you mean it, raise the limit with "
                                       "SRDEPLOY_MAX_PIXELS=3072"}
    assert err.splitlines()[0].startswith("sr: srcnn x2 on no backend (nothing to upscale); 1 video -> "), err
    assert not (tmp_path / "out.mp4").exists()


def test_a_size_change_mid_clip_fails_that_clip_and_writes_nothing(weights, tmp_path, capsys):
    src = tmp_path / "in"
    src.mkdir()
    make_png_mov(src / "grows.mov", [(32, 32)] * 3 + [(64, 48)] * 2)
    make_png_mov(src / "steady.mov", [(32, 32)] * 3)
    code, err = _sr(capsys, weights, src, tmp_path / "out")
    assert code == 1, err
    assert _failed(err)["grows.mov"] == ("frame 4 is 64x48 but the clip began at 32x32: a frame size that changes "
                                         "mid-clip is not supported (split the clip where the size changes)")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["steady.mov"]
    assert [(f.width, f.height) for f in frames_of(tmp_path / "out" / "steady.mov")] == [(64, 64)] * 3


def test_a_frame_over_the_limit_mid_clip_is_never_converted(weights, tmp_path, capsys, monkeypatch):
    """The header says 32x32; frame 3 is 200x200, over a 10,000-pixel limit: the decoder itself refuses it
    (FFmpeg's max_pixels) and the clip fails in one line."""
    src = tmp_path / "in"
    src.mkdir()
    make_png_mov(src / "bomb.mov", [(32, 32)] * 2 + [(200, 200)] * 2)
    monkeypatch.setenv(MAX_PIXELS_ENV, "10000")
    code, err = _sr(capsys, weights, src, tmp_path / "out")
    assert code == 1, err
    line = _failed(err)["bomb.mov"]
    assert line.startswith("damaged or truncated video: upscaled the 2 of 4 frames"), line
    assert (": Invalid argument (the decoder refuses a frame over the pixel limit of 10,000 this way; "
            "SRDEPLOY_MAX_PIXELS raises it)") in line, line


def test_alpha_is_kept_in_ffv1_and_said_dropped_elsewhere(weights, tmp_path, capsys):
    clip = make_png_mov(tmp_path / "a.mov", [(24, 16)] * 3, "rgba", alpha=100)
    code, err = _sr(capsys, weights, clip, tmp_path / "a.mkv")
    assert code == 0, err
    frames = frames_of(tmp_path / "a.mkv")
    assert [f.format.name for f in frames] == ["bgra"] * 3
    assert all((f.to_ndarray()[..., 3] == 100).all() for f in frames)
    code, err = _sr(capsys, weights, clip, tmp_path / "a.mp4")
    assert code == 0, err
    assert "alpha dropped (h264 holds no alpha; --codec ffv1 into .mkv or .avi keeps it)" in err.splitlines()[0]


@pytest.mark.parametrize(("size", "out", "codec", "needle"), [
    ((8200, 16), "o.mp4", "h264", "the output would be 16400x32 but h264 encodes at most 16384x16384"),
    ((16, 4400), "o.webm", "av1", "the output would be 32x8800 but av1 encodes at most 16384x8704"),
])
def test_encoder_size_limits_are_checked_before_any_work(weights, tmp_path, capsys, size, out, codec, needle):
    clip = make_clip(tmp_path / "c.mkv", "ffv1", *size, 1, Fraction(10))
    code, err = _sr(capsys, weights, clip, tmp_path / out, "--codec", codec)
    assert code == 2, err
    assert err.strip().splitlines() == [f"error: c.mkv: {needle}; choose another --codec or --scale "
                                        "(nothing was written)"]
    assert not (tmp_path / out).exists() and not list(tmp_path.glob(".*.part"))


def test_five_hundred_attachments_make_a_short_first_line(weights, tmp_path, capsys):
    import av

    base = make_clip(tmp_path / "base.mkv", "ffv1", 16, 12, 2, 10)
    clip = tmp_path / "fonts.mkv"
    with av.open(str(base)) as src, av.open(str(clip), "w") as out:
        v = out.add_stream_from_template(src.streams.video[0])
        for i in range(500):
            out.add_attachment(f"font{i}.ttf", "font/ttf", b"x" * 10)
        for p in src.demux(src.streams.video[0]):
            if p.size:
                p.stream = v
                out.mux(p)
    _, err = _sr(capsys, weights, clip, tmp_path / "out.mkv")  # the outcome is not the point
    first = err.splitlines()[0]
    assert "not copied: attachment:? x500 -> " in first and len(first) < 400, first


def test_failed_videos_are_counted_as_videos_and_our_refusals_keep_their_words(weights, tmp_path, capsys):
    from pipeline.images.imageio import ImageError
    from pipeline.sr.runner.worker import infer_reason

    src = tmp_path / "in"
    src.mkdir()
    (src / "notes.mp4").write_text("not a video")
    (src / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\nbroken")
    code, err = _sr(capsys, weights, src, tmp_path / "out")
    assert code == 1, err
    assert "1 image, 1 video failed: bad.png, notes.mp4" in err
    assert infer_reason(ImageError("output 9x9 needs 1.0 GiB, more than half the free memory")) == \
        "output 9x9 needs 1.0 GiB, more than half the free memory"


def test_summary_never_replaces_an_output_and_its_write_failure_is_one_line(weights, tmp_path, capsys):
    from pipeline import backends
    from pipeline.errors import PipelineError
    from pipeline.sr import upscale

    src = tmp_path / "in"
    src.mkdir()
    make_clip(src / "v.mkv", "ffv1", 16, 12, 2, 10)
    code, err = _sr(capsys, weights, src, tmp_path / "out", "--summary", tmp_path / "out" / "v.mkv")
    assert code == 2 and err.strip().splitlines() == [
        f"error: --summary {tmp_path / 'out' / 'v.mkv'} is the output of v.mkv; give another file (the summary "
        "never replaces a result)"]
    assert not (tmp_path / "out").exists()

    class FolderBecomesFile(backends.Backend):  # a real backend; the summary's folder is replaced mid-run
        name, device, precision, model_name = "torch", "cpu", "fp32", "srcnn"

        def __init__(self, real):
            self.real, self.spec = real, real.spec

        @classmethod
        def status(cls, spec, precision, **_):
            return cls.ok("a test's wrapper")

        def load(self):
            return self

        def infer(self, batch, scale):
            if (tmp_path / "sums").is_dir():
                (tmp_path / "sums").rmdir()
                (tmp_path / "sums").write_text("now a file")
            return self.real.infer(batch, scale)

        def describe(self):
            return "torch"

    (tmp_path / "sums").mkdir()
    real = backends.create("torch", "srcnn", "fp32", **({"weights": weights} if weights else {}))
    with pytest.raises(PipelineError, match=r"^cannot write --summary .*sums/s\.json: .* \(the outputs are written; "
                                            r"1 ok\)$"):
        upscale(src, tmp_path / "out2", scale=2, backend=FolderBecomesFile(real), progress=False,
                summary=tmp_path / "sums" / "s.json")
    assert (tmp_path / "out2" / "v.mkv").is_file()


def test_sigterm_stops_like_ctrl_c_and_a_killed_runs_temp_files_are_removed(weights, tmp_path):
    import signal
    import time

    src = tmp_path / "in"
    src.mkdir()
    make_clip(src / "a.mkv", "ffv1", 16, 12, 2, 10)
    make_clip(src / "long.mkv", "ffv1", 96, 64, 400, 10)
    out = tmp_path / "out"
    w = ["--weights", weights] if weights else []
    cmd = [sys.executable, "-m", "pipeline", "sr", str(src), str(out), "--model", "srcnn", "--scale", "2",
           "--backend", "torch", "--threads", "1", "--summary", str(tmp_path / "s.json"), *w]
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    for sig in (signal.SIGTERM, signal.SIGKILL):
        proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env)
        deadline = time.monotonic() + 240
        while not list(out.glob(".long.mkv.*.part")) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
        if sig == signal.SIGTERM:
            assert proc.returncode == 143, err
            assert "1 file(s) written (complete), 1 not done, summary in" in err and "--skip-existing" in err, err
            assert err.strip().splitlines()[-1].startswith("terminated: 1 file(s) written")  # one line, not two
            assert not list(out.glob("*.part")) and (tmp_path / "s.json").is_file()
    assert proc.returncode == -signal.SIGKILL and len(list(out.glob(".long.mkv.*.part"))) == 1  # left by the kill
    run = subprocess.run([*cmd, "--skip-existing"], capture_output=True, text=True, env=env, timeout=600)
    assert "removed 1 temp file(s) a killed earlier run left beside its outputs" in run.stderr, run.stderr
    assert not list(out.glob("*.part"))
