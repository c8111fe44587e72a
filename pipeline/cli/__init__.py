"""`python -m pipeline <stage> ...`: one subcommand per pipeline stage.

Each stage has a module in this package exposing `add_arguments(parser)` and `run(args) -> int`; modules
are imported only when their subcommand runs, so `--help` and light stages stay fast.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from pipeline.errors import PipelineError

# subcommand -> (module, one-line help)
STAGES = {
    "export": ("pipeline.cli.export", "PyTorch -> ONNX with the sr custom-domain ops (or standard ops)"),
    "engine": ("pipeline.cli.engine", "ONNX -> TensorRT engine with our plugins"),
    "sr": ("pipeline.cli.sr", "super-resolve an image or a folder of images"),
    "eval": ("pipeline.cli.eval", "PSNR/SSIM of a model vs bicubic on held-out images"),
    "compare": ("pipeline.cli.compare", "compare every available backend's output with PyTorch FP32"),
    "bench": ("pipeline.cli.bench", "benchmark latency/throughput of every available backend"),
    "backends": ("pipeline.cli.backends", "list the backends this machine can run, and why others cannot"),
    "triton": ("pipeline.cli.triton", "write a Triton Inference Server model repository (TensorRT or ONNX Runtime)"),
    "demo": ("pipeline.cli.demo", "end-to-end demo on shipped weights and skimage images"),
}


def build_parser(argv: list[str]) -> tuple[argparse.ArgumentParser, argparse.Namespace | None]:
    parser = argparse.ArgumentParser(prog="python -m pipeline", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="stage", metavar="STAGE")
    for name, (_, help_) in STAGES.items():
        sub.add_parser(name, help=help_, add_help=False)
    return parser, sub


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in STAGES:
        parser, _ = build_parser(argv)
        parser.print_help() if not argv or argv[0] in ("-h", "--help") else parser.parse_args(argv)
        return 0 if not argv or argv[0] in ("-h", "--help") else 2
    stage, rest = argv[0], argv[1:]
    module_name, help_ = STAGES[stage]
    stage_parser = argparse.ArgumentParser(prog=f"python -m pipeline {stage}", description=help_)
    try:
        module = importlib.import_module(module_name)
        module.add_arguments(stage_parser)
        args = stage_parser.parse_args(rest)
        return int(module.run(args) or 0)
    except PipelineError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
