"""LR/HR pair making shared by training and eval: sizes, grid alignment, bicubic conventions."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from models.registry import output_size
from pipeline.data.degradation import (
    downscale,
    lr_size_for,
    make_pair,
    scale_denominator,
    to_tensor,
    to_uint8,
    upscale_bicubic,
)


def _img(h, w, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


@pytest.mark.parametrize("scale,den", [(2, 1), (3.0, 1), (2.5, 2), (3.25, 4), (2.3, 1), (np.pi, 1)])
def test_scale_denominator(scale, den):
    assert scale_denominator(scale) == den


@pytest.mark.parametrize("hw", [(300, 451), (97, 64), (26, 17)])
@pytest.mark.parametrize("scale", [2, 2.5, 3, 3.25, 4, 2.3])
def test_make_pair_sizes(hw, scale):
    lr, hr = make_pair(_img(*hw), scale)
    assert hr.shape[:2] == output_size(lr.shape[0], lr.shape[1], scale)
    assert hr.shape[0] <= hw[0] and hr.shape[1] <= hw[1]
    assert lr.dtype == hr.dtype == np.uint8
    b = scale_denominator(scale)
    assert lr.shape[0] % b == 0 and lr.shape[1] % b == 0
    if b > 1 or float(scale).is_integer():  # exact grids: HR is exactly scale x LR
        assert hr.shape[0] == lr.shape[0] * scale and hr.shape[1] == lr.shape[1] * scale


def test_make_pair_integer_scale_is_modcrop_and_keeps_input():
    img = _img(100, 131)
    before = img.copy()
    lr, hr = make_pair(img, 3)
    assert lr.shape == (33, 43, 3) and hr.shape == (99, 129, 3)
    np.testing.assert_array_equal(hr, img[:99, :129])
    np.testing.assert_array_equal(img, before)


def test_downscale_is_antialiased_bicubic_and_constant_preserving():
    flat = np.full((40, 40, 3), 77, np.uint8)
    np.testing.assert_array_equal(downscale(flat, (10, 10)), np.full((10, 10, 3), 77, np.uint8))
    img = _img(40, 40)
    ref = F.interpolate(to_tensor(img), size=(10, 10), mode="bicubic", align_corners=False, antialias=True)
    np.testing.assert_array_equal(downscale(img, (10, 10)), to_uint8(ref))
    # antialiasing averages noise away; plain bicubic sampling would not
    assert downscale(img, (10, 10)).astype(float).std() < 0.5 * img.astype(float).std()


def test_upscale_bicubic_matches_model_pre_upsampling():
    img = _img(7, 9)
    ref = F.interpolate(to_tensor(img), size=(21, 27), mode="bicubic", align_corners=False)
    np.testing.assert_array_equal(upscale_bicubic(img, (21, 27)), to_uint8(ref))
    t = torch.tensor([[-0.2, 0.5, 1.3]]).view(1, 3, 1, 1)
    assert to_uint8(t).ravel().tolist() == [0, 128, 255]


def test_lr_size_for_too_small_image():
    assert lr_size_for(3, 3, 4) == (1, 1)
    with pytest.raises(ValueError, match="too small for scale 4"):
        make_pair(_img(3, 3), 4)
