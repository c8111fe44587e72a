"""Checks every backend runs: which model it serves (registry or ONNX metadata) and the input batch, so bad input
fails with one clear line before anything is launched."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from models.spec import ModelSpec, WeightsError, get_spec, output_size, weights_path
from pipeline.artifacts.onnx_file import spec_from_onnx, spec_of
from pipeline.engine.sidecar import load_sidecar
from pipeline.errors import PipelineError


@dataclass(frozen=True)
class BatchShape:
    n: int
    c: int
    h: int
    w: int
    out_h: int
    out_w: int


def model_spec(model: str) -> ModelSpec:
    try:
        return get_spec(model)
    except KeyError as e:
        raise PipelineError(str(e.args[0])) from None


def resolve_spec(model: str | None, onnx: str | Path | None = None, engine: str | Path | None = None) -> ModelSpec:
    """The spec a backend serves: from the engine's sidecar or the ONNX file's metadata when one is given (`model`,
    if named, must match it), else the registered model `model`."""
    if engine is not None:
        return engine_spec(Path(engine), model)
    if onnx is not None:
        return spec_from_onnx(Path(onnx), model)
    if model is None:
        raise PipelineError("no model given: name a registered model or pass an ONNX file")
    return model_spec(model)


def engine_spec(engine: Path, model: str | None) -> ModelSpec:
    """The model an engine holds, from its sidecar (which carries the ONNX file's metadata)."""
    sidecar = load_sidecar(Path(engine))
    meta = sidecar.get("onnx_metadata") or {"model": sidecar.get("model")}
    name = meta.get("model")
    if name in (None, "?"):
        return resolve_spec(model)
    if model is not None and name != model:
        raise PipelineError(f"{Path(engine).name} was built for model '{name}', not '{model}'")
    try:
        return spec_of(meta)
    except PipelineError as e:
        raise PipelineError(f"{Path(engine).name}: {e}") from None
    except (KeyError, ValueError):
        raise PipelineError(f"{Path(engine).name}: its sidecar does not describe model '{name}'; rebuild the "
                            "engine from an ONNX file exported by this version") from None


def check_weights(spec: ModelSpec, weights=None) -> Path:
    """The weights file a backend that builds from PyTorch needs, or one PipelineError line about it."""
    if not spec.weights_file:
        raise PipelineError(f"model '{spec.name}' is not registered here, so it runs only from its ONNX file")
    try:
        return weights_path(spec, weights)
    except WeightsError as e:
        raise PipelineError(str(e)) from None


def check_scale(spec, scale: float) -> float:
    try:
        return spec.check_scale(scale)
    except (TypeError, ValueError) as e:
        raise PipelineError(str(e)) from None


def check_batch(batch, spec, scale: float, backend: str = "") -> BatchShape:
    """Validate an NCHW float32 RGB batch and the scale; return the input and output sizes."""
    who = f"{backend}: " if backend else ""
    if not isinstance(batch, np.ndarray):
        raise PipelineError(f"{who}expected a numpy NCHW float32 batch, got {type(batch).__name__}")
    if batch.ndim != 4:
        raise PipelineError(f"{who}expected an NCHW batch (rank 4), got rank {batch.ndim} with shape {batch.shape}")
    n, c, h, w = (int(v) for v in batch.shape)
    if c != 3:
        raise PipelineError(f"{who}expected 3 channels (RGB) in NCHW order, got {c} channels (shape {batch.shape})")
    if min(n, h, w) < 1:
        raise PipelineError(f"{who}empty batch: shape {batch.shape}")
    if batch.dtype != np.float32:
        raise PipelineError(f"{who}dtype mismatch: expected float32 in [0, 1], got {batch.dtype}")
    scale = check_scale(spec, scale)
    oh, ow = output_size(h, w, scale)
    return BatchShape(n, c, h, w, oh, ow)
