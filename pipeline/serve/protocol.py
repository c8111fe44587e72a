"""The `sr` Triton model's protocol, decided here once: the tensors it takes and answers (pipeline.serve.tensors),
the config parameters that describe the served model, and where a repository keeps our TensorRT plugin library.
The repository writer (triton_config, python_repo, triton_repo), the Python model (python_model/model.py) and the
client (`sr --triton`) all use these names; numpy-free, so each side imports it cheaply."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import PipelineError

SR_MODEL = "sr"  # the sr model's name in a repository (`sr --triton` asks for it by default)

# Config parameters (Triton's are strings). Written by the repository writer, read by the model and the client.
MODEL = "model"                # the registered model (or a user's model's name) the file holds
BACKEND = "backend"            # the sr model's runtime: ort | ort-cpu | ort-cuda | trt
MODEL_FILE = "model_file"      # the plain model's file, relative to the sr model's folder
DEFAULT_SCALE = "default_scale"
SCALE_MIN, SCALE_MAX = "scale_min", "scale_max"


def plugin_folder(repo: Path) -> Path:
    """Where a repository's plugin library goes: beside it, so Triton loads no .so from inside the repository."""
    repo = Path(repo)
    return repo.parent / f"{repo.name}-plugins"


def scale_parameters(default: float, lo: float, hi: float) -> dict[str, str]:
    return {DEFAULT_SCALE: f"{default:g}", SCALE_MIN: f"{lo:g}", SCALE_MAX: f"{hi:g}"}


def _number(params: dict[str, str], key: str) -> float | None:
    if key not in params:
        return None
    try:
        return float(params[key])
    except ValueError:
        raise PipelineError(f"the served model's {key} {params[key]!r} is not a number") from None


@dataclass(frozen=True)
class Served:
    """What the client reads of a served sr model's parameters."""

    model: str | None
    backend: str
    default_scale: float | None
    scale_range: tuple[float, float] | None

    @classmethod
    def from_parameters(cls, params: dict[str, str]) -> Served:
        lo, hi = _number(params, SCALE_MIN), _number(params, SCALE_MAX)
        return cls(params.get(MODEL), params.get(BACKEND, "?"), _number(params, DEFAULT_SCALE),
                   (lo, hi) if lo is not None and hi is not None else None)

    def check_scale(self, scale: float | None) -> float:
        """--scale against the served range before any request; without it, the served default (a model that
        states none needs --scale)."""
        if scale is None:
            if self.default_scale is None:
                raise PipelineError("the served model states no default scale: give --scale")
            scale = self.default_scale
        if self.scale_range is not None and not self.scale_range[0] <= scale <= self.scale_range[1]:
            lo, hi = self.scale_range
            raise PipelineError(f"scale {scale:g} is outside the served model's range {lo:g}-{hi:g}")
        return float(scale)  # no range stated: the server checks it
