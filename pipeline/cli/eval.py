"""`python -m pipeline eval`: PSNR/SSIM (Y) of a model vs bicubic on held-out images."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from models.spec import WeightsError
from pipeline import quality
from pipeline.analysis.evaluate import DEFAULT_SCALES, evaluate, format_table  # PyTorch loads inside evaluate()
from pipeline.artifacts.atomic import atomic_write
from pipeline.artifacts.identity import resolve
from pipeline.backends import create
from pipeline.cli import options
from pipeline.data import sample_images
from pipeline.errors import PipelineError
from pipeline.precisions import LOWER

BACKEND = options.BackendArgs(files=("weights",))  # the model's PyTorch weights (evaluate runs them)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    options.add_model_args(parser, files=False)
    parser.add_argument("--scales", type=float, nargs="+", default=None,
                        help="upscale factors to evaluate (default: those of 2 3 4 the model runs; the static "
                             "srcnn-x3 only does 3)")
    BACKEND.add_parser_arguments(parser)
    parser.add_argument("--json", type=Path, metavar="FILE",
                        help="also write all numbers (per image too) to this JSON file")
    parser.add_argument("--images", nargs="+", choices=sample_images.HELD_OUT, metavar="NAME",
                        help=f"subset of the held-out images (default: all of {', '.join(sample_images.HELD_OUT)})")
    parser.add_argument("--precisions", nargs="+", default=[], choices=LOWER, metavar="P",
                        help="also say what bf16 / int8 cost on the held-out images: the Y-PSNR and SSIM loss of "
                             "the openvino backend at P against its fp32, measured once per model file and machine "
                             "(the record `sr --precision` and `auto` use)")


def run(args: argparse.Namespace) -> int:
    model = options.model_from_args(args)
    weights = BACKEND.parse(args).weights
    if args.json is not None:
        options.check_output_file(args.json, "--json")
    scales = args.scales or _default_scales(model)
    _check_some_scale_runs(model, scales)
    try:
        images = {n: sample_images.load_rgb(n) for n in args.images} if args.images else None
        result = evaluate(model, scales, weights, images=images,
                          progress=lambda line: print(line, file=sys.stderr, flush=True))
    except (WeightsError, ValueError) as e:
        raise PipelineError(str(e)) from None
    skipped = [r["skipped"] for r in result["scales"].values() if "skipped" in r]
    if len(skipped) == len(result["scales"]):
        raise PipelineError(skipped[0])
    print(format_table(result))
    losses = [_precision_loss(model, p, weights) for p in args.precisions]
    result["precisions"] = [r for r in losses if r is not None]
    if args.json:
        atomic_write(Path(args.json), json.dumps(result, indent=2, allow_nan=True) + "\n")
        print(f"wrote {args.json}")
    return 0


def _default_scales(model: str) -> list[float]:
    """Of 2 3 4, those the model runs (srcnn-x3: 3), so a plain `eval` prints no lines about scales it never asked
    for; given --scales, each one outside the range is said."""
    spec = resolve(model)
    runs = []
    for s in DEFAULT_SCALES:
        try:
            spec.check_scale(s)
        except ValueError:
            continue
        runs.append(float(s))
    return runs or list(DEFAULT_SCALES)


def _check_some_scale_runs(model: str, scales) -> None:
    """Before PyTorch loads: an error when no scale is in the model's range (one out of several is skipped, with
    its reason, as the default 2 3 4 on srcnn-x3)."""
    problems = []
    for scale in scales:
        try:
            resolve(model).check_scale(scale)
        except ValueError as e:
            problems.append(str(e))
    if len(problems) == len(scales):
        raise PipelineError(problems[0])


def _precision_loss(model: str, precision: str, weights) -> dict | None:
    """The measured held-out loss of `precision` on the backend `auto` runs it with here (printed, one line), or
    None when nothing runs it here."""
    try:
        backend = create("auto", model, precision, weights=weights)
        record = quality.precision_loss(backend, log=lambda line: print(line, file=sys.stderr, flush=True))
    except PipelineError as e:
        print(f"{precision}: not measured ({e})")
        return None
    if record is None:  # a backend that runs no model file: nothing is measured for it
        print(f"{backend.name} {precision}: not measured (it runs no model file)")
        return None
    print(f"{backend.name} {precision}: {quality.loss_line(record)}")
    return record
