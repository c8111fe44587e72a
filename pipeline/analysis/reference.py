"""What the analyses compare against: held-out image crops and the PyTorch FP32 model's outputs on them.

models.registry (and with it torch) is imported inside the functions: only the reference side needs it.
"""
from __future__ import annotations

import numpy as np

from pipeline.data.sample_images import HELD_OUT, load_rgb
from pipeline.errors import PipelineError


def compare_inputs(size: int = 96, names: tuple[str, ...] | None = None) -> dict[str, np.ndarray]:
    """Held-out skimage photos, centre-cropped to size x size, as float32 [1, 3, H, W] in [0, 1]."""
    out = {}
    for name in names or HELD_OUT:
        img = load_rgb(name)
        h, w = img.shape[:2]
        s = min(size, h, w)
        y0, x0 = (h - s) // 2, (w - s) // 2
        crop = img[y0:y0 + s, x0:x0 + s]
        out[name] = np.ascontiguousarray(crop.transpose(2, 0, 1)[None], dtype=np.float32) / 255.0
    return out


def load_net(model: str, weights=None):
    """models.registry.load_model with its weight errors as one-line PipelineErrors."""
    from models.registry import WeightsError, load_model

    try:
        return load_model(model, weights)
    except WeightsError as e:
        raise PipelineError(str(e)) from None


def reference_outputs(model: str, inputs: dict, scale: float, weights=None) -> dict[str, np.ndarray]:
    """PyTorch FP32 eager on CPU (models.registry.run) for each input."""
    import torch

    from models.registry import get_spec, run

    spec = get_spec(model)
    net = load_net(model, weights)
    with torch.inference_mode():
        return {k: run(net, spec, torch.from_numpy(x), scale).numpy() for k, x in inputs.items()}
