"""How low-resolution inputs are made from high-resolution images -- shared by training and eval so
both see exactly the same degradation.

LR = bicubic downscaling with antialiasing (torch `F.interpolate(..., antialias=True)`, as MATLAB
`imresize` / PIL do), quantised to uint8 like a real image file. The bicubic baseline (and the models'
own pre-upsampling) is plain bicubic upsampling, `F.interpolate(mode="bicubic", align_corners=False)`.

For a rational scale a/b with a small denominator (2.5 = 5/2, 3.25 = 13/4) the LR size is kept a
multiple of b so the HR crop is exactly scale x LR pixels and the two pixel grids line up.
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np

from models.spec import output_size

if TYPE_CHECKING:
    import torch

_MAX_DENOMINATOR = 8


def scale_denominator(scale: float) -> int:
    """b for scale = a/b exactly with b <= 8, else 1 (then grids align only approximately)."""
    frac = Fraction(scale).limit_denominator(_MAX_DENOMINATOR)
    return frac.denominator if abs(float(frac) - scale) < 1e-9 else 1


def to_tensor(img: np.ndarray) -> torch.Tensor:
    """uint8 HxWx3 -> float32 1x3xHxW in [0, 1]."""
    import torch  # PyTorch loads only where images are degraded (training, evaluation, sheets), not on import

    return torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1)[None].float().div_(255.0)


def to_uint8(t: torch.Tensor) -> np.ndarray:
    """float 1x3xHxW (any range) -> uint8 HxWx3, clipped and rounded like a saved image."""
    import torch  # see to_tensor

    return t[0].detach().clamp(0, 1).mul(255.0).round().to(torch.uint8).permute(1, 2, 0).numpy()


def downscale(img: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """uint8 HxWx3 -> uint8 of `size` (h, w) by antialiased bicubic."""
    import torch.nn.functional as F  # see to_tensor

    out = F.interpolate(to_tensor(img), size=size, mode="bicubic", align_corners=False, antialias=True)
    return to_uint8(out)


def upscale_bicubic(img: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """The bicubic baseline: uint8 HxWx3 -> uint8 of `size` (h, w)."""
    import torch.nn.functional as F  # see to_tensor

    return to_uint8(F.interpolate(to_tensor(img), size=size, mode="bicubic", align_corners=False))


def lr_size_for(height: int, width: int, scale: float) -> tuple[int, int]:
    """Largest LR size whose upscaled size fits in height x width (multiple of the scale's denominator)."""
    b = scale_denominator(scale)
    lh, lw = (max(b, math.floor(v / scale / b) * b) for v in (height, width))
    # guard against float round-off pushing the HR size past the image
    while output_size(lh, lw, scale)[0] > height and lh > b:
        lh -= b
    while output_size(lh, lw, scale)[1] > width and lw > b:
        lw -= b
    return lh, lw


def make_pair(hr: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """(LR, HR crop) for an HR uint8 image: HR is cropped (top-left) to output_size(LR size, scale)."""




    lh, lw = lr_size_for(hr.shape[0], hr.shape[1], scale)
    oh, ow = output_size(lh, lw, scale)
    if oh > hr.shape[0] or ow > hr.shape[1]:
        raise ValueError(f"image {hr.shape[0]}x{hr.shape[1]} is too small for scale {scale:g}")
    hr = np.ascontiguousarray(hr[:oh, :ow])
    return downscale(hr, (lh, lw)), hr
