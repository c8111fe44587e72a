"""The offline image set: disjoint lists, RGB uint8, fresh copies."""
import numpy as np
import pytest

from pipeline.data import sample_images as si


def test_lists_disjoint_and_cat_alias_excluded():
    assert not set(si.TRAIN) & set(si.HELD_OUT)
    assert "cat" not in si.TRAIN  # skimage.data.cat is chelsea, a held-out image
    assert {"astronaut", "coffee", "chelsea", "rocket"} <= set(si.HELD_OUT)


@pytest.mark.parametrize("name", ["astronaut", "camera", "logo", "stereo_motorcycle"])
def test_load_rgb_uint8_hw3(name):
    img = si.load_rgb(name)
    assert img.dtype == np.uint8 and img.ndim == 3 and img.shape[2] == 3 and min(img.shape[:2]) >= 64
    img[:] = 0  # a copy: the cache is unaffected
    assert si.load_rgb(name).any()


def test_gray_becomes_equal_channels_and_unknown_name():
    cam = si.load_rgb("camera")
    assert (cam[..., 0] == cam[..., 1]).all() and (cam[..., 1] == cam[..., 2]).all()
    with pytest.raises(KeyError, match="unknown sample image"):
        si.load_rgb("cat")
    assert list(si.held_out()) == list(si.HELD_OUT)
