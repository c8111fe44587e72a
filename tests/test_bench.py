"""bench: latency statistics, the timing loop, and a tiny real bench run (baseline + backends + folded)."""
from __future__ import annotations

import json
import time
from argparse import Namespace

import pytest
import torch

from pipeline.bench.roofline import flops_per_output_pixel, measure_peak_gflops
from pipeline.bench.suite import QUICK
from pipeline.bench.timing import latency_stats, time_calls, time_interleaved
from pipeline.bench.variants import BASELINE
from pipeline.cli.bench import config_from_args
from pipeline.errors import PipelineError
from pipeline.native.cpu import bf16_problem


def test_latency_stats_known_values():
    s = latency_stats([5.0, 1.0, 3.0, 2.0, 4.0])
    assert s == {"n": 5, "mean": 3.0, "median": 3.0, "p90": pytest.approx(4.6), "p99": pytest.approx(4.96),
                 "min": 1.0, "max": 5.0}
    with pytest.raises(ValueError):
        latency_stats([])


def test_time_calls_counts_and_budget():
    calls = []
    t = time_calls(lambda: calls.append(1), warmup=2, iters=7, time_budget=10.0, min_iters=1)
    assert len(t["ms"]) == 7 and len(calls) == 9 and t["peak_rss_mb"] > 10
    # a tiny budget stops after min_iters
    t = time_calls(lambda: time.sleep(0.02), warmup=0, iters=100, time_budget=0.01, min_iters=3)
    assert len(t["ms"]) == 3 and min(t["ms"]) >= 19.0


def test_time_interleaved_round_robin_and_budget():
    order = []
    fns = [(n, (lambda n=n: order.append(n))) for n in ("a", "b", "c")]
    t = time_interleaved(fns, warmup=1, iters=4, time_budget=10.0, min_iters=1)
    assert order[:3] == ["a", "b", "c"] and order[3:] == ["a", "b", "c"] * 4  # warm-ups, then rounds
    assert all(len(t[n]["ms"]) == 4 and t[n]["peak_rss_mb"] > 10 for n in ("a", "b", "c"))
    slow = time_interleaved([("s", lambda: time.sleep(0.02))], warmup=0, iters=100, time_budget=0.01, min_iters=2)
    assert len(slow["s"]["ms"]) == 2


def test_flops_and_peak_are_sane():
    fpp = flops_per_output_pixel("srcnn-x3")
    assert fpp == pytest.approx(2 * (3 * 64 * 81 + 64 * 32 + 32 * 3 * 25), rel=0.01)
    assert flops_per_output_pixel("deform-srcnn") > fpp  # offsets conv + deformable GEMM on top
    # The measurement's shape, not the machine's speed (a loaded 2-core box can be arbitrarily slow): at least one
    # timed matmul (best stays 0 otherwise), a finite rate, and the method says what was measured.
    peak = measure_peak_gflops(threads=1, n=64, seconds=0.0)
    assert 0 < peak["gflops"] < float("inf")
    assert peak["method"] == "best of repeated torch.mm 64x64 fp32 for 0 s, 1 threads"


def test_config_rejects_bad_values():
    base = dict(quick=True, sizes=None, scales=None, batches=None, threads=None, iters=None, time_budget=None,
                no_folder=False, no_video=False, backends=None)
    with pytest.raises(PipelineError):
        config_from_args(Namespace(**{**base, "iters": 0}))
    with pytest.raises(PipelineError):
        config_from_args(Namespace(**{**base, "sizes": [4]}))
    cfg = config_from_args(Namespace(**{**base, "sizes": [32], "iters": 3}))
    assert cfg["sizes"] == (32,) and cfg["iters"] == 3 and cfg["batches"] == QUICK["batches"]


@pytest.fixture()
def random_weights(tmp_path):
    # Same seed -> same file -> the ONNX export is cached across runs (keyed by weights sha256).
    from models.registry import get_spec

    torch.manual_seed(0)
    path = tmp_path / "srcnn-x3.pt"
    torch.save(get_spec("srcnn-x3").build().state_dict(), path)
    return path


def test_tiny_bench_run_writes_consistent_report(tmp_path, random_weights, capsys):
    from pipeline import report
    from pipeline.cli import bench

    threads = [1 if torch.get_num_threads() != 1 else 2]
    args = Namespace(model="srcnn-x3", output=str(tmp_path / "out"), quick=True, sizes=[16], scales=None,
                     batches=[1, 2], threads=threads, iters=2, time_budget=0.01, no_folder=False, no_video=True,
                     backends=["torch", "ort", "ort-folded"], weights=str(random_weights))
    assert bench.run(args) == 0
    doc = json.loads((tmp_path / "out" / "report.json").read_text())
    # the console's one roofline share is the report's (the peaks are final only after every row: issue 51)
    said = [line for line in capsys.readouterr().out.splitlines() if "of roofline" in line]
    assert len(said) == 1 and said[0].startswith("auto (")
    assert f"{report.roofline_share(doc['auto'][0]['roofline_fraction'])} of roofline" in said[0]
    md = (tmp_path / "out" / "report.md").read_text()
    res = doc["results"]
    names = {r["backend"] for r in res if r["sweep"] == "main"}
    bf16 = set() if bf16_problem() else {"torch-bf16"}  # a CPU without bf16 arithmetic runs no torch bf16
    assert names == {BASELINE, "torch", "ort", "ort-folded"} | bf16  # lower precisions: the main point only
    assert {r["backend"] for r in res if r.get("precision") == "bf16"} == bf16
    # only the peaks this CPU has (a CPU without bf16 arithmetic or an int8 dot product gets none, said why)
    peaks = {p: pk["gflops"] for p, pk in doc["peaks"].items()}
    assert set(peaks) | set(doc["peaks_not_measured"]) == {"fp32", "bf16", "int8"} and not set(peaks) & set(
        doc["peaks_not_measured"])
    assert all(v > 0 for v in peaks.values()) and doc["peak"]["gflops"] == peaks["fp32"]
    for r in res:  # each row's roofline is held to its precision's measured peak, and none passes it
        if r["precision"] not in peaks:
            assert r["roofline_fraction"] is None and r["roofline_ms"] is None
            continue
        assert r["roofline_ms"] == pytest.approx(r["gflop"] / peaks[r["precision"]] * 1e3)
        assert 0 < r["roofline_fraction"] <= 1.0
    assert ("## Precisions: speed and measured quality" in md) == bool(bf16)
    has_bf16 = "bf16" in peaks
    assert ("bf16 peak (measured)" in md) == has_bf16 and ("bf16 peak: not measured" in md) != has_bf16
    assert "## Goals and noise" in md and isinstance(doc["goals"], list) and isinstance(doc["noise"], list)
    assert "srcnn-x3 --precision auto: not weighed (--backends limits the bench)" in doc["skipped"]
    for r in res:
        lat = r["latency_ms"]
        assert lat["min"] <= lat["median"] <= lat["p90"] <= lat["p99"] <= lat["max"]
        assert r["images_per_s"] == pytest.approx(r["batch"] / (lat["median"] / 1e3), rel=1e-9)
        if r["backend"] != BASELINE:
            assert r["speedup_vs_baseline"] == pytest.approx(r["baseline_median_ms"] / lat["median"])
    main = {r["backend"]: r for r in res if r["sweep"] == "main"}
    assert all(main[n]["max_abs_err"] < 1e-4 for n in ("ort", "ort-folded"))  # same inputs, checked outputs
    assert {r["sweep"] for r in res} >= {"main", "size", "batch", "threads"}
    # the folded model runs through the ort-folded backend in every sweep, the threads one included
    assert {r["sweep"] for r in res if r["backend"] == "ort-folded"} >= {"main", "batch", "threads"}
    assert doc["auto"] and doc["auto"][0]["backend"] in names
    assert doc["folder"] and doc["folder"][0]["folder_s"] > 0
    # the host side on the stand-in device, at full size even in --quick (issue 58)
    folder, video = doc["host_side"]
    assert (folder["kind"], video["kind"]) == ("folder", "video") and folder["backend"] == video["backend"]
    assert (folder["images"], folder["size"], video["input"], video["output"]) == (16, 512, [640, 360], [1920, 1080])
    for r in (folder, video):
        assert 0 < r["serial_cpu_ms_per_mpix"] < r["host_cpu_ms_per_mpix"]
    assert video["of_encoder"] > 0 and "## The host side on a stand-in device" in md
    # --quick leaves the stage's own cost out (too few, too small images to mean anything): listed as not run
    assert "stage_cost" not in doc and "## The sr stage's own cost" not in md
    assert any(s.startswith("the sr stage's own cost: --quick") for s in doc["skipped"])
    # a backend that runs a precision nowhere (torch int8) is no "Not run" of this machine
    assert not any("torch-int8" in s or "ort-folded-bf16" in s for s in doc["skipped"]), doc["skipped"]
    (check,) = doc["output_check"]  # every output's NaN/inf check, timed against the inference it checks
    assert check["check_ms"] > 0 and check["inference_ms"] > 0 and check["goal_pct"] == 2.0
    assert check["check_path"] == "host check (numpy)"  # a CPU backend: its own check (a device one times the device's)
    assert "## Every output checked for NaN / inf: the check's cost" in md
    (startup,) = doc["startup"]  # a fresh `python -m pipeline sr ... --onnx F` process, timed
    assert startup["model"] == "srcnn-x3" and 0 < startup["min_s"] <= startup["median_s"] <= startup["max_s"]
    assert "## Startup: time to first image" in md
    assert "## Method" in md and "warm-up" in md and "GFLOP/s" in md and "ideas" not in md.lower()
    for png in ("latency_vs_size.png", "speedup.png", "error.png"):
        assert (tmp_path / "out" / png).stat().st_size > 1000
    if not torch.cuda.is_available():  # the CUDA kernel section is listed under "Not run" with the reason
        assert doc["kernels"] is None
        assert any(s.startswith("kernel benchmarks") and "no CUDA device" in s for s in doc["skipped"])
        assert "## Not run" in md and "kernel benchmarks" in md


def test_kernel_section_report():
    from pipeline import report

    section = {"kernels": [{"op": "DeformConv2d", "vs": "torchvision.ops.deform_conv2d", "precision": "fp16",
                            "size": 512, "shape": "1x64x512x512", "ours_ms": 1.0, "torch_ms": 2.0, "ratio": 2.0,
                            "floor": "speed >= 1.5x torchvision", "meets_floor": True}],
               "models": [{"model": "srcnn", "precision": "fp16", "shape": "1x3x256x256 x3", "median_ms": None,
                           "error": "no half kernel"}]}
    md = "\n".join(report.kernel_markdown(section))
    assert "## Kernels on CUDA" in md and "| DeformConv2d |" in md and "no half kernel" in md
    assert report.kernel_markdown(None) == []


def _row(backend: str, precision: str, gflop: float, median_ms: float, sweep: str = "main") -> dict:
    return {"model": "srcnn-x3", "backend": backend, "precision": precision, "sweep": sweep, "size": 256,
            "gflop": gflop, "latency_ms": {"median": median_ms}}


def test_no_roofline_share_passes_100_percent():
    """Issue 42: a GEMM sampled while the machine was busy put ort-folded at 149 % and openvino bf16 (held to an
    emulated bf16 GEMM) at 150 %. A row's peak is never under the precisions before it, nor under any row's rate."""
    from pipeline.bench.results import apply_peak

    rows = [_row("ort", "fp32", 23.6, 500.0), _row("ort-folded", "fp32", 23.6, 150.0),  # 157 GFLOP/s > 100
            _row("openvino-bf16", "bf16", 23.6, 200.0), _row("openvino-int8", "int8", 23.6, 400.0)]
    doc = {"results": rows, "peaks": {p: {"method": "m"} for p in ("fp32", "bf16", "int8")},
           "auto": [{"model": "srcnn-x3", "backend": "ort-folded"}]}
    apply_peak(doc, {"fp32": 100.0, "bf16": 30.0, "int8": 90.0})
    assert all(0 < r["roofline_fraction"] <= 1.0 for r in rows)
    assert rows[1]["roofline_fraction"] == pytest.approx(1.0) and doc["auto"][0]["roofline_fraction"] <= 1.0
    assert doc["peaks"]["fp32"]["gflops"] == pytest.approx(23.6 / 0.150)
    assert doc["peaks"]["fp32"]["set_by"] == "srcnn-x3 ort-folded (main, 256^2)"
    assert doc["peaks"]["fp32"]["gemm_gflops"] == 100.0
    # bf16 and int8 are held to fp32's ceiling at least: openvino-bf16 ran at fp32 speed here
    assert doc["peaks"]["bf16"]["gflops"] == doc["peaks"]["int8"]["gflops"] == doc["peaks"]["fp32"]["gflops"]
    assert rows[2]["roofline_fraction"] == pytest.approx(150.0 / 200.0)


def test_a_row_at_the_peak_says_it_set_it():
    from pipeline.report import roofline_share

    assert roofline_share(0.684) == "68.4 %" and roofline_share(None) == "-"
    assert roofline_share(1.0) == "100 % (this row set the peak)"


def test_a_live_row_faster_than_the_peak_shows_100_percent():
    from pipeline.bench.results import result_row
    from pipeline.bench.variants import Variant

    r = result_row(model="m", sweep="main", variant=Variant("ort", None), size=16, scale=2.0, batch=1, threads=1,
                   timing={"ms": [1.0, 1.0, 1.0], "peak_rss_mb": 1.0, "peak_device_mb": None}, out_hw=(32, 32),
                   flops_px=40000.0, peak=0.001)
    assert r["roofline_fraction"] == 1.0


def test_segment_bench_rows_and_report():
    """The segment rows on a tiny clip (near-free model; keyframes 2 s apart): a segmented FFV1 run's overhead,
    H.264 sizes against one continuous encode (the default length runs a short clip whole: one segment, the same
    size but for x264's threads, whose output varies by up to ~1 % between identical runs)."""
    from pipeline.bench.folder import NEAR_FREE
    from pipeline.bench.segments_bench import segment_bench
    from pipeline.htmlreport import to_lines
    from pipeline.report.bench import segments_section

    r = segment_bench(NEAR_FREE, 3.0, size=(32, 18), backend="torch", log=lambda m: None, short_s=1.0)
    o = r["overhead"]
    assert r["frames"] == 72 and o["segments"] == 2 and 0 < o["share"] < 1 and o["join_s"] > 0
    h = r["h264"]
    assert h["continuous"]["segments"] == h["default"]["segments"] == 1 and h["1s"]["segments"] == 2
    assert h["default"]["bytes"] == pytest.approx(h["continuous"]["bytes"], rel=0.03) and h["1s"]["bytes"] > 0
    md = "\n".join(to_lines(segments_section(r)))
    assert "| FFV1, 1 s segments (2) |" in md and "| 1s | 2 |" in md and "| continuous | 1 |" in md


def test_encoder_preset_table_rows():
    """bench --encoders' table: one row per codec and preset, interleaved rounds, real encodes scored against the
    frames they were made from."""
    from pipeline.bench.encoders import preset_table

    rows = preset_table(64, 48, frames=3, rounds=2, threads=1, codecs=("h264",), presets=("ultrafast", "medium"),
                        log=lambda _m: None)
    assert [(r["codec"], r["preset"]) for r in rows] == [("h264", "ultrafast"), ("h264", "medium")]
    for r in rows:
        assert r["crf"] == 16 and r["size"] == [64, 48] and len(r["fps_samples"]) == 2 and r["fps"] > 0
        assert 30 < r["psnr_y_db"] < 99 and r["kbytes_per_frame"] > 0
