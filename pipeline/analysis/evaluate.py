"""`python -m pipeline eval`: Y-channel PSNR/SSIM of a model vs bicubic on the held-out images.

Each held-out image is degraded as in training (pipeline.data.degradation.make_pair), upscaled by bicubic
and by the model, both rounded to uint8, and scored against the HR image with the border cropped by
the scale (pipeline.quality.metrics). `evaluate()` is reused by scripts/train.py for the model card.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

from pipeline.artifacts.identity import resolve
from pipeline.data import sample_images
from pipeline.data.degradation import make_pair, to_tensor, to_uint8, upscale_bicubic
from pipeline.errors import PipelineError
from pipeline.quality.metrics import crop_border_for, psnr_y, ssim_y

DEFAULT_SCALES = (2.0, 3.0, 4.0)
# Said beside a GAN model's scores: they are measured and reported as they are, but they are not its aim.
GAN_NOTE = ("a GAN model (Real-ESRGAN): it is trained to look real (perceptual and adversarial losses, its own "
            "degradations), not to match the original pixel for pixel, so PSNR/SSIM below bicubic's are expected "
            "and do not say it is worse to the eye")


def _mean(values: list[float]) -> float:
    return float(np.mean(values)) if values else math.nan


def evaluate(model_name: str, scales=DEFAULT_SCALES, weights: str | Path | None = None, *,
             images: dict[str, np.ndarray] | None = None, model=None,
             progress: Callable[[str], object] | None = None) -> dict:
    """Scores of bicubic and model `model_name` per scale (means and per image).

    `images` (name -> uint8 HxWx3 HR) defaults to the held-out set; `model` (an nn.Module already built, e.g.
    while training) overrides loading the shipped / `weights` file. `progress` gets one line per image scored.
    """
    # PyTorch and the registry load here, not at import: `eval --help` stays fast
    import torch

    from models import registry  # the registry imports PyTorch (loaded above)

    spec = resolve(model_name)
    if model is None:
        path = Path(weights) if weights is not None else spec.weights_path
        model = registry.load_model(model_name, path)
        weights_info = {"weights": str(path), "weights_sha256": registry.file_sha256(path)}
    else:
        weights_info = {"weights": None, "weights_sha256": None}
    model.eval()
    images = sample_images.held_out() if images is None else images
    result = {"model": model_name, **weights_info, "images": list(images), "metric": "Y (BT.601) PSNR dB / SSIM, "
              "border cropped by ceil(scale), LR = antialiased bicubic downscale", "scales": {}}
    if not spec.aims_at_psnr:
        result["note"] = GAN_NOTE
    for scale in scales:
        key = f"{float(scale):g}"
        try:
            spec.check_scale(scale)
        except ValueError as e:
            result["scales"][key] = {"skipped": str(e)}
            continue
        crop = crop_border_for(scale)
        per_image = {}
        for i, (name, hr_full) in enumerate(images.items(), 1):
            if progress is not None:
                progress(f"eval {model_name} x{key}: {name} ({i}/{len(images)})")
            lr, hr = make_pair(hr_full, scale)
            bic = upscale_bicubic(lr, hr.shape[:2])
            with torch.no_grad():
                sr = to_uint8(registry.run(model, spec, to_tensor(lr), scale))
            if sr.shape != hr.shape:  # a model whose size rule differs from the registry's would be wrong
                raise PipelineError(f"model '{model_name}' produced {sr.shape[:2]} for x{key}, "
                                    f"expected {hr.shape[:2]}")
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
    weights = f"  weights {result['weights']} (sha256 {result['weights_sha256'][:12]})" if result["weights"] else ""
    lines = [f"model {result['model']}{weights}",
             f"held-out images: {', '.join(result['images'])}  ({result['metric']})",
             f"{'scale':>6} {'bicubic PSNR':>13} {'model PSNR':>11} {'gain':>7} {'bicubic SSIM':>13} "
             f"{'model SSIM':>11}"]
    for key, r in result["scales"].items():
        if "skipped" in r:
            lines.append(f"{'x' + key:>6}  not evaluated: {r['skipped']}")
            continue
        lines.append(f"{'x' + key:>6} {r['bicubic_psnr_y']:13.2f} {r['model_psnr_y']:11.2f} {r['psnr_gain_db']:+7.2f} "
                     f"{r['bicubic_ssim_y']:13.4f} {r['model_ssim_y']:11.4f}")
    if result.get("note"):
        lines.append(f"note: {result['note']}")
    return "\n".join(lines)


