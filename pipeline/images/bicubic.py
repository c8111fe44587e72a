"""Plain bicubic upscaling without PyTorch: alpha planes and the `--reference` baseline.

OpenCV's INTER_CUBIC upscaling is the kernel of the models' own resize and of torch's
F.interpolate(mode="bicubic", align_corners=False): Keys' cubic with A = -0.75, half-pixel centres,
edge samples repeated (tests/test_sr_bicubic.py checks it within 1e-5).
"""
from __future__ import annotations

import cv2
import numpy as np


def bicubic(x: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """float32 HW or CHW -> the same layout at size (height, width); for upscaling (no antialiasing)."""
    h, w = size
    x = np.asarray(x, dtype=np.float32)
    if x.ndim == 2:
        return cv2.resize(np.ascontiguousarray(x), (w, h), interpolation=cv2.INTER_CUBIC)
    # OpenCV takes channels last and drops a trailing axis of 1
    y = cv2.resize(np.ascontiguousarray(x.transpose(1, 2, 0)), (w, h), interpolation=cv2.INTER_CUBIC)
    return np.ascontiguousarray(y.reshape(h, w, -1).transpose(2, 0, 1))
