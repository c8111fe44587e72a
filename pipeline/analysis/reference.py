"""What the analyses compare against: held-out image crops and the PyTorch FP32 model's outputs on them.

models.registry (and with it torch) is imported inside the functions: only the reference side needs it.
"""
from __future__ import annotations

import numpy as np

from pipeline.artifacts.identity import resolve
from pipeline.data.sample_images import held_out_crops
from pipeline.errors import PipelineError


def compare_inputs(size: int = 96, names: tuple[str, ...] | None = None) -> dict[str, np.ndarray]:
    """The images compare and bench run: held-out photos centre-cropped to size x size."""
    return held_out_crops(size, names)


def _registry():
    """models.registry, imported on first use: it imports PyTorch, which compare's and bench's callers load only
    when they run a reference."""
    from models import registry  # imports PyTorch

    return registry


def load_net(model: str, weights=None):
    """models.registry.load_model with its weight errors as one-line PipelineErrors."""
    registry = _registry()
    try:
        return registry.load_model(model, weights)
    except registry.WeightsError as e:
        raise PipelineError(str(e)) from None


def reference_outputs(model: str, inputs: dict, scale: float, weights=None) -> dict[str, np.ndarray]:
    """PyTorch FP32 eager on CPU (models.registry.run) for each input."""
    import torch

    spec = resolve(model)
    net = load_net(model, weights)
    with torch.inference_mode():
        return {k: _registry().run(net, spec, torch.from_numpy(x), scale).numpy() for k, x in inputs.items()}
