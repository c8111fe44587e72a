"""What an export writes beside the ONNX file so the runtime needs no PyTorch: the folded SRCNN variants
(`ort-folded`) and reference outputs (`compare`). Both are named in the main file's metadata."""
from __future__ import annotations

import warnings
from pathlib import Path

import torch

from models.registry import run
from models.spec import ModelSpec, file_sha256
from pipeline.artifacts.atomic import atomic_path
from pipeline.artifacts.onnx_file import FOLDED_KEY, FOLDED_SHA_KEY, REFERENCE_KEY, REFERENCE_SHA_KEY
from pipeline.artifacts.reference import write_reference
from pipeline.data.sample_images import held_out_crops
from pipeline.export import fold

# Integer scales a run-time-factor SRCNN gets folded variants for (the ones it is trained on).
FOLDED_SCALES = (2, 3, 4)
REFERENCE_SIZE = 64  # side of the held-out crops stored as reference inputs


def folded_scales(spec: ModelSpec) -> tuple[int, ...]:
    if spec.dynamic_scale:
        return FOLDED_SCALES
    return (int(spec.default_scale),) if float(spec.default_scale).is_integer() else ()


def write_folded_variants(module: torch.nn.Module, spec: ModelSpec, output: Path) -> dict[str, str]:
    """One folded ONNX per integer scale beside `output` (`<stem>.folded-x3.onnx`); metadata naming them and their
    SHA-256 (checked before one runs)."""
    if not spec.foldable:
        return {}
    names, shas = [], []
    for s in folded_scales(spec):
        folded = fold.fold_srcnn(module, s)
        path = output.parent / f"{output.stem}.folded-x{s}.onnx"
        with atomic_path(path) as tmp, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # TracerWarnings of the small-input fallback branch
            fold.export_folded_onnx(folded, tmp)
        names.append(f"{s}:{path.name}")
        shas.append(f"{s}:{file_sha256(path)}")
    return {FOLDED_KEY: ",".join(names), FOLDED_SHA_KEY: ",".join(shas)}


def write_reference_outputs(module: torch.nn.Module, spec: ModelSpec, output: Path) -> dict[str, str]:
    """PyTorch FP32 outputs at the default scale beside `output` (`<stem>.reference.npz`); metadata naming them."""
    inputs = held_out_crops(REFERENCE_SIZE)
    with torch.inference_mode():
        outputs = {k: run(module, spec, torch.from_numpy(x), spec.default_scale).numpy() for k, x in inputs.items()}
    path = output.parent / f"{output.stem}.reference.npz"
    write_reference(path, spec.default_scale, inputs, outputs)
    return {REFERENCE_KEY: path.name, REFERENCE_SHA_KEY: file_sha256(path)}
