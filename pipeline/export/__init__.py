"""Export stage: PyTorch -> ONNX with the `sr` custom-domain ops (runnable as-is by ONNX Runtime), or standard ops.

API other stages use:
- `export_model(model, output, *, exporter, ops, precision, io_dtype, weights, opset, verify) -> ExportResult`
- `strip_sr_functions(model_proto) -> model_proto` (for TensorRT / our kernels: bodies out, plugin attrs in)
- `onnx_filename(model, ...)`: the file names `--all` writes
Modules: sr_ops (op contract, schemas, bodies, strip), dynamo / torchscript (the two exporters),
graph (I/O, metadata, checks), fp16, verify (ORT vs PyTorch), fold (bicubic folded into SRCNN's conv1),
extras (folded variants and reference outputs written beside a file), core (orchestration).
The CLI is pipeline.cli.export.

Only sr_ops is torch-free; the exporting names load torch on first use, so the runtime can strip sr bodies
without PyTorch installed.
"""
from __future__ import annotations

import importlib

from pipeline.export.sr_ops import strip_sr_functions

_CORE = ("ExportResult", "export_model", "onnx_filename")

__all__ = [*_CORE, "strip_sr_functions"]


def __getattr__(name: str):
    if name in _CORE:
        return getattr(importlib.import_module("pipeline.export.core"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
