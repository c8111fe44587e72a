"""Issue 67's bench, docs-site and CLI polish: each finding as it was seen, checked on the CLI or the function that
printed it."""
from __future__ import annotations

import pytest

from tests.signals import default_sigint


def _cli(capsys, *argv) -> tuple[int, str, str]:
    from pipeline.cli import main

    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def _help(capsys, stage: str) -> str:
    from pipeline.cli import main

    with pytest.raises(SystemExit):
        main([stage, "--help"])
    return " ".join(capsys.readouterr().out.split())  # argparse's wrapping undone


def test_bare_command_prints_the_usage_and_exits_2(capsys):
    code, out, err = _cli(capsys)
    assert code == 2 and err.startswith("usage:") and "STAGE" in err and not out
    code, out, _err = _cli(capsys, "--help")  # asked for, the help is no error
    assert code == 0 and "--debug" in out


def test_a_short_flag_we_do_not_take_gets_the_long_one_it_meant(tmp_path, capsys):
    code, _out, err = _cli(capsys, "sr", tmp_path / "in", tmp_path / "out", "-q")
    assert code == 2 and err.strip().startswith("error: unrecognized arguments: -q (did you mean --quiet?)"), err
    code, _out, err = _cli(capsys, "sr", tmp_path / "in", tmp_path / "out", "-quiet")
    assert code == 2 and "(did you mean --quiet?)" in err
    code, _out, err = _cli(capsys, "sr", tmp_path / "in", tmp_path / "out", "-z")  # no long flag starts with z
    assert code == 2 and "did you mean" not in err


def test_help_says_the_defaults_and_debug(capsys):
    from models.spec import DEFAULT_MODEL, MODELS
    from pipeline.sr import TILE_MEMORY, TILE_MEMORY_ENV

    sr = _help(capsys, "sr")
    assert "from free memory" not in sr  # the budget the docs describe, from the constant the run uses
    assert f"fit a {TILE_MEMORY / 2**30:g} GiB budget ({TILE_MEMORY_ENV})" in sr
    assert f"(default: the model's own, x{MODELS[DEFAULT_MODEL].default_scale:g} for {DEFAULT_MODEL})" in sr
    assert "centre-cropped to at most this side (default: 384)" in _help(capsys, "demo")
    for stage in ("sr", "demo", "doctor", "bench"):
        assert "--debug print the traceback" in _help(capsys, stage), stage


def test_a_negative_kept_share_reads_as_a_loss():
    """Issue 67: "keeps 55 % of the model's PSNR-Y gain over bicubic and -71 % of its SSIM-Y gain"."""
    from pipeline.quality import kept_text

    text = kept_text({"psnr_y": 0.55, "ssim_y": -0.71})
    assert "-71" not in text and "keeps 55 % of the model's PSNR-Y gain over bicubic" in text
    assert "loses more than its whole SSIM-Y gain (71 % of it below bicubic)" in text
    assert kept_text({"psnr_y": 0.97, "ssim_y": 0.93}) == ("keeps 97 % of the model's PSNR-Y gain over bicubic and "
                                                           "93 % of its SSIM-Y gain")
    assert kept_text({"psnr_y": -0.2, "ssim_y": 0.5}).startswith("loses more than the model's whole PSNR-Y gain (20 %")


def test_the_auto_reason_is_short_lines():
    """Issue 67: `--precision auto`'s reason was one ~900-character line. Now a short first line (the pick), then
    one indented line per fact, which the sr console wraps."""
    from pipeline.backends.decide import why as auto_why
    from pipeline.sr.runner.console import WIDTH, Console

    note = ("int8 not used: int8 loses 0.239 dB Y-PSNR (SSIM 0.0202) against fp32 on the 4 held-out images, keeps 55 % "
            "of the model's PSNR-Y gain over bicubic and loses more than its whole SSIM-Y gain, fidelity to fp32 43.5 "
            "dB (worst image 38.4, floor 38), OVER its 0.1 dB budget and BELOW 90 % of the model's gain")
    pick = {"backend": "ort-folded", "precision": "fp32", "ms": 1936.0, "size": 256, "fp32_ms": 1936.0,
            "times": "ort-folded fp32 1936 ms", "notes": ["auto bf16: no backend can run srcnn (bf16)", note]}
    why = auto_why(pick, "")
    assert why.splitlines() == ["precision auto: ort-folded fp32 is the fastest within budget here (1936 ms at "
                                "256x256)", "  timed: ort-folded fp32 1936 ms",
                                "  auto bf16: no backend can run srcnn (bf16)", f"  {note}"]
    said: list[str] = []
    Console(log=said.append).always_lines(why)
    assert len(said) >= 6 and all(len(ln) <= WIDTH for ln in said) and all(ln.startswith("  ") for ln in said[1:])
    assert " ".join(ln.strip() for ln in said).count(note) == 1  # wrapped, not cut
    said.clear()
    Console(log=said.append).always_lines("a\nb", verbose_only=True)  # a --verbose line: not without it
    assert said == []


# -- bench: only the peaks it measured, its noise and every missed goal said ------------------------------------------

def test_bench_measures_only_the_peaks_this_cpu_has(monkeypatch):
    """Issue 67: on a CPU without bf16 or VNNI, `bench --quick` printed "fp32 87, bf16 1, int8 1 GFLOP/s" (torch's
    emulated GEMMs) and an int8 row at "100 % (this row set the peak)"."""
    from pipeline.bench import roofline, suite
    from pipeline.bench.results import apply_peak
    from pipeline.native import cpu
    from pipeline.report import roofline_share

    monkeypatch.setattr(cpu, "_cpu_flags", lambda: frozenset({"avx2", "fma"}))  # an AVX2-only EPYC
    monkeypatch.delenv(cpu.BF16_ENV, raising=False)
    measured = []
    monkeypatch.setattr(suite, "measure_peak_gflops", lambda seconds, precision: measured.append(precision) or {
        "gflops": 87.0, "precision": precision, "method": "m"})
    peaks = suite._measure_peaks()
    assert measured == ["fp32"] and set(peaks) == {"fp32"}
    unmeasured = {p: roofline.peak_problem(p) for p in ("bf16", "int8")}
    line = suite._peaks_line(peaks, unmeasured)
    assert line.startswith("fp32 87 GFLOP/s; no bf16 peak: this CPU has no bf16 arithmetic") and "int8 1" not in line
    assert "no int8 peak: this CPU has no int8 dot-product instruction" in line
    rows = [{"model": "m", "backend": "ort-folded", "precision": "fp32", "sweep": "main", "size": 128, "gflop": 1.0,
             "latency_ms": {"median": 20.0}},
            {"model": "m", "backend": "openvino-int8", "precision": "int8", "sweep": "main", "size": 128, "gflop": 1.0,
             "latency_ms": {"median": 5.0}}]  # 200 GOP/s: would have set an int8 "peak" over fp32's GEMM
    doc = {"results": rows, "peaks": peaks, "auto": []}
    apply_peak(doc, {"fp32": 87.0})
    assert rows[0]["roofline_fraction"] == pytest.approx(50.0 / 87.0) and doc["peaks"]["fp32"]["gflops"] == 87.0
    assert rows[1]["roofline_fraction"] is None and roofline_share(rows[1]["roofline_fraction"]) == "-"
    monkeypatch.setattr(cpu, "_cpu_flags", lambda: frozenset({"avx512_vnni", "amx_bf16"}))
    assert roofline.peak_problem("int8") is None and roofline.peak_problem("bf16") is None


def test_bench_flags_noise_and_every_missed_goal():
    """Issue 67: one configuration at 24.3 and 42.6 ms in one run with no warning, and "process 9.9 ms (goal <= 8)"
    printed unflagged."""
    from pipeline.bench import host_side, verdicts

    assert verdicts.noise_mark([24.3, 42.6]) == "; NOISY: repeats 24.3-42.6 ms (1.75x apart, over 1.5x)"
    assert verdicts.noise_mark([24.3, 26.0]) == "" and verdicts.noise_mark([24.3]) == ""
    folder = {"kind": "folder", "serial_cpu_ms_per_mpix": 0.3, "host_cpu_ms_per_mpix": 9.9,
              "runs_host_cpu_s": [2.0, 2.1], "goals": host_side.GOALS["folder"]}
    assert host_side._mark(folder, "host_cpu_ms_per_mpix") == "goal <= 8: MISSED"
    assert host_side._mark(folder, "serial_cpu_ms_per_mpix") == "goal <= 0.4"
    video = {"kind": "video", "serial_cpu_ms_per_mpix": 0.5, "of_encoder": 0.71, "runs_host_cpu_s": [1.0, 1.0],
             "goals": host_side.GOALS["video"]}
    assert host_side._mark(video, "of_encoder") == "goal >= 85 %: MISSED"
    row = {"model": "srcnn-x3", "sweep": "main", "size": 128, "scale": 3.0, "batch": 1, "backend": "ort",
           "latencies_ms": [24.3, 42.6, 30.0]}
    doc = {"results": [row], "host_side": [folder, video],
           "output_check": [{"model": "srcnn-x3", "backend": "ort", "check_pct": 1.0, "goal_pct": 2.0,
                             "meets_goal": True}]}
    lines = verdicts.closing_lines(doc)
    assert lines[0] == "goals: 2 MISSED of 5"
    assert "  MISSED host side, folder (stand-in device): process, ms CPU per output MPix: 9.90 (goal <= 8)" in lines
    assert "  MISSED host side, video (stand-in device): of the encoder alone: 71 % (goal >= 85 %)" in lines
    assert lines.index("noise: 1 row(s) whose repeats differ by more than 1.5x (their medians may be off by tens of "
                       "percent)") > 2
    assert lines[-1] == "  srcnn-x3 main 128^2 x3 b1 ort: repeats 24.3-42.6 ms (1.75x apart, over 1.5x)"
    md = "\n".join(_goals_markdown(doc))
    assert "## Goals and noise" in md and "| MISSED | host side, folder" in md and "NOISY: repeats 24.3-42.6" in md


def _goals_markdown(doc: dict) -> list[str]:
    """The goals section of a bench report made from `doc` (its goals and noise as the bench stores them)."""
    from pipeline.bench import verdicts
    from pipeline.htmlreport import to_markdown
    from pipeline.report.bench import goals_section

    doc = {**doc, "goals": verdicts.goals(doc), "noise": verdicts.noisy(doc)}
    return to_markdown(goals_section(doc)).splitlines()


# -- a video stopped with Ctrl-C, then resumed -----------------------------------------------------------------------

def test_ctrl_c_on_a_video_says_the_segments_kept_and_the_resumed_rate_counts_its_own_frames(tmp_path):
    """Issue 67: after Ctrl-C, "0 file(s) written, 1 not done" hid the 2 segments kept, and the resumed run's
    frames/s counted the frames it took from them."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from tests.test_sr_resume import NET, _clip, _net_env

    env = _net_env(tmp_path, 38)  # Ctrl-C mid-way through the third of 8 segments of 15 frames
    net = tmp_path / "killing_net.py"
    net.write_text(net.read_text().replace("signal.SIGKILL", "signal.SIGINT").replace("time.sleep(5)", "pass"))
    clip, out = _clip(tmp_path), tmp_path / "out" / "c.mkv"
    args = [sys.executable, "-m", "pipeline", "sr", clip, out, *NET, "--segment-seconds", "0.5"]

    def run(*more):
        p = subprocess.run([*map(str, args), *map(str, more)], cwd=Path(__file__).resolve().parents[1],
                           env={**os.environ, "OMP_NUM_THREADS": "1", **env}, capture_output=True, text=True,
                           timeout=300, preexec_fn=default_sigint)
        return p.returncode, p.stderr

    rc, err = run()
    assert rc == 130 and (tmp_path / "killed").exists(), err[-2000:]
    said = [ln for ln in err.splitlines() if ln.startswith("interrupted: ")]
    assert said == ["interrupted: 0 file(s) written (complete), 1 not done, 2 finished segments of it kept; to "
                    "finish, run the same command again with --skip-existing (it takes the kept segments)"], err
    rc, err = run("--skip-existing", "--summary", tmp_path / "again.json")
    assert rc == 0 and "taking 2 segment(s) a killed earlier run finished" in err, err[-2000:]
    s = json.loads((tmp_path / "again.json").read_text())
    [video] = [r["video"] for r in s["images"]]
    assert video["frames"] == 120 and video["frames_reused"] == 30
    assert video["fps"] * video["time_per_frame_s"] == pytest.approx(1.0, rel=0.01)
    assert s["images_per_s"] * s["process_s"] == pytest.approx(90, rel=0.02)  # the 90 frames it upscaled
