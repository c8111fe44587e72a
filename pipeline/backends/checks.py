"""Checks every backend runs on its input (batch and scale), so bad input fails with one clear line before anything
is launched. Which model a backend serves is pipeline.artifacts.identity.resolve's answer."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models.spec import ModelSpec, output_size
from pipeline.errors import PipelineError


@dataclass(frozen=True)
class BatchShape:
    n: int
    c: int
    h: int
    w: int
    out_h: int
    out_w: int


def check_scale(spec: ModelSpec, scale: float) -> float:
    try:
        return spec.check_scale(scale)
    except (TypeError, ValueError) as e:
        raise PipelineError(str(e)) from None


def check_batch(batch, spec: ModelSpec, scale: float, backend: str = "") -> BatchShape:
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
