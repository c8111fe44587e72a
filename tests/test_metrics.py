"""Y-channel PSNR/SSIM with border crop: edge cases and agreement with direct scikit-image calls."""
import math

import numpy as np
import pytest
from skimage.metrics import peak_signal_noise_ratio, structural_similarity

from pipeline.quality.metrics import psnr_y, rgb_to_y, ssim_y


def _pair(h=40, w=50, noise=6, seed=0):
    rng = np.random.default_rng(seed)
    hr = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    sr = np.clip(hr.astype(int) + rng.integers(-noise, noise + 1, hr.shape), 0, 255).astype(np.uint8)
    return sr, hr


def test_rgb_to_y_bt601_known_values():
    img = np.array([[[0, 0, 0], [255, 255, 255], [255, 0, 0], [0, 255, 0], [0, 0, 255]]], dtype=np.uint8)
    y = rgb_to_y(img)[0] * 255
    np.testing.assert_allclose(y, [16.0, 235.0, 16 + 65.481, 16 + 128.553, 16 + 24.966], atol=1e-6)
    # uint8 and float [0,1] inputs agree
    np.testing.assert_allclose(rgb_to_y(img), rgb_to_y(img / 255.0), atol=1e-12)


def test_identical_images_give_infinite_psnr_and_unit_ssim():
    _, hr = _pair()
    assert psnr_y(hr, hr.copy(), 3) == math.inf
    assert ssim_y(hr, hr.copy(), 3) == pytest.approx(1.0)


def test_psnr_matches_direct_skimage_on_cropped_y():
    sr, hr = _pair()
    c = 4
    y_sr, y_hr = rgb_to_y(sr)[c:-c, c:-c], rgb_to_y(hr)[c:-c, c:-c]
    expected = peak_signal_noise_ratio(y_hr, y_sr, data_range=1.0)
    assert psnr_y(sr, hr, c) == pytest.approx(expected, abs=1e-9)
    # known value from the definition: 10 log10(1 / mse)
    assert psnr_y(sr, hr, c) == pytest.approx(10 * math.log10(1.0 / np.mean((y_sr - y_hr) ** 2)), abs=1e-9)
    # the crop matters: corrupting only the border leaves cropped PSNR unchanged
    sr2 = sr.copy()
    sr2[:c] = 0
    assert psnr_y(sr2, hr, c) == pytest.approx(psnr_y(sr, hr, c))
    assert psnr_y(sr2, hr, 0) < psnr_y(sr, hr, 0)


def test_ssim_matches_direct_skimage_gaussian():
    sr, hr = _pair(seed=1)
    c = 2
    y_sr, y_hr = rgb_to_y(sr)[c:-c, c:-c], rgb_to_y(hr)[c:-c, c:-c]
    expected = structural_similarity(y_hr, y_sr, data_range=1.0, gaussian_weights=True, sigma=1.5,
                                     use_sample_covariance=False)
    assert ssim_y(sr, hr, c) == pytest.approx(expected, abs=1e-12)
    assert 0 < ssim_y(sr, hr, c) < 1


@pytest.mark.parametrize("shape", [(6, 6), (4, 9)])
def test_images_smaller_than_crop_border_raise_one_line(shape):
    sr, hr = _pair(*shape)
    for fn in (psnr_y, ssim_y):
        with pytest.raises(ValueError, match="too small to crop a border of 3") as e:
            fn(sr, hr, 3)
        assert "\n" not in str(e.value)


def test_tiny_images_ssim_uses_window_that_fits():
    sr, hr = _pair(9, 12, seed=2)  # 7x10 after crop 1: below the 11-px Gaussian window
    y_sr, y_hr = rgb_to_y(sr)[1:-1, 1:-1], rgb_to_y(hr)[1:-1, 1:-1]
    expected = structural_similarity(y_hr, y_sr, data_range=1.0, win_size=7, use_sample_covariance=False)
    assert ssim_y(sr, hr, 1) == pytest.approx(expected)
    sr, hr = _pair(2, 2)
    assert math.isfinite(psnr_y(sr, hr, 0))
    with pytest.raises(ValueError, match="too small for SSIM"):
        ssim_y(sr, hr, 0)


def test_mismatched_shapes_and_bad_inputs():
    sr, hr = _pair()
    with pytest.raises(ValueError, match="shapes differ"):
        psnr_y(sr[:-1], hr, 2)
    with pytest.raises(ValueError, match="HxWx3"):
        psnr_y(sr[..., 0], hr[..., 0], 2)
