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


def test_tiny_bench_run_writes_consistent_report(tmp_path, random_weights):
    from pipeline.cli import bench

    threads = [1 if torch.get_num_threads() != 1 else 2]
    args = Namespace(model="srcnn-x3", output=str(tmp_path / "out"), quick=True, sizes=[16], scales=None,
                     batches=[1, 2], threads=threads, iters=2, time_budget=0.01, no_folder=False, no_video=True,
                     backends=["torch", "ort", "ort-folded"], weights=str(random_weights))
    assert bench.run(args) == 0
    doc = json.loads((tmp_path / "out" / "report.json").read_text())
    md = (tmp_path / "out" / "report.md").read_text()
    res = doc["results"]
    names = {r["backend"] for r in res if r["sweep"] == "main"}
    # lower precisions: the main point only; torch bf16 only on a CPU with bf16 arithmetic (else said why)
    bf16 = {"torch-bf16"} if bf16_problem() is None else set()
    assert names == {BASELINE, "torch", "ort", "ort-folded"} | bf16
    assert {r["backend"] for r in res if r.get("precision") == "bf16"} == bf16
    if not bf16:
        assert any("bf16" in line for line in doc["skipped"]), doc["skipped"]
    peaks = {p: doc["peaks"][p]["gflops"] for p in ("fp32", "bf16", "int8")}
    assert all(v > 0 for v in peaks.values()) and doc["peak"]["gflops"] == peaks["fp32"]
    for r in res:  # each row's roofline is held to its precision's measured peak
        assert r["roofline_ms"] == pytest.approx(r["gflop"] / peaks[r["precision"]] * 1e3)
    if bf16:  # the precisions section holds the lower-precision rows: none on a CPU without bf16
        assert "## Precisions: speed and measured quality" in md and "bf16 peak (measured)" in md
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
    assert doc["stage_cost"]["stage_cpu_ms_per_mpix"] is not None and "## The sr stage's own cost" in md
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
