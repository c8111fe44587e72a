"""Sample layouts of decoded pictures, converted the one way every reader of our outputs converts them: 16-bit
samples to 8-bit, gray to RGB, OpenCV's BGR(A) to RGB. The sr stage writes 16-bit outputs as 8-bit through
to_8bit; analysis's crop sheets, preview's fidelity and its video frames see the same samples.

(Floats in [0, 1] and back are pipeline.backends.pixels' rule: what models take and give.)
"""
from __future__ import annotations

import numpy as np


def to_8bit(pixels: np.ndarray) -> np.ndarray:
    """uint16 samples as uint8, rounded to nearest (65535 -> 255: 257 is the exact ratio between the two full
    scales); uint8 samples unchanged (the same array)."""
    if pixels.dtype != np.uint16:
        return pixels
    return ((pixels.astype(np.uint32) + 128) // 257).astype(np.uint8)


def gray_to_rgb(pixels: np.ndarray) -> np.ndarray:
    """HxW gray as HxWx3, the gray value in each channel (a new array); HxWxC unchanged."""
    if pixels.ndim != 2:
        return pixels
    return np.repeat(pixels[:, :, None], 3, axis=2)


def to_rgb8(pixels: np.ndarray) -> np.ndarray:
    """A decoded picture (HxW gray, HxWx3 BGR or HxWx4 BGRA; 8 or 16 bits) as contiguous uint8 HxWx3 RGB, alpha
    dropped."""
    p = to_8bit(pixels)
    if p.ndim == 2:
        return gray_to_rgb(p)
    return np.ascontiguousarray(p[:, :, 2::-1])
