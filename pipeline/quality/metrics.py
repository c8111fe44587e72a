"""Image-quality metrics as SR papers report them: PSNR and SSIM on the Y channel (ITU-R BT.601,
MATLAB `rgb2ycbcr` convention, Y in [16, 235]/255), after cropping `crop_border` pixels (the scale)
from every side (crop_border_for: the scale, rounded up). The metrics are scikit-image's formulas (its rgb2ycbcr,
peak_signal_noise_ratio and structural_similarity with the same windows, within 1e-12), computed here with numpy and
OpenCV's filters: scikit-image's pull in SciPy, whose OpenBLAS hung or died under a 4 GiB address-space limit
(issue 67), and a first run of `sr` scores images (the model's gain over bicubic).

Images are HxWx3 RGB, either uint8 or float in [0, 1].
"""
from __future__ import annotations

import math

import cv2
import numpy as np

# Gaussian-window SSIM of Wang et al. 2004 (11 taps, sigma 1.5) needs this many pixels per side;
# smaller crops fall back to the largest odd uniform window that fits.
_GAUSSIAN_WINDOW = 11
_MIN_SSIM_SIDE = 3
_SIGMA, _TRUNCATE = 1.5, 3.5  # scipy's gaussian_filter as skimage calls it: radius int(3.5 * 1.5 + 0.5) = 5
_Y_FROM_RGB = np.array([65.481, 128.553, 24.966])  # skimage's ycbcr_from_rgb, first row (Y = 16 + ... on [0, 1])


def crop_border_for(scale: float) -> int:
    """Gives the pixels cropped from each side before scoring: the scale, rounded up (SR-paper convention).

    Args:
        scale: the upscaling factor.

    Returns:
        The border in pixels.
    """
    return int(math.ceil(scale))


def _as_float_rgb(img: np.ndarray, what: str) -> np.ndarray:
    img = np.asarray(img)
    if img.ndim != 3 or img.shape[2] != 3:
        raise ValueError(f"{what} must be an HxWx3 RGB image, got shape {img.shape}")
    if img.dtype == np.uint8:
        return img.astype(np.float64) / 255.0
    if np.issubdtype(img.dtype, np.floating):
        return img.astype(np.float64)
    raise ValueError(f"{what} must be uint8 or float in [0, 1], got {img.dtype}")


def rgb_to_y(img: np.ndarray) -> np.ndarray:
    """BT.601 luma of an RGB image (uint8 or float in [0,1]) as float64 HxW in [16/255, 235/255]."""
    return (_as_float_rgb(img, "image") @ _Y_FROM_RGB + 16.0) / 255.0


def _y_pair(sr: np.ndarray, hr: np.ndarray, crop_border: int) -> tuple[np.ndarray, np.ndarray]:
    sr, hr = np.asarray(sr), np.asarray(hr)
    if sr.shape != hr.shape:
        raise ValueError(f"image shapes differ: {sr.shape} vs reference {hr.shape}")
    c = int(crop_border)
    if c < 0:
        raise ValueError(f"crop_border must be >= 0, got {crop_border}")
    h, w = hr.shape[:2]
    if h <= 2 * c or w <= 2 * c:
        raise ValueError(f"image {h}x{w} is too small to crop a border of {c} px from each side")
    y_sr, y_hr = rgb_to_y(sr), rgb_to_y(hr)
    if c:
        y_sr, y_hr = y_sr[c:-c, c:-c], y_hr[c:-c, c:-c]
    return y_sr, y_hr


def psnr_y(sr: np.ndarray, hr: np.ndarray, crop_border: int) -> float:
    """Computes the Y-channel PSNR of `sr` against the reference `hr`.

    Args:
        sr: the image scored, HxWx3 RGB (uint8, or float in [0, 1]).
        hr: the reference, the same shape.
        crop_border: pixels cropped from each side first (crop_border_for).

    Returns:
        The PSNR in dB; inf when the two are identical.

    Raises:
        ValueError: for images that are not HxWx3 or whose shapes differ.
    """
    y_sr, y_hr = _y_pair(sr, hr, crop_border)
    if np.array_equal(y_sr, y_hr):
        return math.inf
    mse = np.mean((y_hr - y_sr) ** 2, dtype=np.float64)
    return float(10 * np.log10(1.0 / mse))


def ssim_y(sr: np.ndarray, hr: np.ndarray, crop_border: int) -> float:
    """Computes the Y-channel SSIM of `sr` against `hr` (Gaussian 11x11, sigma 1.5, as Wang et al. 2004).

    Args:
        sr: the image scored, HxWx3 RGB (uint8, or float in [0, 1]).
        hr: the reference, the same shape.
        crop_border: pixels cropped from each side first (crop_border_for).

    Returns:
        The SSIM, at most 1.

    Raises:
        ValueError: for images that are not HxWx3 or whose shapes differ.
    """
    y_sr, y_hr = _y_pair(sr, hr, crop_border)
    side = min(y_hr.shape)
    if side >= _GAUSSIAN_WINDOW:
        radius = int(_TRUNCATE * _SIGMA + 0.5)
        k = cv2.getGaussianKernel(2 * radius + 1, _SIGMA, cv2.CV_64F)
        return _ssim(y_hr, y_sr, lambda a: cv2.sepFilter2D(a, cv2.CV_64F, k, k, borderType=cv2.BORDER_REFLECT),
                     _GAUSSIAN_WINDOW)
    if side < _MIN_SSIM_SIDE:
        raise ValueError(f"image {y_hr.shape[0]}x{y_hr.shape[1]} after cropping is too small for SSIM "
                         f"(needs at least {_MIN_SSIM_SIDE}x{_MIN_SSIM_SIDE})")
    win = side if side % 2 else side - 1
    return _ssim(y_hr, y_sr, lambda a: cv2.blur(a, (win, win), borderType=cv2.BORDER_REFLECT), win)


def _ssim(x: np.ndarray, y: np.ndarray, window, win: int) -> float:
    """skimage's structural_similarity (data range 1, population covariances): the local SSIM map's mean, a
    window's half cropped from each side. `window` filters an image with the window (scipy's reflect border)."""
    c1, c2 = 0.01 ** 2, 0.03 ** 2
    x, y = np.ascontiguousarray(x, np.float64), np.ascontiguousarray(y, np.float64)
    ux, uy = window(x), window(y)
    vx, vy, vxy = window(x * x) - ux * ux, window(y * y) - uy * uy, window(x * y) - ux * uy
    s = ((2 * ux * uy + c1) * (2 * vxy + c2)) / ((ux * ux + uy * uy + c1) * (vx + vy + c2))
    pad = (win - 1) // 2
    return float(s[pad:s.shape[0] - pad, pad:s.shape[1] - pad].mean(dtype=np.float64))
