"""`python -m pipeline demo`: the main job on embedded defaults, in a few minutes."""
from __future__ import annotations

import json
import time
from pathlib import Path

from pipeline.analysis import sheet
from pipeline.artifacts.atomic import atomic_write
from pipeline.demo import DEMO_MODEL, DEMO_SCALE, _write_inputs, demo_markdown
from pipeline.errors import PipelineError


def add_arguments(p) -> None:
    p.add_argument("--output", default="outputs", help="output root; the demo writes OUTPUT/demo/ (default: outputs)")
    p.add_argument("--model", default=DEMO_MODEL, help=f"model for the SR run (default: {DEMO_MODEL})")
    p.add_argument("--backend", default="auto", help="backend for the SR run (default: auto)")
    p.add_argument("--images", nargs="+", help="held-out skimage images to use (default: all held-out ones)")
    p.add_argument("--max-side", type=int, default=384, help="HR images are centre-cropped to at most this side")
    p.add_argument("--weights-dir", help="folder of <model>.pt files to use instead of the shipped weights")
    p.add_argument("--no-bench", action="store_true", help="skip the quick bench")
    p.add_argument("--no-compare", action="store_true", help="skip the backend comparison")


def run(args) -> int:
    from pipeline import report
    from pipeline.cli import main as cli_main

    t0 = time.perf_counter()
    wdir = Path(args.weights_dir) if args.weights_dir else None

    def weights(model: str):
        return str(wdir / f"{model}.pt") if wdir else None

    root = Path(args.output) / "demo"
    root.mkdir(parents=True, exist_ok=True)
    print(f"demo: model {args.model} x{DEMO_SCALE:g}, backend {args.backend}, writing under {root}/")
    lr_dir, hr_dir, names = _write_inputs(root, args.images, args.max_side, DEMO_SCALE)
    print(f"[1/4] {len(names)} held-out images -> LR inputs {lr_dir}/ (HR references in {hr_dir}/)")

    sr_dir, summary_file = root / "sr", root / "sr_summary.json"
    rc = cli_main(["sr", str(lr_dir), str(sr_dir), "--model", args.model, "--scale", str(DEMO_SCALE),
                   "--backend", args.backend, "--reference", str(hr_dir), "--summary", str(summary_file), "--quiet"]
                 + (["--weights", weights(args.model)] if wdir else []))
    if rc != 0:
        raise PipelineError(f"the sr stage failed (exit {rc}); see the lines above")
    sr = json.loads(summary_file.read_text())
    ref = sr.get("reference", {})
    print(f"[2/4] upscaled images -> {sr_dir}/ with {sr['backend']}; "
          f"PSNR-Y {ref.get('psnr', float('nan')):.2f} dB vs bicubic {ref.get('psnr_bicubic', float('nan')):.2f} dB")

    cmp_doc = None
    if not args.no_compare:
        from pipeline.analysis.compare import compare_model

        quiet = lambda *a, **k: None  # noqa: E731 - the demo prints one line per step
        models = [args.model] + (["srcnn-x3"] if args.model != "srcnn-x3" else [])
        cmp_doc = {"kind": "compare", "environment": report.environment(),
                   "models": [compare_model(m, size=64, weights=weights(m), log=quiet) for m in models]}
        report.write_compare(cmp_doc, root / "compare")
        sheet.compare_sheets(root / "compare", cmp_doc["models"], weights)  # the crops, to look at
        rows = [r for m in cmp_doc["models"] for r in m["rows"] if r["status"] in ("pass", "fail", "error")]
        print(f"[3/4] compare: {sum(r['status'] == 'pass' for r in rows)}/{len(rows)} backend runs pass -> "
              f"{root / 'compare' / 'report.md'}")
    bench_doc = None
    if not args.no_bench:
        from pipeline.bench.suite import QUICK, run_bench

        cfg = dict(QUICK, quick=True, folder_images=2)
        bench_doc = run_bench(["srcnn-x3"], cfg, weights=weights("srcnn-x3"), log=lambda *a, **k: None)
        report.write_bench(bench_doc, root / "bench")
        auto = bench_doc["auto"][0] if bench_doc["auto"] else None
        line = (f"auto = {auto['backend']}: x{auto['speedup']:.2f} vs the PyTorch eager loop"
                if auto and auto.get("speedup") else "see report")
        print(f"[4/4] quick bench (srcnn-x3, {cfg['main_size']}^2): {line} -> {root / 'bench' / 'report.md'}")

    md = demo_markdown(sr, names, cmp_doc, bench_doc, time.perf_counter() - t0)
    atomic_write(root / "report.md", md)
    print(f"done in {time.perf_counter() - t0:.0f} s. Report: {root / 'report.md'}; upscaled images: {sr_dir}/")
    return 0

