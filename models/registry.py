"""Model registry: name -> constructor, shipped weights and scale contract. Every stage uses it."""
from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from .deform_srcnn import DeformSRCNN
from .srcnn import SRCNN

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"


class WeightsError(RuntimeError):
    """A weight file is missing, unreadable or does not fit the model; the message is one line."""


@dataclass(frozen=True)
class ModelSpec:
    name: str
    build: Callable[[], nn.Module]
    weights_file: str
    default_scale: float
    # Scales the model accepts (inclusive); a static model accepts only its own factor.
    scale_range: tuple[float, float]
    dynamic_scale: bool
    description: str

    @property
    def weights_path(self) -> Path:
        return WEIGHTS_DIR / self.weights_file

    def check_scale(self, scale: float) -> float:
        scale = float(scale)
        lo, hi = self.scale_range
        if not math.isfinite(scale) or not (lo <= scale <= hi) or scale <= 1.0:
            allowed = f"exactly {lo:g}" if lo == hi else f"in [{lo:g}, {hi:g}] and > 1"
            raise ValueError(f"scale {scale:g} is out of range for model '{self.name}' (allowed: {allowed})")
        return scale


MODELS: dict[str, ModelSpec] = {
    s.name: s
    for s in (
        ModelSpec("srcnn", SRCNN, "srcnn.pt", 3.0, (1.0, 8.0), True,
                  "SRCNN, upscale factor chosen at run time (trained on x2-x4)"),
        ModelSpec("srcnn-x3", lambda: SRCNN(upscale_factor=3), "srcnn-x3.pt", 3.0, (3.0, 3.0), False,
                  "SRCNN with a fixed x3 nn.Upsample (the classic tutorial's model)"),
        ModelSpec("deform-srcnn", DeformSRCNN, "deform-srcnn.pt", 3.0, (1.0, 8.0), True,
                  "SRCNN with a modulated deformable conv (DCNv2) in the middle, run-time factor"),
    )
}


def get_spec(name: str) -> ModelSpec:
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"unknown model '{name}' (known: {', '.join(MODELS)})") from None


def output_size(height: int, width: int, scale: float) -> tuple[int, int]:
    """Output size for an input size and scale: round half up, at least 1 pixel."""
    return max(1, math.floor(height * scale + 0.5)), max(1, math.floor(width * scale + 0.5))


def size_tensor(height: int, width: int, scale: float) -> torch.Tensor:
    """The int64 [2] (H_out, W_out) tensor run-time-factor models take."""
    return torch.tensor(output_size(height, width, scale), dtype=torch.int64)


def run(model: nn.Module, spec: ModelSpec, x: torch.Tensor, scale: float) -> torch.Tensor:
    """Run a registered model on NCHW float input at `scale` (checked against the spec)."""
    spec.check_scale(scale)
    if spec.dynamic_scale:
        return model(x, size_tensor(x.shape[-2], x.shape[-1], scale))
    return model(x)


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


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
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # truncated zip, pickle error, not a torch file at all
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise WeightsError(f"cannot read weights file {path}: {first}") from None
    if not isinstance(obj, dict):
        raise WeightsError(f"weights file {path} holds a {type(obj).__name__}, expected a state dict")
    return adapt_mmagic_state_dict(obj)


def load_model(name: str, weights: str | Path | None = None, device: str | torch.device = "cpu") -> nn.Module:
    """Build model `name`, load its shipped weights (or `weights`), eval mode, on `device`."""
    spec = get_spec(name)
    model = spec.build()
    path = Path(weights) if weights is not None else spec.weights_path
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
