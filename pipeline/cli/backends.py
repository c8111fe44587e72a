"""`python -m pipeline backends [--model NAME] [--measure]`: which backends run here, and why others cannot."""
from __future__ import annotations

from pipeline.errors import PipelineError

DEFAULT_MODEL = "srcnn-x3"


def add_arguments(parser) -> None:
    parser.add_argument("--model", help=f"model to check (default {DEFAULT_MODEL}, or the one --onnx holds)")
    parser.add_argument("--precision", choices=("fp32", "fp16"), default="fp32")
    parser.add_argument("--weights", help="weights file (default: the model's shipped weights)")
    parser.add_argument("--onnx", metavar="FILE", help="an exported ONNX file: the model comes from its metadata")
    parser.add_argument("--measure", action="store_true",
                        help="time each available backend on one 256x256 image and remember the fastest for "
                             "--backend auto")
    parser.add_argument("--size", type=int, default=256, help="image side for --measure (default 256)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per backend for --measure (default 5)")


def format_table(statuses) -> str:
    width = max(len(s.name) for s in statuses)
    lines = [f"{'backend'.ljust(width)}  ok   reason"]
    for s in statuses:
        lines.append(f"{s.name.ljust(width)}  {'yes' if s.available else 'no '}  {s.reason}")
    return "\n".join(lines)


def run(args) -> int:
    from pipeline.backends import available, measure, pick_auto, resolve_spec

    if args.size < 1 or args.repeats < 1:
        raise PipelineError("--size and --repeats must be >= 1")
    model = args.model or (None if args.onnx else DEFAULT_MODEL)  # None: the ONNX file says which model
    statuses = available(model, args.precision, args.weights, onnx=args.onnx)
    model = model or resolve_spec(None, args.onnx).name
    print(f"backends for {model} ({args.precision}{', ' + args.onnx if args.onnx else ''}):")
    print(format_table(statuses))
    if args.measure:
        print(f"measuring ({args.size}x{args.size}, median of {args.repeats}):")
        measure(model, args.precision, size=args.size, repeats=args.repeats, weights=args.weights)
    if not any(s.available for s in statuses):
        print("--backend auto -> none: no backend can run this model here (reasons above)")
        return 1
    pick = pick_auto(model, args.precision, statuses)
    print(f"--backend auto -> {pick.name}: {pick.reason}")
    return 0
