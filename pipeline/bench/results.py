"""Assembling the bench document: one result row per timed variant, the `auto` floor row, the method and
FLOPs sections, and the roofline numbers recomputed from the machine's peak."""
from __future__ import annotations

from pipeline import quality
from pipeline.bench.roofline import PEAK_PRECISIONS, achieved_gflops, peak_precision
from pipeline.bench.timing import latency_stats
from pipeline.bench.variants import BASELINE, Variant, variant_label

FLOOR_SPEEDUP = 1.8  # issue 7: auto must be >= 1.8x the torch-eager loop for SRCNN x3 at 256^2 on this CPU
# issue 28 (floors on a 2-core AMX Xeon): `--precision auto` against the eager loop at 256^2, and its video fps
# at 720p against the fp32 run's
PRECISION_FLOORS = {"srcnn-x3": 12.0, "deform-srcnn": 8.0}
VIDEO_FLOOR = 2.0
VIDEO_OF_INFERENCE = 0.75  # issue 65: a video at `--precision auto` >= 75 % of its pure inference's fps


def result_row(*, model: str, sweep: str, variant: Variant, size: int, scale: float, batch: int, threads,
               timing: dict, out_hw: tuple[int, int], flops_px: float, peak: float, baseline_ms=None,
               err=None) -> dict:
    """Latency statistics, throughput, roofline and speed-up of one variant at one configuration. A row faster
    than `peak` raises it to its own rate (100 %), as apply_peak does for the whole document."""
    oh, ow = out_hw
    lat = latency_stats(timing["ms"])
    med_s = lat["median"] / 1e3
    flops = flops_px * oh * ow * batch
    peak = max(peak, flops / med_s / 1e9)
    return {"model": model, "sweep": sweep, "backend": variant.name, "describe": variant.describe, "size": size,
            "scale": scale, "batch": batch, "threads": threads, "out_h": oh, "out_w": ow, "latency_ms": lat,
            "latencies_ms": [round(v, 4) for v in timing["ms"]],
            "images_per_s": batch / med_s, "mpix_per_s": batch * oh * ow / med_s / 1e6,
            "gflop": flops / 1e9, "roofline_ms": flops / (peak * 1e9) * 1e3,
            "roofline_fraction": min(1.0, flops / (peak * 1e9) / med_s), "peak_rss_mb": timing["peak_rss_mb"],
            "peak_device_mb": timing["peak_device_mb"], "baseline_median_ms": baseline_ms,
            "speedup_vs_baseline": (baseline_ms / lat["median"]) if baseline_ms else None, "max_abs_err": err,
            "precision": variant.precision, "quality": quality.summary(variant.quality),
            "fidelity": (quality.summary(variant.quality) or {}).get("fidelity")}


def precision_auto_row(model: str, results: list[dict], pick, why: str) -> dict:
    """What `--precision auto` runs for `model` (the loaded backend `pick`, the line `why`), timed in the main
    point's rows, against the baseline and its floor."""
    main = {r["backend"]: r for r in results if r["sweep"] == "main"}
    label = variant_label(pick.name, pick.precision)
    r = main.get(label)
    floor = PRECISION_FLOORS.get(model)
    speed = r["speedup_vs_baseline"] if r else None
    return {"model": model, "backend": pick.name, "precision": pick.precision, "label": label, "reason": why,
            "median_ms": r["latency_ms"]["median"] if r else None,
            "baseline_ms": r["baseline_median_ms"] if r else None, "speedup": speed, "floor": floor,
            "meets_floor": None if floor is None or speed is None else speed >= floor,
            "quality": r["quality"] if r else None}


def auto_row(model: str, results: list[dict], size: int, scale: float, pick) -> dict:
    """What `auto` picks for `model` against the baseline at the main point, and whether it meets the floor.
    `pick` is a pipeline.backends.AutoPick."""
    main = {r["backend"]: r for r in results if r["sweep"] == "main"}
    row = {"model": model, "backend": pick.name, "reason": pick.reason, "size": size, "scale": scale,
           "median_ms": None, "baseline_ms": main[BASELINE]["latency_ms"]["median"] if BASELINE in main else None,
           "speedup": None, "floor": FLOOR_SPEEDUP, "meets_floor": None, "roofline_fraction": None}
    r = main.get(pick.name)
    if r is not None:  # auto's pick was timed (not excluded by --backends)
        row.update(median_ms=r["latency_ms"]["median"], baseline_ms=r["baseline_median_ms"],
                   speedup=r["speedup_vs_baseline"], meets_floor=r["speedup_vs_baseline"] >= FLOOR_SPEEDUP,
                   roofline_fraction=r["roofline_fraction"])
    return row


def flops_entry(flops_px: float, default_scale: float) -> dict:
    out = round(256 * default_scale)
    return {"flops_per_output_pixel": flops_px, "macs_per_output_pixel": round(flops_px / 2),
            "shape": f"256x256 -> {out}x{out}", "gflop_256": flops_px * out**2 / 1e9}


def method(cfg: dict, cuda: bool) -> dict:
    return {"warmup": cfg["warmup"], "iters": cfg["iters"], "time_budget_s": cfg["time_budget"],
            "min_iters": cfg["min_iters"], "quick": bool(cfg.get("quick", False)),
            "sync": "torch.cuda.synchronize() before and after each call" if cuda else
                    "CPU calls are synchronous (outputs copied back to numpy inside the call)",
            "baseline": f"{BASELINE}: the tutorial's plain loop, PyTorch eager, one image at a time",
            "config": {k: list(v) if isinstance(v, tuple) else v for k, v in cfg.items()}}


def apply_peak(doc: dict, gemm: dict[str, float]) -> None:
    """Set each precision's peak and recompute every roofline number from its row's, so that no share can pass
    100 %: the peak is the best of the measured GEMMs of that precision and those before it (held_peaks) and of
    the rate any row held to it reached. A GEMM sampled while the machine was busier than during a row's timing
    would otherwise put the row over its peak; `set_by` says which row set a peak, if one did."""
    best, by = 0.0, "GEMM"
    for p in PEAK_PRECISIONS:  # fp32, then bf16 and int8, each at least the one before
        if p not in doc["peaks"]:  # not measured here (no such instruction): its rows get no share, set no peak
            continue
        if gemm.get(p, 0.0) > best:
            best, by = gemm[p], "GEMM"
        for r in doc["results"]:
            if peak_precision(r.get("precision")) == p and achieved_gflops(r) > best:
                best, by = achieved_gflops(r), f"{r['model']} {r['backend']} ({r['sweep']}, {r['size']}^2)"
        doc["peaks"][p].update(gflops=best, gemm_gflops=gemm.get(p), set_by=by)
    for r in doc["results"]:
        peak = doc["peaks"].get(peak_precision(r.get("precision")))
        r["roofline_ms"] = None if peak is None else r["gflop"] / peak["gflops"] * 1e3
        r["roofline_fraction"] = None if peak is None else \
            min(1.0, r["roofline_ms"] / r["latency_ms"]["median"])  # 1.0: float rounding
    main = {(r["model"], r["backend"]): r for r in doc["results"] if r["sweep"] == "main"}
    for a in doc.get("auto", []):
        r = main.get((a["model"], a["backend"]))
        if r is not None:
            a["roofline_fraction"] = r["roofline_fraction"]
            a["roofline_ms"] = r["roofline_ms"]
