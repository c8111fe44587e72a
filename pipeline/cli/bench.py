"""`python -m pipeline bench`: latency/throughput of every available backend."""
from __future__ import annotations

import json
import time
from pathlib import Path

from pipeline import report
from pipeline.artifacts.atomic import atomic_write
from pipeline.artifacts.identity import resolve
from pipeline.backends.descriptor import MAX_THREADS
from pipeline.bench import onnx_file
from pipeline.bench.results import FLOOR_SPEEDUP
from pipeline.bench.suite import FULL, QUICK, run_bench
from pipeline.cli import options
from pipeline.errors import PipelineError

BACKEND = options.BackendArgs("many", files=("onnx", "weights"))


def add_arguments(p) -> None:
    options.add_model_args(p, allow_all=True)
    options.add_output_dir_arg(p, default="outputs/bench")
    p.add_argument("--quick", action="store_true", help="small sizes, few iterations (< 2 min on 2 cores)")
    p.add_argument("--sizes", type=int, nargs="+", help="input sides for the size sweep")
    p.add_argument("--scales", type=float, nargs="+", help="scales for the scale sweep (run-time-factor models)")
    p.add_argument("--batches", type=int, nargs="+", help="batch sizes for the batch sweep")
    p.add_argument("--threads", type=int, nargs="+", help="CPU thread counts for the threads sweep")
    p.add_argument("--iters", type=int, help="max timed calls per configuration")
    p.add_argument("--time-budget", type=float, help="seconds of timed calls per configuration")
    BACKEND.add_parser_arguments(p)  # --backends: the baseline loop always runs too
    p.add_argument("--no-folder", action="store_true",
                   help="skip the whole-folder (pipeline sr) timings: folder vs inference, the stage's own cost, "
                        "the GPU folder row")
    p.add_argument("--no-video", action="store_true", help="skip the video fps at 480p and 720p input and the "
                   "segment overhead and size rows")
    p.add_argument("--encoders", action="store_true", help="only the encoder preset table: x264/x265 frames/s and "
                   "size per preset at 1080p output, interleaved medians (into OUTPUT/encoders.json)")


def config_from_args(args) -> dict:
    cfg = dict(QUICK if args.quick else FULL)
    cfg["quick"] = bool(args.quick)
    for key in ("sizes", "scales", "batches", "threads"):
        if getattr(args, key):
            cfg[key] = tuple(getattr(args, key))
    if args.iters is not None:
        if args.iters < 1:
            raise PipelineError("--iters must be at least 1")
        cfg["iters"] = args.iters
        cfg["min_iters"] = min(cfg["min_iters"], args.iters)
    if args.time_budget is not None:
        if args.time_budget <= 0:
            raise PipelineError("--time-budget must be positive")
        cfg["time_budget"] = args.time_budget
    if any(s < 8 for s in cfg["sizes"]) or any(b < 1 for b in cfg["batches"]) \
            or any(not 1 <= t <= MAX_THREADS for t in cfg["threads"]):
        raise PipelineError(f"sizes must be >= 8, batches >= 1 and threads from 1 to {MAX_THREADS}")
    backends = BACKEND.backends(args)
    if backends:
        cfg["backends"] = tuple(backends)
    if args.no_folder:
        cfg["folder_images"] = cfg["stage_images"] = cfg["gpu_folder_images"] = 0
    if args.no_video:
        cfg["video_frames"] = 0
        cfg["segment_clip_s"] = 0
    return cfg


def _run_file(args, cfg: dict, onnx) -> int:
    """`--onnx FILE`: the file's backends and its startup time, without PyTorch (pipeline.bench.onnx_file)."""
    model = options.model_from_args(args)  # an explicit other --model is an error
    options.check_scales([resolve(args.model, onnx)], args.scales, sweep=True)
    out_dir = options.check_output_dir(args.output)
    print(f"bench {model} ({onnx})")
    paths = onnx_file.write(onnx_file.bench_onnx(onnx, cfg), out_dir)
    print(f"report: {paths['md']}")
    return 0


def _run_encoders(args) -> int:
    """`--encoders`: the preset table alone (pipeline.bench.encoders); --quick: a small picture, one round."""
    from pipeline.bench.encoders import preset_table  # PyAV: only for --encoders

    out_dir = options.check_output_dir(args.output)
    size, frames, rounds = ((320, 180), 4, 1) if args.quick else ((1920, 1080), 24, 3)
    print(f"bench: encoder presets at {size[0]}x{size[1]}, {frames} frames, median of {rounds} interleaved round(s)")
    rows = preset_table(*size, frames=frames, rounds=rounds)
    path = Path(out_dir) / "encoders.json"
    atomic_write(path, json.dumps(rows, indent=1).encode())
    print(f"table: {path}")
    return 0


def run(args) -> int:
    if getattr(args, "encoders", False):  # an args namespace made by hand (tests) may not have it
        return _run_encoders(args)
    cfg = config_from_args(args)
    request = BACKEND.parse(args)
    onnx = request.onnx
    if onnx is not None:
        return _run_file(args, cfg, onnx)
    models = options.models_from_args(args, allow_all=True)
    options.check_scales([resolve(m) for m in models], args.scales, sweep=True)
    out_dir = options.check_output_dir(args.output)
    weights = request.weights
    options.check_runnable(models, ("fp32",), cfg.get("backends"), weights)
    t0 = time.perf_counter()
    doc = run_bench(models, cfg, weights=weights)
    doc["total_seconds"] = time.perf_counter() - t0
    paths = report.write_bench(doc, out_dir)
    for a in doc["auto"]:
        if a["speedup"] is not None:
            print(f"auto ({a['backend']}) on {a['model']}: x{a['speedup']:.2f} vs the PyTorch eager loop "
                  f"(floor x{FLOOR_SPEEDUP:g}: {'met' if a['meets_floor'] else 'NOT met'}), "
                  f"{report.roofline_share(a['roofline_fraction'])} of roofline")
    print(f"report: {paths['md']} ({doc['total_seconds']:.0f} s)")
    return 0
