"""The GPU scoreboard's document and table (pipeline.bench.scoreboard), on the CPU: every part written as it
finishes (atomically: the file is valid JSON after each), a section that cannot run or fails says so and the rest
still run, the goals decided from the numbers; and the whole command on a machine without a GPU."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from pipeline.bench.scoreboard import Scoreboard, Skip, goals, table, video_share

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
import gpu_scoreboard as command  # noqa: E402

ROWS = [{"model": "srcnn-x3", "precision": "fp16", "size": 512, "net_ms": 3.5, "net_tflops": 26.9,
         "infer_pixels_ms": 5.6, "check_ms": 0.06, "check_pct": 1.7, "folder_share": 0.54},
        {"model": "srcnn-x3", "precision": "fp32", "size": 512, "net_ms": 7.0, "net_tflops": 13.4,
         "infer_pixels_ms": 9.1, "check_ms": 0.2, "check_pct": 2.9, "folder_share": 0.86},
        {"model": "deform-srcnn", "precision": "bf16", "size": 512, "error": "torchvision is not installed"}]


def test_each_part_is_written_as_it_finishes_and_a_failure_keeps_what_ran(tmp_path):
    board = Scoreboard(tmp_path / "gpu-check" / "scoreboard.json")
    seen = []

    def models():
        for i in range(len(ROWS)):
            yield {"rows": ROWS[: i + 1]}
            seen.append(json.loads(board.path.read_text())["sections"]["models"]["rows"])  # on disk already
        raise RuntimeError("CUDA error: an illegal memory access was encountered\nmore")

    def no_gpu():
        raise Skip("no CUDA GPU visible")
        yield {}

    board.run("models", models, log=lambda _m: None)
    board.run("video", no_gpu, log=lambda _m: None)
    harness = {"copies": 4, "fail_lines": 0, "exit_codes": [0, 0, 0, 0]}
    board.run("harness", lambda: iter([harness]), log=lambda _m: None)
    assert [len(rows) for rows in seen] == [1, 2, 3]
    doc = json.loads(board.path.read_text())
    assert doc["sections"]["models"]["rows"] == ROWS  # the numbers before the failure stay
    assert doc["sections"]["models"]["error"] == "RuntimeError: CUDA error: an illegal memory access was encountered"
    assert doc["sections"]["video"] == {"skipped": "no CUDA GPU visible"}
    assert [p.name for p in board.path.parent.iterdir()] == ["scoreboard.json"]  # no temp file left
    met = {g["what"]: g["met"] for g in doc["goals"]}
    assert met == {"folder run, srcnn-x3 fp16": False, "output check, srcnn-x3 fp16 (% of the net)": True,
                   "folder run, srcnn-x3 fp32": True, "output check, srcnn-x3 fp32 (% of the net)": False,
                   "plugin harness x4 at once, FAIL lines": True}


def test_goals_at_their_edges():
    def doc(**sections):
        return {"sections": sections, "goals": []}

    rows = [{"model": "m", "precision": p, "folder_share": s, "check_pct": c}
            for p, s, c in (("fp32", 0.85, 2.0), ("fp16", 0.849, 2.01))]
    assert [g["met"] for g in goals(doc(models={"rows": rows}))] == [True, True, False, False]
    # video: against the slower of inference alone (50.5 fps) and the encoder alone (33.7)
    v = {"fps": 17.5, "inference_fps": 50.5, "encode_fps": 33.7}
    assert video_share(v) == pytest.approx(17.5 / 33.7) and not goals(doc(video=v))[0]["met"]
    assert goals(doc(video=v | {"fps": 0.85 * 33.7}))[0]["met"]
    assert video_share({"fps": 20.0, "inference_fps": 50.5, "encode_fps": None}) == pytest.approx(20 / 50.5)
    assert video_share({"skipped": "no GPU"}) is None and goals(doc(video={"skipped": "no GPU"})) == []
    # the harness: a FAIL line, or a copy that did not exit 0, misses
    h = {"copies": 4, "fail_lines": 0, "exit_codes": [0, 0, 1, 0]}
    assert not goals(doc(harness=h))[0]["met"] and not goals(doc(harness=h | {"fail_lines": 2}))[0]["met"]


def test_table_shows_the_numbers_the_reasons_and_each_goal():
    d = {"sections": {"machine": {"gpu": "NVIDIA H200", "driver": "580.65.06", "torch": "2.11.0", "torch_cuda": "13.0"},
                      "gemm": {"tflops": {"fp16": 752.3, "bf16": 741.0}, "shape": "8192^3"},
                      "models": {"rows": ROWS}, "video": {"skipped": "no PyAV"},
                      "deform": {"rows": [{"precision": "fp16", "size": 512, "fused_ms": 0.31, "im2col_ms": 0.52,
                                           "torchvision_ms": 0.6, "fused_speedup": 1.94, "im2col_speedup": 1.15}]},
                      "harness": {"error": "TimeoutExpired: timed out"}}, "goals": []}
    d["goals"] = goals(d)
    text = table(d)
    assert "NVIDIA H200, driver 580.65.06, torch 2.11.0 (CUDA 13.0)" in text
    assert "fp16 752.3 TFLOP/s, bf16 741.0 TFLOP/s" in text
    assert "video: skipped: no PyAV" in text and "plugin harness: error: TimeoutExpired" in text
    srcnn = next(line for line in text.splitlines() if line.split()[:2] == ["srcnn-x3", "fp16"])
    assert srcnn.split()[2:8] == ["3.50", "26.90", "5.60", "54.00", "0.06", "1.70"]
    assert "torchvision is not installed" in text and "1.94" in text
    assert "MISSED folder run, srcnn-x3 fp16: 0.54 (goal >= 0.85)" in text
    assert "met    output check, srcnn-x3 fp16 (% of the net): 1.70 (goal <= 2)" in text
    # a call cut short: only what ran is shown
    short = {"sections": {"harness": {"copies": 4, "fail_lines": 1, "exit_codes": [1, 0, 0, 0]}}, "goals": []}
    assert table(short).splitlines()[1:] == ["plugin harness x4 at once: 1 FAIL lines, exit codes [1, 0, 0, 0], - s",
                                             "goals: none measured"]


def test_without_a_gpu_every_section_says_why(tmp_path, capsys):
    from pipeline.native.cuda_driver import gpu_visible

    if gpu_visible()[0]:
        pytest.skip("a GPU is here: `make gpu-check` scores it")
    assert command.main(["--output", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "scoreboard.json").read_text())
    assert list(doc["sections"]) == ["machine", "gemm", "models", "video", "deform", "harness"]
    assert all(set(part) == {"skipped"} and part["skipped"] for part in doc["sections"].values())
    out = capsys.readouterr().out
    assert "GPU scoreboard" in out and "models: skipped: " in out and "goals: none measured" in out
    assert command.main(["--output", str(tmp_path), "--show"]) == 0  # the table again, from the file
    assert capsys.readouterr().out.splitlines() == out[out.index("GPU scoreboard"):].splitlines()[:-1]
    assert command.main(["--output", str(tmp_path / "none"), "--show"]) == 2
