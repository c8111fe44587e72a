"""Scores against ground truth (`--reference HR_DIR`): PSNR/SSIM-Y of the output and of plain bicubic."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from pipeline.errors import first_line
from pipeline.images import imageio
from pipeline.images.bicubic import bicubic
from pipeline.images.imageio import Image, ImageError
from pipeline.images.pixels import gray_to_rgb
from pipeline.quality.metrics import psnr_y, ssim_y
from pipeline.sr.runner.records import MISSING


def bicubic_pixels(image: Image, out_h: int, out_w: int) -> np.ndarray:
    """Plain bicubic upscale of the whole image (the baseline), in the output-buffer layout."""
    y = bicubic(image.region_rgb(0, image.height, 0, image.width), (out_h, out_w))
    out = imageio.new_output(out_h, out_w, 1 if image.gray else 3, image.depth)
    imageio.store_rgb(out, 0, 0, y, image.depth)
    return out


def _rgb_float(pixels: np.ndarray) -> np.ndarray:
    """Output-buffer layout (gray / BGR / BGRA, uint8/16) -> HxWx3 RGB float64 in [0, 1] for metrics."""
    maxv = 65535.0 if pixels.dtype == np.uint16 else 255.0
    return gray_to_rgb(pixels)[:, :, 2::-1].astype(np.float64) / maxv


def find_reference(ref_dir: Path, rel: str) -> Path | None:
    """The HR file for an input: the same relative path, or the same stem with any image extension."""
    exact = ref_dir / rel
    if exact.is_file():
        return exact
    stem = Path(rel).with_suffix("")
    for ext in imageio.FORMATS:
        p = ref_dir / stem.with_suffix(ext)
        if p.is_file():
            return p
    return None


def reference_metrics(ref_dir: Path, rel: str, sr: np.ndarray, image: Image, scale: float) -> dict:
    """PSNR/SSIM-Y of the output and of bicubic against the HR file, or {'reference': why not}."""
    path = find_reference(ref_dir, rel)
    if path is None:
        return {"reference": MISSING}
    try:
        hr = imageio.read_image(path).pixels
    except ImageError as e:
        return {"reference": f"unreadable: {e}"}
    hr = hr[:, :, :3] if hr.ndim == 3 else hr
    h, w = sr.shape[:2]
    # HR sides that are not multiples of the scale lose up to `scale` pixels when downscaled: crop them.
    if not (0 <= hr.shape[0] - h <= math.ceil(scale) and 0 <= hr.shape[1] - w <= math.ceil(scale)):
        return {"reference": f"size {hr.shape[1]}x{hr.shape[0]} does not match the output {w}x{h}"}
    hr_f = _rgb_float(np.ascontiguousarray(hr[:h, :w]))
    sr_f = _rgb_float(sr[:, :, :3] if sr.ndim == 3 else sr)
    bic_f = _rgb_float(bicubic_pixels(image, h, w))
    border = math.ceil(scale)
    try:
        return {"reference": str(path), "psnr": psnr_y(sr_f, hr_f, border), "ssim": ssim_y(sr_f, hr_f, border),
                "psnr_bicubic": psnr_y(bic_f, hr_f, border), "ssim_bicubic": ssim_y(bic_f, hr_f, border)}
    except ValueError as e:
        return {"reference": first_line(e)}
