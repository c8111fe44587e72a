"""report: structure and internal consistency of the compare and bench reports (JSON <-> Markdown)."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from pipeline import report
from pipeline.analysis.compare import error_stats, verdict
from pipeline.bench.results import result_row
from pipeline.bench.timing import time_calls
from pipeline.bench.variants import BASELINE, Variant


def _close(md_cell: str, value) -> bool:
    if value is None:
        return md_cell == "-"
    if isinstance(value, str):
        return md_cell == value
    if isinstance(value, bool):
        return md_cell == ("yes" if value else "no")
    v = float(md_cell)
    return (math.isinf(v) and math.isinf(value)) or v == pytest.approx(value, rel=2e-3, abs=1e-12)


def _bench_doc():
    rng = np.random.default_rng(0)
    results = []
    base = Variant(BASELINE, None, "loop")
    fast = Variant("ort", None, "ORT")
    for size in (16, 32):
        for batch in (1, 2):
            tb = {"ms": list(rng.uniform(20, 30, 7) * batch), "peak_rss_mb": 100.0, "peak_device_mb": None}
            b = result_row(model="m", sweep="size", variant=base, size=size, scale=3.0, batch=batch, threads=None,
                           timing=tb, out_hw=(3 * size, 3 * size), flops_px=40000.0, peak=50.0)
            b["speedup_vs_baseline"] = 1.0
            results.append(b)
            tf = {"ms": list(rng.uniform(5, 9, 7) * batch), "peak_rss_mb": 120.0, "peak_device_mb": None}
            results.append(result_row(model="m", sweep="main" if size == 16 and batch == 1 else "size", variant=fast,
                                      size=size, scale=3.0, batch=batch, threads=2, timing=tf,
                                      out_hw=(3 * size, 3 * size), flops_px=40000.0, peak=50.0,
                                      baseline_ms=b["latency_ms"]["median"], err=1e-7))
    return {"kind": "bench", "environment": report.environment(), "peak": {"gflops": 50.0, "method": "test"},
            "method": {"warmup": 1, "iters": 7, "time_budget_s": 1.0, "min_iters": 2, "sync": "cpu",
                       "baseline": "loop"},
            "flops": {"m": {"shape": "256x256 -> 768x768", "gflop_256": 23.6, "macs_per_output_pixel": 20000}},
            "results": results, "auto": [], "folder": [], "skipped": ["m trt: no GPU"]}


def test_bench_report_consistent(tmp_path):
    doc = _bench_doc()
    paths = report.write_bench(doc, tmp_path)
    js = json.loads(paths["json"].read_text())
    md = paths["md"].read_text()
    rows = report.parse_table(md, "model", has="median ms")
    assert len(rows) == len(js["results"]) == 8
    for row, r in zip(rows, js["results"], strict=True):
        lat = r["latency_ms"]
        assert lat["min"] <= lat["median"] <= lat["p90"] <= lat["p99"] <= lat["max"]
        assert lat["n"] == len(r["latencies_ms"]) == 7
        assert lat["median"] == pytest.approx(float(np.median(r["latencies_ms"])), rel=1e-3)
        assert r["images_per_s"] == pytest.approx(r["batch"] * 1e3 / lat["median"])
        assert r["mpix_per_s"] == pytest.approx(r["batch"] * r["out_h"] * r["out_w"] / (lat["median"] / 1e3) / 1e6)
        assert r["roofline_fraction"] == pytest.approx(r["roofline_ms"] / lat["median"])
        for col, key in (("median ms", lat["median"]), ("p99 ms", lat["p99"]), ("images/s", r["images_per_s"]),
                         ("MPix/s", r["mpix_per_s"]),
                         ("backend", r["backend"]), ("batch", str(r["batch"]))):
            assert _close(row[col], key), (col, row[col], key)
        assert row["roofline"] == report.roofline_share(r["roofline_fraction"])  # a percentage a person reads
        assert row["speed-up"] == report.speedup(r["speedup_vs_baseline"])  # the ratio and the change in speed
    assert "## Environment" in md and "CPU:" in md and "torch" in md and "onnxruntime" in md
    assert "m trt: no GPU" in md
    for name in doc["plots"]:
        assert (tmp_path / f"{name}.png").is_file() and f"({name}.png)" in md


def test_compare_report_consistent(tmp_path):
    ref = np.zeros((1, 3, 8, 8), np.float32) + 0.5
    rows = []
    for backend, prec, err in (("ort", "fp32", 1e-6), ("bad", "fp32", 1e-2), ("ort", "fp16", 1e-3)):
        s = error_stats(ref + err, ref)
        ok, crit = verdict(s, prec)
        rows.append({"backend": backend, "precision": prec, "scale": 3.0, "status": "pass" if ok else "fail",
                     "criterion": crit, **s})
    rows.append({"backend": "trt", "precision": "fp32", "scale": 3.0, "status": "unavailable", "reason": "no GPU"})
    doc = {"kind": "compare", "environment": report.environment(),
           "models": [{"model": "m", "input_size": 8, "images": ["a"], "scales": [3.0], "reference": "torch",
                       "tolerances": {"fp32_max_abs": 1e-4, "fp16_psnr_db": 50.0, "rel_floor": 1e-3}, "rows": rows}]}
    paths = report.write_compare(doc, tmp_path)
    js = json.loads(paths["json"].read_text())
    md = paths["md"].read_text()
    table = report.parse_table(md, "model")
    ran = [r for r in js["models"][0]["rows"] if r["status"] in ("pass", "fail")]
    assert [t["status"] for t in table] == ["PASS", "FAIL", "PASS"]
    for t, r in zip(table, ran, strict=True):
        assert _close(t["max abs"], r["max_abs"]) and _close(t["PSNR dB"], float(r["psnr_db"]))
    assert "trt" in md and "no GPU" in md and paths["error_png"].stat().st_size > 1000


def test_json_has_no_bare_infinities(tmp_path):
    doc = {"kind": "compare", "environment": {}, "models": [{"model": "m", "input_size": 8, "images": [], "scales": [],
           "reference": "", "tolerances": {"fp32_max_abs": 1e-4, "fp16_psnr_db": 50, "rel_floor": 1e-3},
           "rows": [{"backend": "t", "precision": "fp32", "scale": 3.0, "status": "pass", "criterion": "",
                     **error_stats(np.ones(4), np.ones(4))}]}]}
    paths = report.write_compare(doc, tmp_path)
    text = paths["json"].read_text()
    assert "Infinity" not in text and json.loads(text)["models"][0]["rows"][0]["psnr_db"] == "inf"


def test_time_calls_feeds_result_row():
    t = time_calls(lambda: None, warmup=0, iters=3, time_budget=1.0, min_iters=1)
    r = result_row(model="m", sweep="main", variant=Variant("x", None), size=8, scale=2.0, batch=1, threads=None,
                   timing=t, out_hw=(16, 16), flops_px=1.0, peak=1.0)
    assert r["out_h"] == r["out_w"] == 16 and r["latency_ms"]["n"] == 3 and r["speedup_vs_baseline"] is None


def test_cpu_name_is_read_once_for_reports_and_the_auto_key(monkeypatch):
    """One probe (pipeline.native.cpu): the bench/compare environment and `auto`'s measurement key name the same CPU,
    and /proc/cpuinfo is read once per process, not by each."""
    import builtins

    from pipeline.native.cpu import cpu_name
    from pipeline.native.machine import fingerprint as machine_fingerprint

    opened = []
    real_open = builtins.open

    def counting_open(file, *args, **kwargs):
        if str(file) == "/proc/cpuinfo":
            opened.append(file)
        return real_open(file, *args, **kwargs)

    cpu_name.cache_clear()
    monkeypatch.setattr(builtins, "open", counting_open)
    env = report.environment()
    assert json.loads(machine_fingerprint())["cpu"] == env["cpu"] == cpu_name()
    assert len(opened) <= 1


def test_machine_facts_open_every_bench_report():
    from pipeline.bench import onnx_file

    env = {"cpu": "Test CPU", "gpu": None}
    startup = {"size": 64, "scale": 3.0, "median_s": 0.5, "runs": 1, "walls_s": [0.5]}
    md = onnx_file.markdown({"model": "m", "onnx": "m.onnx", "precision": "fp32", "environment": env, "rows": [],
                             "startup": startup, "skipped": []})
    assert md.index("- CPU: Test CPU") < md.index("| sweep |")  # before the first number


def test_bench_report_wording_says_what_each_number_is(tmp_path):
    """Issue 42 item 7: the FLOPs table's columns hold what they say, no 'medians of 1', the fastest runs' share is
    named for what it is (it can be lower than the share of the medians), floors cite no issue numbers."""
    import re

    doc = _bench_doc()
    doc["folder"] = [{"model": "m", "backend": "ort", "images": 4, "size": 64, "folder_ms_per_image": 10.0,
                      "inference_ms_per_image": 9.0, "ratio": 0.9, "ratio_best": 0.8}]
    doc["stage_cost"] = {"images": 4, "size": 64, "model": "nearest", "backend": "ort", "repeats": 1,
                         "stage_cpu_ms_per_mpix": 5.0, "stage_wall_ms_per_mpix": 4.0, "folder_cpu_ms_per_mpix": 9.0,
                         "folder_wall_ms_per_mpix": 8.0, "cores_busy": 1.5, "usable_cores": 2, "workers": 2}
    doc["precision_auto"] = [{"model": "m", "label": "ort int8", "median_ms": 2.0, "baseline_ms": 30.0,
                              "speedup": 15.0, "floor": 12.0, "meets_floor": True, "reason": "fastest within budget"}]
    doc["video"] = [{"model": "m", "backend": "ort", "precision": "int8", "size": "720p", "input": [1280, 720],
                     "output": [3840, 2160], "scale": 3.0, "frames": 4, "fps": 2.0, "inference_fps": 3.0,
                     "vs_fp32": 2.5, "floor": 2.0}]
    md = report.write_bench(doc, tmp_path)["md"].read_text()
    (flops,) = report.parse_table(md, "model", has="MACs per output pixel")
    assert flops["input -> output (default scale)"] == "256x256 -> 768x768" and flops["GFLOP per call"] == "23.6"
    assert "FLOPs per 256x256" not in md
    assert "medians of 1 " not in md and "one alternating run" in md
    (folder,) = report.parse_table(md, "model", has="share % of the fastest runs")
    assert folder["share %"] == "90" and folder["share % of the fastest runs"] == "80" and "best share" not in md
    (video,) = report.parse_table(md, "model", has="vs fp32")
    assert video["floor"] == report.speedup(2.0) and video["vs fp32"] == report.speedup(2.5)
    assert not re.search(r"issue[ -]?\d", md), re.findall(r".{40}issue[ -]?\d.{10}", md)
    assert report.runs_phrase(1) == "one run"
    assert report.runs_phrase(3, "alternating ") == "medians of 3 alternating runs"
