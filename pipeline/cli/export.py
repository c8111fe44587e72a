"""`python -m pipeline export`: one model to one file, or `--all` models/flavours into a directory."""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from models.spec import OWN_MODELS  # torch-free: `export --help` must not import PyTorch
from pipeline.artifacts.cache import EXPORTERS, OPS, SIZE_INPUTS
from pipeline.cli import options
from pipeline.errors import PipelineError
from pipeline.precisions import GRAPH


def add_arguments(parser: argparse.ArgumentParser) -> None:
    what = parser.add_mutually_exclusive_group()
    options.add_model_args(what, files=False)
    what.add_argument("--all", action="store_true",
                      help="every model x ops (custom, standard) x precision (fp32, fp16) into --output-dir, "
                           "shipped weights, one exporter (--exporter)")
    parser.add_argument("--output", type=Path, metavar="FILE", help="output .onnx file (with --model)")
    options.add_output_dir_arg(parser, None, flag="--output-dir", what="output folder (with --all)")
    parser.add_argument("--exporter", choices=EXPORTERS + ("all",), default="dynamo",
                        help="torch exporter: dynamo (default) or the legacy torchscript one; 'all' (with --all) "
                             "exports with both")
    parser.add_argument("--ops", choices=OPS, default="custom",
                        help="custom: sr::DynamicResize / sr::DeformConv2d with standard-ONNX function bodies "
                             "(default); standard: plain Resize / DeformConv")
    options.add_precision_args(parser)
    parser.add_argument("--io-dtype", choices=GRAPH, default="fp32",
                        help="dtype of input/output in an fp16 graph (default fp32: Casts at the boundary)")
    parser.add_argument("--size-input", choices=SIZE_INPUTS, default="size",
                        help="run-time factor models: int64 'size' (H_out, W_out) input (default), or float 'scale' "
                             "(s_h, s_w) -> Resize(scales), the tutorial's NewInterpolate (needs --ops standard)")
    options.add_weights_arg(parser)
    parser.add_argument("--opset", type=int, help="default-domain opset (default 20; >= 19)")
    parser.add_argument("--scale", type=float, help=options.scale_help("factor used to verify"))
    parser.add_argument("--no-verify", action="store_true", help="skip the ONNX Runtime vs PyTorch check")


def describe(r) -> str:
    """One line for an ExportResult."""
    err = "not verified" if r.max_abs_error is None else f"max|ORT-PyTorch| {r.max_abs_error:.2e}"
    io = f" io={r.io_dtype}" if r.precision == "fp16" else ""
    return (f"{r.path}: {r.model} {r.exporter} ops={r.ops} {r.precision}{io} opset {r.opset}  {err}  "
            f"({r.seconds:.1f}s)")


def run(args: argparse.Namespace) -> int:
    verify = not args.no_verify
    if args.all:
        if args.output_dir is None or args.output is not None:
            raise PipelineError("--all writes into --output-dir DIR (not --output)")
        if args.weights is not None or args.scale is not None or args.size_input != "size":
            raise PipelineError("--weights / --scale / --size-input apply to one model: use --model, not --all "
                                "(--all exports the shipped weights)")
        options.check_output_dir(args.output_dir, "--output-dir")
        return _run_all(args, verify)
    if args.output is None or args.output_dir is not None:
        raise PipelineError("--model writes one file: give --output FILE.onnx")
    if args.exporter == "all":
        raise PipelineError("--exporter all works with --all; with --model pick dynamo or torchscript")
    if args.output.suffix.lower() != ".onnx":  # the files written beside it are named after it, .onnx too
        raise PipelineError(f"--output {args.output}: an ONNX file's name must end in .onnx")
    model = options.model_from_args(args)
    options.check_output_file(args.output, "--output")
    r = _core().export_model(model, args.output, exporter=args.exporter, ops=args.ops, precision=args.precision,
                     io_dtype=args.io_dtype, weights=options.weights_from_args(args), opset=args.opset, verify=verify,
                     size_input=args.size_input, scale=args.scale)
    print(describe(r), flush=True)
    return 0


def _core():
    """pipeline.export.core, imported when exporting: it imports PyTorch (`export --help` does not)."""
    from pipeline.export import core  # PyTorch

    return core


def _run_all(args: argparse.Namespace, verify: bool) -> int:
    build_graph, onnx_filename, write_variant = _core().build_graph, _core().onnx_filename, _core().write_variant
    failures: list[str] = []
    total = 0
    exporters = EXPORTERS if args.exporter == "all" else (args.exporter,)
    for model, exporter, ops in ((m, e, o) for m in OWN_MODELS for e in exporters for o in OPS):
        started = time.perf_counter()
        try:
            g = build_graph(model, exporter=exporter, ops=ops, opset=args.opset)  # once for both precisions
        except PipelineError as e:
            total += len(GRAPH)
            failures += [f"{model} {exporter} ops={ops}: {e}"] * len(GRAPH)
            print(f"error: {model} {exporter} ops={ops}: {e}", flush=True)
            continue
        for precision in GRAPH:
            total += 1
            io_dtype = args.io_dtype if precision == "fp16" else "fp32"
            name = onnx_filename(model, exporter=exporter, ops=ops, precision=precision, io_dtype=io_dtype)
            try:
                r = write_variant(g, args.output_dir / name, precision=precision, io_dtype=io_dtype,
                                  verify_=verify, started=started)
                print(describe(r), flush=True)
            except PipelineError as e:
                failures.append(f"{name}: {e}")
                print(f"error: {name}: {e}", flush=True)
            started = time.perf_counter()
    if failures:
        raise PipelineError(f"{len(failures)} of {total} exports failed (first: {failures[0]})")
    return 0
