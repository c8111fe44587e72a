"""Image-quality metrics as SR papers report them: PSNR and SSIM on the Y channel (ITU-R BT.601,
MATLAB `rgb2ycbcr` convention, Y in [16, 235]/255), after cropping `crop_border` pixels (the scale)
from every side (crop_border_for: the scale, rounded up). The metrics themselves are scikit-image's, imported on
first use: the backends import this package (through quality's loss records) and most runs never score an image.

Images are HxWx3 RGB, either uint8 or float in [0, 1].
"""
from __future__ import annotations

import math

import numpy as np

# Gaussian-window SSIM of Wang et al. 2004 (11 taps, sigma 1.5) needs this many pixels per side;
# smaller crops fall back to the largest odd uniform window that fits.
_GAUSSIAN_WINDOW = 11
_MIN_SSIM_SIDE = 3


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
    from skimage.color import rgb2ycbcr

    return rgb2ycbcr(_as_float_rgb(img, "image"))[..., 0] / 255.0


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
    from skimage.metrics import peak_signal_noise_ratio

    if np.array_equal(y_sr, y_hr):
        return math.inf  # skimage would divide by zero (with a warning) to get the same answer
    return float(peak_signal_noise_ratio(y_hr, y_sr, data_range=1.0))


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
    from skimage.metrics import structural_similarity

    y_sr, y_hr = _y_pair(sr, hr, crop_border)
    side = min(y_hr.shape)
    if side >= _GAUSSIAN_WINDOW:
        return float(structural_similarity(y_hr, y_sr, data_range=1.0, gaussian_weights=True, sigma=1.5,
                                           use_sample_covariance=False))
    if side < _MIN_SSIM_SIDE:
        raise ValueError(f"image {y_hr.shape[0]}x{y_hr.shape[1]} after cropping is too small for SSIM "
                         f"(needs at least {_MIN_SSIM_SIDE}x{_MIN_SSIM_SIDE})")
    win = side if side % 2 else side - 1
    return float(structural_similarity(y_hr, y_sr, data_range=1.0, win_size=win, use_sample_covariance=False))
