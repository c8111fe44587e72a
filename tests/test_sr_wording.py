"""Issue 29's video and wording items: what `sr` prints and writes for clips, --format, --reference and the demo
report. Clips are made here with PyAV and run through the real torch backend (srcnn x2, one thread)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np
import pytest

from pipeline.bench.timing import warm_up
from pipeline.cli import main
from pipeline.demo import demo_markdown
from pipeline.sr.runner import console as sr_console
from tests.caches import one_thread_own_cache
from tests.signals import default_sigint
from tests.video_clips import frames_of, layout, make_clip

REPO = Path(__file__).resolve().parents[1]


_env = one_thread_own_cache()


def _sr(capsys, weights, *args, scale=2.0):
    w = ["--weights", weights] if weights else []
    code = main(["sr", *map(str, args), "--model", "srcnn", "--scale", str(scale), "--backend", "torch",
                 "--threads", "1", *w])
    return code, capsys.readouterr().err


def test_crf_with_a_default_lossless_mkv_is_refused_before_work(weights, tmp_path, capsys):
    src = make_clip(tmp_path / "in.mp4", "libx264", 32, 24, 4, 10)
    code, err = _sr(capsys, weights, src, tmp_path / "out.mkv", "--crf", "20")
    assert code == 2 and err.strip().splitlines()[-1] == (
        "error: --crf does not apply to .mkv output, which is lossless FFV1 by default: drop --crf, or give a "
        "lossy --codec (h264, h265, vp9, av1)")
    assert not (tmp_path / "out.mkv").exists()
    assert _sr(capsys, weights, src, tmp_path / "out.mkv", "--crf", "20", "--codec", "h264")[0] == 0


def test_video_rates_count_every_frame(weights, tmp_path, capsys):
    frames, (w, h) = 12, (32, 24)
    src = make_clip(tmp_path / "in.mkv", "ffv1", w, h, frames, 10)
    code, err = _sr(capsys, weights, src, tmp_path / "out.mkv", "--summary", tmp_path / "s.json")
    s = json.loads((tmp_path / "s.json").read_text())
    assert code == 0 and s["images"][0]["out_size"] == [2 * w, 2 * h]
    out_mpix = frames * 4 * w * h / 1e6
    assert s["mpix_per_s"] == pytest.approx(out_mpix / s["process_s"], rel=0.02)
    assert s["images_per_s"] == pytest.approx(frames / s["process_s"], rel=0.02)  # frames count as pictures
    done = next(ln for ln in err.splitlines() if ln.startswith("done: "))
    assert "frames/s" in done and "images/s" not in done
    assert err.splitlines()[0].endswith(f"1 video -> {tmp_path / 'out.mkv'}")


def test_warm_up_waits_out_the_slow_first_calls():
    calls = []

    def fn():  # ONNX Runtime at a new input size: the first two calls are slow
        calls.append(1)
        time.sleep(0.2 if len(calls) <= 2 else 0.0)

    assert warm_up(fn) >= 3 and len(calls) >= 3


def test_avi_output_ticks_once_a_frame_in_order(weights, tmp_path, capsys):
    src = make_clip(tmp_path / "in.mp4", "libx264", 32, 24, 24, 12)
    assert _sr(capsys, weights, src, tmp_path / "out.avi")[0] == 0
    with av.open(str(tmp_path / "out.avi")) as c:
        s = c.streams.video[0]
        assert s.time_base == Fraction(1, 12) and s.frames == 24
        assert c.duration / av.time_base == pytest.approx(2.0, abs=0.1)
    pts = [f.pts for f in frames_of(tmp_path / "out.avi")]
    assert len(pts) == 24 and pts == sorted(pts)


def test_audio_the_container_cannot_hold_is_refused_before_work_or_dropped(weights, tmp_path, capsys):
    src = make_clip(tmp_path / "in.mp4", "libx264", 32, 24, 6, 10, audio="aac")
    code, err = _sr(capsys, weights, src, tmp_path / "out.webm")
    assert code == 2 and err.strip().splitlines()[-1] == (
        "error: in.mp4: audio aac cannot be copied into .webm (write .mkv, which holds it; --audio drop leaves "
        "the audio out)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.mp4"]
    code, err = _sr(capsys, weights, src, tmp_path / "out.webm", "--audio", "drop")
    assert code == 0 and layout(tmp_path / "out.webm") == ["video:vp9"]
    assert "audio dropped (--audio drop): audio:aac" in err.splitlines()[0]


def test_h265_in_mp4_is_tagged_hvc1(weights, tmp_path, capsys):
    src = make_clip(tmp_path / "in.mkv", "ffv1", 32, 24, 3, 10)
    assert _sr(capsys, weights, src, tmp_path / "out.mp4", "--codec", "h265")[0] == 0
    with av.open(str(tmp_path / "out.mp4")) as c:
        assert c.streams.video[0].codec_context.codec_tag == "hvc1"


def test_one_clip_says_its_crop_once_and_an_all_skipped_run_has_no_rate(weights, tmp_path, capsys):
    src = make_clip(tmp_path / "in.mkv", "ffv1", 21, 15, 3, 10)
    code, err = _sr(capsys, weights, src, tmp_path / "out.mp4", scale=3)  # 63x45: yuv420p needs even sides
    assert code == 0 and err.count("cropped to") == 1 and "cropped to" in err.splitlines()[0]
    code, err = _sr(capsys, weights, src, tmp_path / "out.mp4", "--skip-existing", scale=3)
    done = next(ln for ln in err.splitlines() if ln.startswith("done: "))
    assert code == 0 and done.endswith("(nothing upscaled)") and "/s" not in done
    assert "skipping 1 video whose output exists" in err


def test_plain_video_progress_shows_one_rate():
    lines: list[str] = []
    bar = sr_console.PlainProgress(10, lines.append, every_s=0.0, unit="frame", desc="a.mp4")
    time.sleep(0.01)
    bar.update(2)
    assert len(lines) == 1 and lines[0].startswith("progress: a.mp4: 2/10 frame(s) in ")
    assert lines[0].count("/s") == 1 and lines[0].endswith(" frame/s")


def test_format_without_alpha_or_16_bit_says_so_in_the_image_line(weights, tmp_path, capsys):
    rgba16 = np.random.default_rng(0).integers(0, 65535, (20, 24, 4), dtype=np.uint16)
    cv2.imwrite(str(tmp_path / "a.png"), rgba16)
    code, err = _sr(capsys, weights, tmp_path / "a.png", tmp_path / "out", "--format", "jpg")
    line = next(ln for ln in err.splitlines() if ln.startswith("a.png: "))
    assert code == 0 and ("rgba 16-bit -> rgb 8-bit jpg: 16-bit written as 8-bit (jpg holds 8-bit samples); "
                          "alpha dropped (jpg has no alpha channel)") in line


def test_demo_report_roofline_in_percent_and_psnr_with_two_decimals():
    sr = {"model": "srcnn", "scale": 3.0, "backend": "ort", "images": [
        {"input": "a.png", "in_size": [8, 8], "out_size": [24, 24], "psnr": 30.5, "psnr_bicubic": 28.123456,
         "ssim": 0.9, "ssim_bicubic": 0.8, "time_s": 0.1, "output": "a.png"}],
          "reference": {"psnr": 30.5, "psnr_bicubic": 28.123456}}
    bench = {"results": [{"sweep": "main", "model": "srcnn", "backend": "ort", "size": "256x256",
                          "latency_ms": {"median": 12.0}, "speedup_vs_baseline": 4.0, "roofline_fraction": 0.0996}]}
    md = demo_markdown(sr, ["a"], None, bench, 1.0, {"cpu": "Test CPU", "gpu": None})
    assert "| 30.50 | 28.12 |" in md and "Mean PSNR-Y 30.50 dB vs bicubic 28.12 dB (+2.38 dB)" in md
    assert "| 4.00x (+300 %) | 10.0 % |" in md and "0.0996" not in md  # speed-up and roofline as percentages
    assert md.index("- CPU: Test CPU") < md.index("## Super-resolution")  # the machine facts at the top


def test_ctrl_c_prints_one_interrupted_line(weights, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    rng = np.random.default_rng(0)
    for i in range(200):  # enough that the run cannot finish before the signal lands (60 once did, under load)
        cv2.imwrite(str(src / f"{i:03d}.png"), rng.integers(0, 255, (160, 160, 3), dtype=np.uint8))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "pipeline", "sr", str(src), str(tmp_path / "out"), "--model",
                             "srcnn", "--scale", "3", "--backend", "torch", "--threads", "1", "--workers", "1",
                             *(["--weights", weights] if weights else [])],
                            cwd=REPO, env=env, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    lines = []
    try:
        for line in proc.stderr:  # the first per-image line: the run is under way
            lines.append(line)
            if line.startswith("000.png: "):
                proc.send_signal(signal.SIGINT)
                break
        lines += proc.stderr.readlines()
        assert proc.wait(timeout=120) == 130
    finally:
        proc.kill()
    said = [ln for ln in lines if ln.startswith("interrupted")]
    assert len(said) == 1 and said[0].startswith("interrupted: ") and "--skip-existing" in said[0]
