"""`python -m pipeline compare`: every available backend/precision vs PyTorch FP32."""
from __future__ import annotations

from pipeline import report
from pipeline.analysis import sheet
from pipeline.analysis.compare import DEFAULT_PSNR_FP16, DEFAULT_TOL_FP32, compare_model, compare_onnx, runs_passing
from pipeline.artifacts.identity import resolve
from pipeline.backends import no_gpu_line
from pipeline.cli import options
from pipeline.errors import PipelineError

BACKEND = options.BackendArgs("many", "many", files=("onnx", "weights"))


def add_arguments(p) -> None:
    options.add_model_args(p, allow_all=True)
    options.add_output_dir_arg(p, default="outputs/compare")
    p.add_argument("--scales", type=float, nargs="+", help="scales to compare (default: the model's default)")
    p.add_argument("--size", type=int, default=96, help="centre crop of each held-out image (default: 96)")
    BACKEND.add_parser_arguments(p)
    p.add_argument("--tol-fp32", type=float, default=DEFAULT_TOL_FP32, help="FP32 max abs error (default 1e-4)")
    p.add_argument("--psnr-fp16", type=float, default=DEFAULT_PSNR_FP16,
                   help="FP16 min PSNR vs FP32 in dB (default 50)")
    p.add_argument("--bisect", action="store_true", help="on a failure, name the first diverging ONNX node")


def _compare_file(args, onnx) -> list[dict]:
    """`--onnx FILE`: its backends against the reference outputs stored with it at export time (no PyTorch)."""
    if args.scales:
        raise PipelineError("--scales does not apply with --onnx: the reference outputs stored with the file are "
                            "at its default scale")
    model = options.model_from_args(args)  # an explicit other --model is an error
    if (line := no_gpu_line()) is not None:
        print(line)
    print(f"compare {model} ({onnx})")
    result = compare_onnx(onnx, backends=BACKEND.backends(args), tol_fp32=args.tol_fp32,
                          psnr_fp16=args.psnr_fp16)
    if not any(r["status"] != "unavailable" for r in result["rows"]):
        why = "; ".join(f"{r['backend']}: {r['reason']}" for r in result["rows"])
        raise PipelineError(f"no backend can run {onnx} here ({why})")
    return [result]


def run(args) -> int:
    if args.size < 8:
        raise PipelineError(f"--size must be at least 8 pixels, got {args.size}")
    request = BACKEND.parse(args)
    onnx = request.onnx
    if onnx is not None:
        out_dir = options.check_output_dir(args.output)  # before any work
        return _report(_compare_file(args, onnx), out_dir)
    models = options.models_from_args(args, allow_all=True)
    options.check_scales([resolve(m) for m in models], args.scales)
    out_dir = options.check_output_dir(args.output)
    weights = request.weights
    backends = BACKEND.backends(args)
    options.check_runnable(models, args.precisions, backends, weights)
    if (line := no_gpu_line()) is not None:
        print(line)
    results = []
    for model in models:
        print(f"compare {model}")
        results.append(compare_model(model, scales=args.scales, size=args.size, precisions=args.precisions,
                                     backends=backends, tol_fp32=args.tol_fp32, psnr_fp16=args.psnr_fp16,
                                     bisect=args.bisect, weights=weights))
    sheets = sheet.compare_sheets(out_dir, results, lambda _: weights)  # the same crops from every passing backend
    return _report(results, out_dir, sheets)


def _report(results: list[dict], out_dir, sheets=()) -> int:
    """report.json, report.md and report.html (with `--onnx FILE` too: its page has no crop sheets)."""
    doc = {"kind": "compare", "environment": report.environment(), "models": results}
    paths = report.write_compare(doc, out_dir, sheets)
    passed, ran = runs_passing(results)
    print(f"report: {paths['md']}  ({passed}/{ran} backend runs pass)")
    print(f"html: {paths['html']}")
    return 1 if passed < ran else 0
