"""Check a written ONNX file against PyTorch: plain ONNX Runtime (CPU) vs the FP32 torch model on real images."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

from models.registry import ModelSpec, size_tensor
from pipeline.data.sample_images import load_rgb
from pipeline.native.ort_session import cpu_session_options
from pipeline.precisions import TABLE

# Max |ORT - PyTorch FP32| on outputs in the 0-1 range, per graph precision.
TOLERANCE = {p.name: p.export_tol for p in TABLE if p.graph}


def sample_batch() -> torch.Tensor:
    """Two small real crops (astronaut's face, the cat's eye), NCHW float32 in [0, 1]; odd, unequal H/W on purpose."""
    crops = [load_rgb("astronaut")[60:83, 180:209], load_rgb("chelsea")[90:113, 150:179]]  # skimage's files
    x = np.stack([c.astype(np.float32) / 255.0 for c in crops]).transpose(0, 3, 1, 2)
    return torch.from_numpy(np.ascontiguousarray(x))


def verify_scales(spec: ModelSpec, scale: float | None) -> list[float]:
    if not spec.dynamic_scale:
        return [spec.default_scale]
    first = spec.default_scale if scale is None else scale
    # A second, fractional factor exercises the run-time size path (different H_out/W_out, same graph).
    return [first] + ([2.5] if first != 2.5 else [])


def max_abs_error(path: Path, model: torch.nn.Module, spec: ModelSpec, *, size_input: str | None, io_dtype: str,
                  scales: list[float]) -> float:
    session = ort.InferenceSession(str(path), cpu_session_options(threads=2), providers=["CPUExecutionProvider"])
    x = sample_batch()
    worst = 0.0
    for scale in scales:
        if size_input == "size":
            extra = size_tensor(x.shape[-2], x.shape[-1], scale)
        elif size_input == "scale":
            extra = torch.tensor([scale, scale], dtype=torch.float32)
        else:
            extra = None
        with torch.no_grad():
            ref = (model(x, extra) if extra is not None else model(x)).numpy()
        feed = {"input": x.numpy().astype(np.float16 if io_dtype == "fp16" else np.float32)}
        if extra is not None:
            feed[size_input] = extra.numpy()
        got = session.run(["output"], feed)[0].astype(np.float32)
        if got.shape != ref.shape:
            return float("inf")
        worst = max(worst, float(np.abs(got - ref).max()))
    return worst
