"""Reading an exported ONNX file and the metadata pipeline.export wrote into it (model, scale contract, precision,
folded variants, reference outputs), so a runtime can use the file without the model registry or PyTorch."""
from __future__ import annotations

from pathlib import Path

import onnx

from models.spec import MODELS, ModelSpec
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


def check_onnx_matches(path: Path, model: str | None, precision: str) -> dict[str, str]:
    """Refuse an ONNX file exported for another model or precision (metadata written by pipeline.export)."""
    meta = onnx_metadata(path)
    if model is not None and meta.get("model") and meta["model"] != model:
        raise PipelineError(f"{path} was exported for model '{meta['model']}', not '{model}'")
    if meta.get("precision") and meta["precision"] != precision:
        raise PipelineError(f"{path} is a {meta['precision']} graph but precision {precision} was requested")
    return meta


def spec_of(meta: dict[str, str]) -> ModelSpec:
    """The registered spec of the model a file's metadata names, else the spec the metadata itself carries
    (KeyError/ValueError when it carries none)."""
    name = meta.get("model")
    return MODELS[name] if name in MODELS else ModelSpec.from_metadata(meta)


def spec_from_onnx(path: Path, model: str | None = None) -> ModelSpec:
    """The model an exported file holds: the registered spec of the name in its metadata, else the spec the
    metadata itself carries. `model` (e.g. --model), when given, must match the file."""
    meta = onnx_metadata(path)
    name = meta.get("model")
    if model is not None and name and name != model:
        raise PipelineError(f"{path} was exported for model '{name}', not '{model}' "
                            "(leave out --model to use the file's)")
    try:
        return spec_of(meta)
    except (KeyError, ValueError) as e:
        raise PipelineError(f"{path} does not say which model it holds (metadata field {first_line(e)} missing "
                            "or bad); export it with `python -m pipeline export`") from None


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
