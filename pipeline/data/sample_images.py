"""The offline image set every stage uses: images scikit-image ships (`skimage.data`), no downloads.

TRAIN and HELD_OUT are disjoint (note `skimage.data.cat` is `chelsea`, so it is in neither list).
Training cuts patches from TRAIN only; evaluation (PSNR/SSIM) uses HELD_OUT only.
Gray images are replicated to 3 channels; RGBA images are composited on white.
"""
from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import numpy as np
from PIL import Image

# Held-out colour photographs: evaluation only, never trained on.
HELD_OUT: tuple[str, ...] = ("astronaut", "coffee", "chelsea", "rocket")

# Training images: colour photos/micrographs plus natural gray photos and textures (as RGB).
TRAIN: tuple[str, ...] = (
    "stereo_motorcycle",  # left view of the stereo pair
    "hubble_deep_field",
    "immunohistochemistry",
    "retina",
    "colorwheel",
    "logo",  # RGBA, composited on white
    "camera",
    "moon",
    "coins",
    "clock",
    "grass",
    "gravel",
    "brick",
    "cell",
    "page",
    "text",
)

assert not set(TRAIN) & set(HELD_OUT)


# Held-out photos read from their files with Pillow (what skimage.data reads them with): skimage.data imports
# skimage.color, which runs SciPy's OpenBLAS on import and hung or died under a 4 GiB address-space limit (issue 67)
FILES = {"astronaut": "astronaut.png", "coffee": "coffee.png", "chelsea": "chelsea.png", "rocket": "rocket.jpg"}


def _file(name: str) -> Path | None:
    spec = importlib.util.find_spec("skimage")
    if name not in FILES or spec is None or not spec.submodule_search_locations:
        return None
    path = Path(spec.submodule_search_locations[0]) / "data" / FILES[name]
    return path if path.is_file() else None


def _read(name: str):
    path = _file(name)
    if path is not None:
        with Image.open(path) as im:
            return np.asarray(im)
    import skimage.data  # the training images (some are made, not read): only for training and tests

    return getattr(skimage.data, name)()


@functools.cache
def _load(name: str) -> np.ndarray:
    if name not in TRAIN and name not in HELD_OUT:
        raise KeyError(f"unknown sample image '{name}' (known: {', '.join(HELD_OUT + TRAIN)})")
    img = _read(name)
    if isinstance(img, tuple):  # stereo_motorcycle -> (left, right, disparity)
        img = img[0]
    img = np.asarray(img)
    if img.dtype != np.uint8:
        raise TypeError(f"sample image '{name}' is {img.dtype}, expected uint8")
    if img.ndim == 2:
        img = np.repeat(img[:, :, None], 3, axis=2)
    elif img.shape[2] == 4:
        rgb, alpha = img[:, :, :3].astype(np.float32), img[:, :, 3:4].astype(np.float32) / 255.0
        img = np.clip(rgb * alpha + 255.0 * (1.0 - alpha) + 0.5, 0, 255).astype(np.uint8)
    img = np.ascontiguousarray(img[:, :, :3])
    img.flags.writeable = False  # cached: callers get copies
    return img


def load_rgb(name: str) -> np.ndarray:
    """Sample image `name` as a fresh uint8 HxWx3 RGB array."""
    return _load(name).copy()


def held_out() -> dict[str, np.ndarray]:
    """name -> uint8 HxWx3 for every held-out (evaluation) image, in HELD_OUT order."""
    return {n: load_rgb(n) for n in HELD_OUT}


def train() -> dict[str, np.ndarray]:
    """name -> uint8 HxWx3 for every training image, in TRAIN order."""
    return {n: load_rgb(n) for n in TRAIN}


def held_out_crops(size: int, names: tuple[str, ...] | None = None) -> dict[str, np.ndarray]:
    """Held-out photos centre-cropped to size x size (or their shorter side), float32 [1, 3, H, W] in [0, 1]."""
    out = {}
    for name in names or HELD_OUT:
        img = _load(name)
        h, w = img.shape[:2]
        s = min(size, h, w)
        y0, x0 = (h - s) // 2, (w - s) // 2
        crop = img[y0:y0 + s, x0:x0 + s]
        out[name] = np.ascontiguousarray(crop.transpose(2, 0, 1)[None], dtype=np.float32) / 255.0
    return out
