"""`python -m pipeline eval`: Y-channel PSNR/SSIM of a model vs bicubic on the held-out images.

Each held-out image is degraded as in training (pipeline.degradation.make_pair), upscaled by bicubic
and by the model, both rounded to uint8, and scored against the HR image with the border cropped by
the scale (pipeline.metrics). `evaluate()` is reused by scripts/train.py for the model card.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import torch
from torch import nn

from models.registry import MODELS, WeightsError, file_sha256, get_spec, load_model, run as run_model
from .atomic import atomic_write
from .degradation import make_pair, to_tensor, to_uint8, upscale_bicubic
from .errors import PipelineError
from .metrics import psnr_y, ssim_y
from . import sample_images

DEFAULT_SCALES = (2.0, 3.0, 4.0)


def crop_border_for(scale: float) -> int:
    """Pixels cropped from each side before scoring: the scale, rounded up (SR-paper convention)."""
    return int(math.ceil(scale))


def _mean(values: list[float]) -> float:
    return float(np.mean(values)) if values else math.nan


def evaluate(model_name: str, scales=DEFAULT_SCALES, weights: str | Path | None = None, *,
             images: dict[str, np.ndarray] | None = None, model: nn.Module | None = None) -> dict:
    """Scores of bicubic and model `model_name` per scale (means and per image).

    `images` (name -> uint8 HxWx3 HR) defaults to the held-out set; `model` (already built, e.g. while
    training) overrides loading the shipped / `weights` file.
    """
    spec = get_spec(model_name)
    if model is None:
        path = Path(weights) if weights is not None else spec.weights_path
        model = load_model(model_name, path)
        weights_info = {"weights": str(path), "weights_sha256": file_sha256(path)}
    else:
        weights_info = {"weights": None, "weights_sha256": None}
    model.eval()
    images = sample_images.held_out() if images is None else images
    result = {"model": model_name, **weights_info, "images": list(images), "metric": "Y (BT.601) PSNR dB / SSIM, "
              "border cropped by ceil(scale), LR = antialiased bicubic downscale", "scales": {}}
    for scale in scales:
        key = f"{float(scale):g}"
        try:
            spec.check_scale(scale)
        except ValueError as e:
            result["scales"][key] = {"skipped": str(e)}
            continue
        crop = crop_border_for(scale)
        per_image = {}
        for name, hr_full in images.items():
            lr, hr = make_pair(hr_full, scale)
            bic = upscale_bicubic(lr, hr.shape[:2])
            with torch.no_grad():
                sr = to_uint8(run_model(model, spec, to_tensor(lr), scale))
            if sr.shape != hr.shape:  # a model whose size rule differs from the registry's would be wrong
                raise PipelineError(f"model '{model_name}' produced {sr.shape[:2]} for x{key}, expected {hr.shape[:2]}")
            per_image[name] = {
                "hr_size": list(hr.shape[:2]), "lr_size": list(lr.shape[:2]),
                "bicubic_psnr_y": psnr_y(bic, hr, crop), "model_psnr_y": psnr_y(sr, hr, crop),
                "bicubic_ssim_y": ssim_y(bic, hr, crop), "model_ssim_y": ssim_y(sr, hr, crop),
            }
        means = {k: _mean([v[k] for v in per_image.values()]) for k in
                 ("bicubic_psnr_y", "model_psnr_y", "bicubic_ssim_y", "model_ssim_y")}
        result["scales"][key] = {"crop_border": crop, **means,
                                 "psnr_gain_db": means["model_psnr_y"] - means["bicubic_psnr_y"],
                                 "per_image": per_image}
    return result


def format_table(result: dict) -> str:
    lines = [f"model {result['model']}" + (f"  weights {result['weights']} (sha256 {result['weights_sha256'][:12]})"
                                           if result["weights"] else ""),
             f"held-out images: {', '.join(result['images'])}  ({result['metric']})",
             f"{'scale':>6} {'bicubic PSNR':>13} {'model PSNR':>11} {'gain':>7} {'bicubic SSIM':>13} {'model SSIM':>11}"]
    for key, r in result["scales"].items():
        if "skipped" in r:
            lines.append(f"{'x' + key:>6}  not evaluated: {r['skipped']}")
            continue
        lines.append(f"{'x' + key:>6} {r['bicubic_psnr_y']:13.2f} {r['model_psnr_y']:11.2f} {r['psnr_gain_db']:+7.2f} "
                     f"{r['bicubic_ssim_y']:13.4f} {r['model_ssim_y']:11.4f}")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, choices=sorted(MODELS), help="registered model name")
    parser.add_argument("--scales", type=float, nargs="+", default=list(DEFAULT_SCALES),
                        help="upscale factors to evaluate (default: 2 3 4; the static srcnn-x3 only does 3)")
    parser.add_argument("--weights", type=Path, help="weight file to evaluate instead of the shipped one")
    parser.add_argument("--json", type=Path, help="also write all numbers (per image too) to this JSON file")
    parser.add_argument("--images", nargs="+", choices=sample_images.HELD_OUT, metavar="NAME",
                        help=f"subset of the held-out images (default: all of {', '.join(sample_images.HELD_OUT)})")


def run(args: argparse.Namespace) -> int:
    try:
        images = {n: sample_images.load_rgb(n) for n in args.images} if args.images else None
        result = evaluate(args.model, args.scales, args.weights, images=images)
    except (WeightsError, ValueError) as e:
        raise PipelineError(str(e)) from None
    skipped = [r["skipped"] for r in result["scales"].values() if "skipped" in r]
    if len(skipped) == len(result["scales"]):
        raise PipelineError(skipped[0])
    print(format_table(result))
    if args.json:
        atomic_write(Path(args.json), json.dumps(result, indent=2, allow_nan=True) + "\n")
        print(f"wrote {args.json}")
    return 0
