"""`python -m pipeline compare`: every available backend/precision vs PyTorch FP32."""
from __future__ import annotations

from pathlib import Path

from pipeline.analysis.compare import DEFAULT_PSNR_FP16, DEFAULT_TOL_FP32, compare_model
from pipeline.cli.options import models_arg
from pipeline.errors import PipelineError


def add_arguments(p) -> None:
    p.add_argument("--model", default="all", help="model name or 'all' (default: all)")
    p.add_argument("--output", default="outputs/compare", help="report folder (default: outputs/compare)")
    p.add_argument("--scales", type=float, nargs="+", help="scales to compare (default: the model's default)")
    p.add_argument("--size", type=int, default=96, help="centre crop of each held-out image (default: 96)")
    p.add_argument("--precisions", nargs="+", default=["fp32", "fp16"], choices=["fp32", "fp16"])
    p.add_argument("--backends", nargs="+", help="only these backends (default: every available one)")
    p.add_argument("--tol-fp32", type=float, default=DEFAULT_TOL_FP32, help="FP32 max abs error (default 1e-4)")
    p.add_argument("--psnr-fp16", type=float, default=DEFAULT_PSNR_FP16, help="FP16 min PSNR vs FP32 in dB (default 50)")
    p.add_argument("--bisect", action="store_true", help="on a failure, name the first diverging ONNX node")
    p.add_argument("--weights", help="weights file (default: the shipped weights)")


def run(args) -> int:
    from pipeline import report

    if args.size < 8:
        raise PipelineError(f"--size must be at least 8 pixels, got {args.size}")
    out_dir = Path(args.output)
    results = []
    for model in models_arg(args.model):
        print(f"compare {model}")
        try:
            results.append(compare_model(model, scales=args.scales, size=args.size, precisions=args.precisions,
                                         backends=args.backends, tol_fp32=args.tol_fp32, psnr_fp16=args.psnr_fp16,
                                         bisect=args.bisect, weights=args.weights))
        except (KeyError, ValueError) as e:
            raise PipelineError(str(e.args[0] if e.args else e)) from None
    doc = {"kind": "compare", "environment": report.environment(), "models": results}
    paths = report.write_compare(doc, out_dir)
    failed = [r for m in results for r in m["rows"] if r["status"] in ("fail", "error")]
    print(f"report: {paths['md']}  ({len(failed)} failing of "
          f"{sum(r['status'] in ('pass', 'fail', 'error') for m in results for r in m['rows'])} run)")
    return 1 if failed else 0

