"""Reading an exported ONNX file and the metadata pipeline.export wrote into it (model, precision, ops, ...)."""
from __future__ import annotations

from pathlib import Path

from pipeline.errors import PipelineError, first_line


def load_onnx(path: Path, *, external_data: bool = True):
    """(ModelProto, metadata dict); an unreadable file is a one-line PipelineError."""
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=external_data)
    except Exception as e:  # protobuf decode errors, truncated files, missing external data
        raise PipelineError(f"cannot read ONNX file {path}: {first_line(e)}") from None
    return model, {p.key: p.value for p in model.metadata_props}


def onnx_metadata(path: Path) -> dict[str, str]:
    return load_onnx(path, external_data=False)[1]


def check_onnx_matches(path: Path, model: str, precision: str) -> dict[str, str]:
    """Refuse an ONNX file exported for another model or precision (metadata written by pipeline.export)."""
    meta = onnx_metadata(path)
    if meta.get("model") and meta["model"] != model:
        raise PipelineError(f"{path} was exported for model '{meta['model']}', not '{model}'")
    if meta.get("precision") and meta["precision"] != precision:
        raise PipelineError(f"{path} is a {meta['precision']} graph but precision {precision} was requested")
    return meta
