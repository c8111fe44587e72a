"""`bench --onnx FILE`: benchmark an exported file without PyTorch.

Every backend that runs the file, timed round-robin (pipeline.bench.timing) at the main point and over the size
(and, for run-time-factor models, scale) sweep, plus the time to first image in a fresh process
(pipeline.bench.startup). The full bench's baseline loop, FLOPs/roofline and threads sweep need the PyTorch
model, so they are not part of this report; it says so.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from pipeline import backends as B
from pipeline import report
from pipeline.analysis.candidates import candidate_statuses
from pipeline.artifacts.atomic import atomic_write
from pipeline.artifacts.identity import resolve
from pipeline.artifacts.onnx_file import onnx_metadata
from pipeline.bench.startup import time_to_first_image
from pipeline.bench.timing import latency_stats, time_interleaved
from pipeline.errors import PipelineError
from pipeline.htmlreport import Code, Heading, Strong, para, plot_figure, to_markdown, write_report

NOT_RUN = "baseline loop, FLOPs/roofline and threads sweep: they need the PyTorch model (run bench without --onnx)"


def _points(spec, cfg: dict) -> list[tuple[str, int, float]]:
    points = [("main", cfg["main_size"], spec.default_scale)]
    points += [("size", s, spec.default_scale) for s in cfg["sizes"] if s != cfg["main_size"]]
    if spec.dynamic_scale:
        lo, hi = spec.scale_range
        points += [("scale", cfg["main_size"], s) for s in cfg["scales"]
                   if s != spec.default_scale and lo <= s <= hi]
    return points


def bench_onnx(onnx: str | Path, cfg: dict, *, log=print, startup_runs: int = 5) -> dict:
    """One JSON-able document: per point and backend the latency statistics, and the startup row."""
    onnx = Path(onnx)
    spec = resolve(None, onnx)
    precision = onnx_metadata(onnx).get("precision", "fp32")
    statuses = candidate_statuses(None, precision, cfg.get("backends"), onnx=onnx)
    skipped = [f"{st.name}: {st.reason}" for st in statuses if not st.available] + [NOT_RUN]
    loaded = [B.create(st.name, None, precision, onnx=onnx) for st in statuses if st.available]
    if not loaded:
        raise PipelineError(f"no backend can run {onnx} here ({'; '.join(skipped[:-1])})")
    rng = np.random.default_rng(0)
    rows = []
    for sweep, size, scale in _points(spec, cfg):
        x = rng.random((1, 3, size, size), dtype=np.float32)
        calls = [(b.name, (lambda b=b, x=x, s=scale: b.infer(x, s))) for b in loaded]
        timings = time_interleaved(calls, warmup=cfg["warmup"], iters=cfg["iters"], time_budget=cfg["time_budget"],
                                   min_iters=cfg["min_iters"])
        for b in loaded:
            lat = latency_stats(timings[b.name]["ms"])
            rows.append({"sweep": sweep, "backend": b.name, "describe": b.describe(), "size": size, "scale": scale,
                         "latency_ms": lat, "peak_rss_mb": timings[b.name]["peak_rss_mb"]})
            log(f"  {spec.name} {sweep} {size}^2 x{scale:g} {b.name:<15} {lat['median']:9.1f} ms")
    startup = time_to_first_image(onnx, size=cfg["main_size"], scale=spec.default_scale, runs=startup_runs)
    log(f"  startup (time to first image, {cfg['main_size']}^2 x{spec.default_scale:g}): "
        f"{startup['median_s']:.2f} s median of {startup['runs']}")
    return {"kind": "bench-onnx", "onnx": str(onnx), "model": spec.name, "precision": precision,
            "environment": report.environment(), "rows": rows, "startup": startup, "skipped": skipped}


def blocks(doc: dict) -> list:
    """The report as blocks (pipeline.htmlreport.document): report.md and report.html are made from them."""
    s = doc["startup"]
    rows = [[r["sweep"], f"{r['size']}²", f"x{r['scale']:g}", r["backend"], f"{r['latency_ms']['median']:.1f}",
             f"{r['latency_ms']['min']:.1f}", f"{r['latency_ms']['p90']:.1f}"] for r in doc["rows"]]
    out = [Heading(f"bench: {doc['model']} from {doc['onnx']} ({doc['precision']}, no PyTorch)", 1),
           report.env_items(doc["environment"]),
           para("Round-robin timed calls (pipeline.bench.timing); latency in ms."),
           report.table(["sweep", "size", "scale", "backend", "median ms", "min", "p90"], rows),
           para(Strong("startup"), " (time to first image, ", Code("python -m pipeline sr"), " in a fresh process, "
                f"{s['size']}² x{s['scale']:g}): {s['median_s']:.2f} s, "
                + (f"median of {s['runs']} runs" if s["runs"] != 1 else "one run")
                + f" ({', '.join(f'{w:.2f}' for w in s['walls_s'])} s)"),
           para("Not run: " + "; ".join(doc["skipped"]))]
    if doc.get("plots"):
        out += [Heading("Plots"), *[plot_figure(k, v) for k, v in doc["plots"].items()]]
    return out


def markdown(doc: dict) -> str:
    return to_markdown(blocks(doc))


def write(doc: dict, out_dir: Path) -> dict[str, Path]:
    out_dir = Path(out_dir)
    # the full bench's latency-vs-size plot, from this file's rows (one model, batch 1)
    doc["plots"] = report.plot_bench({"results": [dict(r, model=doc["model"], batch=1) for r in doc["rows"]]},
                                     out_dir)
    paths = {"json": out_dir / "report.json", "md": out_dir / "report.md"}
    atomic_write(paths["json"], json.dumps(doc, indent=2, default=str) + "\n")
    _, paths["html"] = write_report(paths["md"], blocks(doc))
    return paths

