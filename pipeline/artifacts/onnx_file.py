"""Reading an exported ONNX file and the metadata pipeline.export wrote into it (model, scale contract, precision,
folded variants, reference outputs), so a runtime can use the file without the model registry or PyTorch.
Which model a file holds is pipeline.artifacts.identity's answer."""
from __future__ import annotations

from pathlib import Path

import onnx

from pipeline.errors import PipelineError, first_line

# Metadata keys naming sibling files: folded variants ("2:F.folded-x2.onnx,3:...") and the reference outputs.
FOLDED_KEY = "folded_variants"
REFERENCE_KEY = "reference"
REFERENCE_SHA_KEY = "reference_sha256"


def load_onnx(path: Path, *, external_data: bool = True):
    """(ModelProto, metadata dict); an unreadable file is a one-line PipelineError."""
    try:
        model = onnx.load(str(path), load_external_data=external_data)
    except Exception as e:  # protobuf decode errors, truncated files, missing external data
        raise PipelineError(f"cannot read ONNX file {path}: {first_line(e)}") from None
    return model, {p.key: p.value for p in model.metadata_props}


def onnx_metadata(path: Path) -> dict[str, str]:
    path = Path(path)
    if not path.is_file():
        raise PipelineError(f"ONNX file not found: {path}")
    return load_onnx(path, external_data=False)[1]


def check_onnx_precision(path: Path, precision: str) -> dict[str, str]:
    """Refuse an ONNX file exported at another precision (the model it holds: pipeline.artifacts.identity)."""
    meta = onnx_metadata(path)
    if meta.get("precision") and meta["precision"] != precision:
        raise PipelineError(f"{path} is a {meta['precision']} graph but precision {precision} was requested")
    return meta


def folded_variants(path: Path, meta: dict[str, str] | None = None) -> dict[int, Path]:
    """Integer scale -> folded ONNX file exported beside `path` (empty when the file carries none)."""
    meta = onnx_metadata(path) if meta is None else meta
    out = {}
    for item in filter(None, meta.get(FOLDED_KEY, "").split(",")):
        scale, _, name = item.partition(":")
        out[int(scale)] = Path(path).parent / name
    return out


def reference_file(path: Path, meta: dict[str, str] | None = None) -> Path | None:
    """The .npz of inputs and PyTorch FP32 outputs stored at export time beside `path`, if any."""
    meta = onnx_metadata(path) if meta is None else meta
    name = meta.get(REFERENCE_KEY)
    return Path(path).parent / name if name else None
