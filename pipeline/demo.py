"""`python -m pipeline demo --output outputs`: the main job on embedded defaults, in a few minutes.

1. Held-out skimage photos (never trained on) -> HR PNGs, and their bicubic x3 downscales as LR inputs.
2. `pipeline sr` super-resolves the LR folder with the shipped weights (backend auto: the fastest
   available, CPU ones when there is no GPU) and scores it against the HR images (PSNR/SSIM vs bicubic).
3. A short compare (every available backend/precision vs PyTorch FP32) and a quick bench.
4. outputs/demo/report.md ties it together; the last lines printed say where everything is.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from .atomic import atomic_write
from .errors import PipelineError

DEMO_MODEL = "srcnn"
DEMO_SCALE = 3.0


def add_arguments(p) -> None:
    p.add_argument("--output", default="outputs", help="output root; the demo writes OUTPUT/demo/ (default: outputs)")
    p.add_argument("--model", default=DEMO_MODEL, help=f"model for the SR run (default: {DEMO_MODEL})")
    p.add_argument("--backend", default="auto", help="backend for the SR run (default: auto)")
    p.add_argument("--images", nargs="+", help="held-out skimage images to use (default: all held-out ones)")
    p.add_argument("--max-side", type=int, default=384, help="HR images are centre-cropped to at most this side")
    p.add_argument("--weights-dir", help="folder of <model>.pt files to use instead of the shipped weights")
    p.add_argument("--no-bench", action="store_true", help="skip the quick bench")
    p.add_argument("--no-compare", action="store_true", help="skip the backend comparison")


def _write_inputs(root: Path, names, max_side: int, scale: float) -> tuple[Path, Path, list[str]]:
    import cv2

    from .degradation import make_pair
    from .sample_images import HELD_OUT, load_rgb

    names = list(names or HELD_OUT)
    unknown = [n for n in names if n not in HELD_OUT]
    if unknown:
        raise PipelineError(f"not held-out images: {', '.join(unknown)} (held-out: {', '.join(HELD_OUT)})")
    hr_dir, lr_dir = root / "hr", root / "input"
    hr_dir.mkdir(parents=True, exist_ok=True)
    lr_dir.mkdir(parents=True, exist_ok=True)
    for name in names:
        img = load_rgb(name)
        h, w = img.shape[:2]
        sh, sw = min(h, max_side), min(w, max_side)
        y0, x0 = (h - sh) // 2, (w - sw) // 2
        lr, hr = make_pair(img[y0:y0 + sh, x0:x0 + sw], scale)
        for folder, pixels in ((hr_dir, hr), (lr_dir, lr)):
            tmp = folder / f".{name}.tmp.png"
            if not cv2.imwrite(str(tmp), pixels[:, :, ::-1]):
                raise PipelineError(f"cannot write {tmp}")
            tmp.replace(folder / f"{name}.png")
    return lr_dir, hr_dir, names


def run(args) -> int:
    from . import report
    from .cli import main as cli_main

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
        from .compare import compare_model

        quiet = lambda *a, **k: None  # noqa: E731 - the demo prints one line per step
        models = [args.model] + (["srcnn-x3"] if args.model != "srcnn-x3" else [])
        cmp_doc = {"kind": "compare", "environment": report.environment(),
                   "models": [compare_model(m, size=64, weights=weights(m), log=quiet) for m in models]}
        report.write_compare(cmp_doc, root / "compare")
        rows = [r for m in cmp_doc["models"] for r in m["rows"] if r["status"] in ("pass", "fail", "error")]
        print(f"[3/4] compare: {sum(r['status'] == 'pass' for r in rows)}/{len(rows)} backend runs pass -> "
              f"{root / 'compare' / 'report.md'}")
    bench_doc = None
    if not args.no_bench:
        from .bench import QUICK, run_bench

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


def demo_markdown(sr: dict, names: list[str], cmp_doc, bench_doc, seconds: float) -> str:
    from .report import fmt, table

    ref = sr.get("reference", {})
    lines = ["# Demo", "", f"Model `{sr['model']}` x{fmt(sr['scale'])} on {len(names)} held-out skimage images "
             f"({', '.join(names)}), backend {sr['backend']} ({sr.get('backend_choice', '')}). "
             f"Total {seconds:.0f} s.", "", "## Super-resolution (pipeline sr)", ""]
    rows = []
    for im in sr["images"]:
        rows.append([im["input"], "x".join(map(str, im.get("in_size", []))), "x".join(map(str, im.get("out_size", []))),
                     im.get("psnr"), im.get("psnr_bicubic"), im.get("ssim"), im.get("ssim_bicubic"), im.get("time_s"),
                     im.get("output")])
    lines += table(["image", "input WxH", "output WxH", "PSNR-Y dB", "bicubic PSNR-Y", "SSIM-Y", "bicubic SSIM-Y",
                    "time s", "file"], rows)
    if ref:
        lines += ["", f"Mean PSNR-Y {fmt(ref['psnr'])} dB vs bicubic {fmt(ref['psnr_bicubic'])} dB "
                      f"(+{fmt(ref['psnr'] - ref['psnr_bicubic'])} dB)."]
    if cmp_doc:
        lines += ["", "## Backends vs PyTorch FP32 (compare/report.md)", ""]
        lines += table(["model", "backend", "precision", "status", "max abs", "PSNR dB"],
                       [[m["model"], r["backend"], r["precision"], r["status"].upper(), r["max_abs"], r["psnr_db"]]
                        for m in cmp_doc["models"] for r in m["rows"] if r["status"] in ("pass", "fail")])
    if bench_doc:
        lines += ["", "## Quick bench (bench/report.md)", ""]
        main = [r for r in bench_doc["results"] if r["sweep"] == "main"]
        lines += table(["model", "backend", "size", "median ms", "speed-up vs eager loop", "roofline"],
                       [[r["model"], r["backend"], r["size"], r["latency_ms"]["median"], r["speedup_vs_baseline"],
                         r["roofline_fraction"]] for r in main])
        lines += ["", "Quick settings (small inputs, few iterations); `make bench` runs the full sweeps."]
    return "\n".join(lines) + "\n"
