"""`python -m pipeline backends [--model NAME] [--measure]`: which backends run here, and why others cannot."""
from __future__ import annotations

from pipeline import quality
from pipeline.backends import (
    auto_line,
    available,
    create,
    create_named,
    descriptors,
    measure,
    no_gpu_line,
    pick_auto,
)
from pipeline.cli import options
from pipeline.errors import PipelineError
from pipeline.precisions import AUTO, BUDGET_DB

BACKEND = options.BackendArgs(precision="auto")  # which backends: all of them, each with its status


def add_arguments(parser) -> None:
    options.add_model_args(parser)
    BACKEND.add_parser_arguments(parser)
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


def format_descriptors() -> str:
    """What each backend runs, from its descriptor: device, expected-order ranks, each precision and its artifact."""
    width = max(len(d.name) for d in descriptors())
    lines = [f"{'backend'.ljust(width)}  {'device'.ljust(11)}  rank cpu/gpu  runs (from which artifact, its version)"]
    for d in descriptors():
        rank = f"{'-' if d.cpu_rank is None else d.cpu_rank + 1}/{'-' if d.gpu_rank is None else d.gpu_rank + 1}"
        runs = ", ".join(f"{p} ({d.artifact(p).name} v{d.artifact(p).version})" for p in d.precisions)
        lines.append(f"{d.name.ljust(width)}  {d.device.ljust(11)}  {rank.ljust(12)}  {runs}")
    return "\n".join(f"  {ln}" for ln in lines)  # indented: the availability table's rows start with the names


def _say_quality(name: str, model, args, weights, onnx) -> None:
    """The measured quality loss of a lower precision (measured with --measure, else the stored record)."""
    backend = create_named(name, model, args.precision, weights=weights, onnx=onnx)
    record = quality.stored(backend)
    if record is None and args.measure:
        record = quality.precision_loss(backend, log=print)
    print(f"quality: {name}: {quality.loss_line(record)}" if record else
          f"quality: {name} {args.precision}: not measured on this machine yet (--measure measures it)")


def run(args) -> int:
    if args.size < 1 or args.repeats < 1:
        raise PipelineError("--size and --repeats must be >= 1")
    request = BACKEND.parse(args)
    weights, onnx = request.weights, request.onnx
    model = options.model_from_args(args, onnx)
    if args.precision == AUTO and args.measure:  # weigh, measure and pick now: which rule judged each precision
        best = create(AUTO, model, AUTO, log=print, weights=weights, onnx=onnx)
        print(f"auto: {best.name} {best.precision}: {best.selection_reason}")
        return 0
    if args.precision == AUTO:  # one line: what `--precision auto` runs here, and why
        print(auto_line(AUTO, model, weights=weights, onnx=onnx))
        return 0
    statuses = available(model, args.precision, weights, onnx=onnx)
    print("what each backend runs (rank: its place in --backend auto's expected order when nothing was measured):\n"
          f"{format_descriptors()}\n")
    print(f"backends for {model} ({args.precision}{f', {onnx}' if onnx else ''}):")
    if (line := no_gpu_line()) is not None:
        print(line)
    print(format_table(statuses))
    if args.measure:
        print(f"measuring ({args.size}x{args.size}, median of {args.repeats}):")
        measure(model, args.precision, size=args.size, repeats=args.repeats, weights=weights, onnx=onnx)
    if args.precision in BUDGET_DB:
        for s in (s for s in statuses if s.available):
            _say_quality(s.name, model, args, weights, onnx)
    if not any(s.available for s in statuses):
        print("--backend auto -> none: no backend can run this model here (reasons above)")
        return 1
    pick = pick_auto(model, args.precision, statuses)
    print(f"--backend auto -> {pick.name}: {pick.reason}")
    return 0
