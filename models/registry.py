"""The torch side of the model registry: build a registered net, load and check its weights, run it.

The torch-free facts (names, scale contract, weights file, receptive field) live in models.spec and are
re-exported here so torch-side code keeps one import.
"""
from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from .checkpoint_io import read_checkpoint, read_safetensors
from .fetched import FETCHED
from .fetched import problem as fetched_problem
from .lookup import get_spec
from .spec import (
    MODELS,
    OWN_MODELS,
    WEIGHTS_DIR,
    ModelError,
    ModelSpec,
    WeightsError,
    file_sha256,
    output_size,
    weights_path,
)

__all__ = ["MODELS", "OWN_MODELS", "WEIGHTS_DIR", "ModelError", "ModelSpec", "WeightsError", "adapt_mmagic_state_dict",
           "file_sha256", "get_spec", "load_model", "load_state_dict_file", "output_size", "read_checkpoint", "run",
           "size_tensor", "weights_path"]


def size_tensor(height: int, width: int, scale: float) -> torch.Tensor:
    """The int64 [2] (H_out, W_out) tensor run-time-factor models take."""
    return torch.tensor(output_size(height, width, scale), dtype=torch.int64)


def run(model: nn.Module, spec: ModelSpec, x: torch.Tensor, scale: float) -> torch.Tensor:
    """Run a registered model on NCHW float input at `scale` (checked against the spec)."""
    spec.check_scale(scale)
    if spec.dynamic_scale:
        return model(x, size_tensor(x.shape[-2], x.shape[-1], scale))
    return model(x)


def adapt_mmagic_state_dict(checkpoint: dict) -> dict[str, torch.Tensor]:
    """Keys of an mmagic/mmediting SRCNN checkpoint ('generator.conv1.weight', possibly under
    'state_dict') -> this package's keys ('conv1.weight'). Other entries (e.g. EMA copies) are dropped."""
    state = checkpoint.get("state_dict", checkpoint)
    prefix = "generator."
    adapted = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    return adapted or dict(state)


def load_state_dict_file(path: Path) -> dict[str, torch.Tensor]:
    path = Path(path)
    if not path.is_file():
        raise WeightsError(f"weights file not found: {path} (run `make train` to recreate the shipped weights)")
    if path.suffix.lower() == ".safetensors":  # fetched weights (models.fetched) or a user's file
        return read_safetensors(path)
    return adapt_mmagic_state_dict(read_checkpoint(path))


def load_model(name: str, weights: str | Path | None = None, device: str | torch.device = "cpu") -> nn.Module:
    """Build model `name`, load its shipped weights (or `weights`), eval mode, on `device`."""
    spec = get_spec(name)
    if spec.external is not None:  # a user's checkpoint/factory carries its weights
        if weights is not None and Path(weights).resolve() != spec.weights_path.resolve():
            raise WeightsError(f"--weights does not apply to {name}: a checkpoint or factory brings its own weights")
        return spec.build().eval().to(device)
    if weights is None and spec.name in FETCHED and (why := fetched_problem(spec.name)):
        raise WeightsError(why)  # missing or damaged: one line saying how to fetch it
    model = spec.build()
    path = weights_path(spec, weights)
    state = load_state_dict_file(path)
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    bad_shapes = [k for k in expected if k in state and tuple(state[k].shape) != tuple(expected[k].shape)]
    if missing or unexpected or bad_shapes:
        parts = []
        if missing:
            parts.append(f"missing keys {missing[:4]}")
        if unexpected:
            parts.append(f"unexpected keys {unexpected[:4]}")
        if bad_shapes:
            k = bad_shapes[0]
            parts.append(f"shape of {k} is {tuple(state[k].shape)}, expected {tuple(expected[k].shape)}")
        raise WeightsError(f"weights file {path} does not fit model '{name}': " + "; ".join(parts))
    model.load_state_dict(state)
    return model.eval().to(device)
