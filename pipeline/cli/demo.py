"""`python -m pipeline demo`: the main job on embedded defaults, in a few minutes."""
from __future__ import annotations

import time
from pathlib import Path

from models.fetched import problem as fetched_problem
from pipeline import report
from pipeline.analysis import sheet
from pipeline.analysis.compare import compare_model, runs_passing
from pipeline.bench.suite import QUICK, run_bench
from pipeline.cli import options
from pipeline.demo import DEMO_MODEL, DEMO_SCALE, GAN_MODEL, _write_inputs, check_max_side, demo_blocks
from pipeline.errors import PipelineError
from pipeline.htmlreport import Sheet, write_report
from pipeline.sr import upscale


def add_arguments(p) -> None:
    p.add_argument("--output", default="outputs", metavar="DIR",
                   help="output root; the demo writes DIR/demo/ (default: outputs)")
    p.add_argument("--model", default=None, help=f"model for the SR run (default: {DEMO_MODEL})")
    p.add_argument("--backend", default="auto", metavar="NAME", help="backend for the SR run (default: auto)")
    p.add_argument("--images", nargs="+", help="held-out skimage images to use (default: all held-out ones)")
    p.add_argument("--max-side", type=int, default=384,
                   help="HR images are centre-cropped to at most this side (default: %(default)s)")
    p.add_argument("--weights-dir", metavar="DIR", help="folder of <model>.pt files to use instead of the shipped "
                                                       "weights")
    p.add_argument("--no-bench", action="store_true", help="skip the quick bench")
    p.add_argument("--no-compare", action="store_true", help="skip the backend comparison")


def _quiet(line: str = "", *_args, **_kwargs) -> None:
    """The demo prints one line per step; of the stages' own logs only what makes a step slow on first use (an
    export into the cache) comes through, so an empty cache's steps are not silent for a minute."""
    if isinstance(line, str) and line.startswith("exporting "):
        print(f"      {line}", flush=True)


def _compare(models: list[str], weights, root: Path) -> dict:
    print(f"[3/4] compare: every backend here against PyTorch fp32 on {', '.join(models)} ...", flush=True)
    doc = {"kind": "compare", "environment": report.environment(),
           "models": [compare_model(m, size=64, weights=weights(m), log=_quiet) for m in models]}
    sheets = sheet.compare_sheets(root / "compare", doc["models"], weights)  # the same crops, to look at
    report.write_compare(doc, root / "compare", sheets)
    doc["sheets"] = sheets
    passed, ran = runs_passing(doc["models"])
    print(f"[3/4] compare: {passed}/{ran} backend runs pass -> {root / 'compare' / 'report.md'}")
    return doc


def _bench(weights, root: Path) -> dict:
    cfg = dict(QUICK, quick=True, folder_images=2)
    print(f"[4/4] quick bench (srcnn-x3, {cfg['main_size']}^2): timing every backend and precision, about a minute "
          "(longer on first use: exports, int8 calibration) ...", flush=True)
    doc = run_bench(["srcnn-x3"], cfg, weights=weights("srcnn-x3"), log=_quiet)
    report.write_bench(doc, root / "bench")
    auto = doc["auto"][0] if doc["auto"] else None
    line = (f"auto = {auto['backend']}: x{auto['speedup']:.2f} vs the PyTorch eager loop"
            if auto and auto.get("speedup") else "see report")
    print(f"[4/4] quick bench (srcnn-x3, {cfg['main_size']}^2): {line} -> {root / 'bench' / 'report.md'}")
    return doc


def _gan(lr_dir: Path, hr_dir: Path, root: Path, backend: str):
    """The same inputs through Real-ESRGAN animevideov3 (its x4, downscaled to x3), scored the same way; None, with
    one line saying how to fetch it, where its weights are not here."""
    if (why := fetched_problem(GAN_MODEL)) is not None:
        print(f"[2/4] {GAN_MODEL} not shown: {why}")
        return None
    summary = upscale(lr_dir, root / f"sr-{GAN_MODEL}", model=GAN_MODEL, scale=DEMO_SCALE, backend=backend,
                      reference=hr_dir, summary=root / f"sr_{GAN_MODEL}_summary.json", progress=False, log=_quiet)
    if summary.failed:
        raise PipelineError(f"the sr stage failed on {len(summary.failed)} image(s) with {GAN_MODEL}: "
                            f"{summary.failed[0].job.rel}: {summary.failed[0].reason}")
    ref = summary.reference or {}
    print(f"[2/4] beside it, {GAN_MODEL} (GAN) on {summary.backend}: PSNR-Y {ref.get('psnr', float('nan')):.2f} dB, "
          "a GAN model does not aim at PSNR")
    return summary


def run(args) -> int:
    t0 = time.perf_counter()
    # every step runs PyTorch (the export, compare's reference, the bench's eager loop): without it, the CLI's one
    # line naming the extra, before anything is printed or made
    import torch  # noqa: F401
    check_max_side(args.max_side, DEMO_SCALE)
    # --model and --backend are checked before input/ and hr/ are written, like every other command's
    options.models_from_args(args)
    options.backend_from_args(args)
    model = DEMO_MODEL if args.model is None else args.model
    wdir = Path(args.weights_dir) if args.weights_dir else None
    if wdir is not None and not wdir.is_dir():
        raise PipelineError(f"--weights-dir {wdir} is not a folder")

    def weights(model: str):
        return str(wdir / f"{model}.pt") if wdir else None

    root = options.check_output_dir(Path(args.output) / "demo")
    root.mkdir(parents=True, exist_ok=True)
    print(f"demo: model {model} x{DEMO_SCALE:g}, backend {args.backend}, writing under {root}/")
    lr_dir, hr_dir, names = _write_inputs(root, args.images, args.max_side, DEMO_SCALE)
    print(f"[1/4] {len(names)} held-out images -> LR inputs {lr_dir}/ (HR references in {hr_dir}/)")

    sr_dir = root / "sr"
    summary = upscale(lr_dir, sr_dir, model=model, scale=DEMO_SCALE, backend=args.backend,
                      weights=weights(model), reference=hr_dir, summary=root / "sr_summary.json",
                      progress=False, log=lambda line: print(line, flush=True))  # with the steps, in order
    if summary.failed:
        raise PipelineError(f"the sr stage failed on {len(summary.failed)} image(s): "
                            f"{summary.failed[0].job.rel}: {summary.failed[0].reason}")
    ref = summary.reference or {}
    print(f"[2/4] upscaled images -> {sr_dir}/ with {summary.backend}; "
          f"PSNR-Y {ref.get('psnr', float('nan')):.2f} dB vs bicubic {ref.get('psnr_bicubic', float('nan')):.2f} dB")

    gan = _gan(lr_dir, hr_dir, root, args.backend)
    models = [model] + (["srcnn-x3"] if model != "srcnn-x3" else [])
    cmp_doc = None if args.no_compare else _compare(models, weights, root)
    bench_doc = None if args.no_bench else _bench(weights, root)
    env = (bench_doc or cmp_doc or {}).get("environment") or report.environment()
    sr_sheet = Sheet(f"{summary.model} x{DEMO_SCALE:g}: the sr run's first image, against the original",
                     sheet.sheet_path(sr_dir, [r.job.dst for r in summary.records]))
    gan_sheet = [Sheet(f"{GAN_MODEL} x{DEMO_SCALE:g}: the same image, against the original",
                       sheet.sheet_path(root / f"sr-{GAN_MODEL}", [r.job.dst for r in gan.records]))] if gan else []
    sheets = [s for s in [sr_sheet, *gan_sheet, *(cmp_doc or {}).get("sheets", [])] if s.path.is_file()]
    _, page = write_report(root / "report.md", demo_blocks(summary.to_dict(), names, cmp_doc, bench_doc,
                                                          time.perf_counter() - t0, env, sheets,
                                                          gan.to_dict() if gan else None))
    print(f"done in {time.perf_counter() - t0:.0f} s. Report: {root / 'report.md'} (in a browser: {page}); "
          f"upscaled images: {sr_dir}/")
    return 0
