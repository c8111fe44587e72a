"""Reference outputs stored at export time beside an ONNX file: the inputs and the PyTorch FP32 outputs at one
scale, so `compare` can check any backend against PyTorch on a machine without PyTorch.

File format (numpy .npz, no pickles): `scale` (float64 scalar), `names` (str array) and per image
`input/<name>` [1, 3, H, W] and `output/<name>` [1, 3, H*s, W*s], float32.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from models.spec import file_sha256
from pipeline.artifacts.atomic import atomic_path
from pipeline.artifacts.onnx_file import REFERENCE_SHA_KEY, onnx_metadata, reference_file
from pipeline.errors import PipelineError, first_line


@dataclass(frozen=True)
class Reference:
    scale: float
    inputs: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray]


def write_reference(path: Path, scale: float, inputs: dict[str, np.ndarray], outputs: dict[str, np.ndarray]) -> None:
    arrays = {"scale": np.float64(scale), "names": np.array(list(inputs))}
    for name in inputs:
        arrays[f"input/{name}"] = np.asarray(inputs[name], np.float32)
        arrays[f"output/{name}"] = np.asarray(outputs[name], np.float32)
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.savez(f, **arrays)


def read_reference(onnx_path: Path) -> Reference:
    """The reference stored with an exported file; one PipelineError line when it has none or it changed."""
    meta = onnx_metadata(onnx_path)
    path = reference_file(onnx_path, meta)
    if path is None:
        raise PipelineError(f"{onnx_path} carries no reference outputs; export it again with `python -m pipeline "
                            "export` (or compare with PyTorch installed, without --onnx)")
    if not path.is_file():
        raise PipelineError(f"reference outputs {path} (named in {onnx_path.name}) are missing")
    if meta.get(REFERENCE_SHA_KEY) and file_sha256(path) != meta[REFERENCE_SHA_KEY]:
        raise PipelineError(f"reference outputs {path} do not match the SHA-256 recorded in {onnx_path.name}")
    try:
        with np.load(path, allow_pickle=False) as z:
            names = [str(n) for n in z["names"]]
            return Reference(float(z["scale"]), {n: z[f"input/{n}"] for n in names},
                             {n: z[f"output/{n}"] for n in names})
    except (OSError, KeyError, ValueError) as e:
        raise PipelineError(f"cannot read reference outputs {path}: {first_line(e)}") from None
