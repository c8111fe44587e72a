"""Export stage: PyTorch -> ONNX with the `sr` custom-domain ops (runnable as-is by ONNX Runtime), or standard ops.

API other stages use:
- `pipeline.export.core.export_model(model, output, *, exporter, ops, precision, io_dtype, weights, opset, verify)
  -> ExportResult`, and `onnx_filename(model, ...)`: the file names `--all` writes
- `pipeline.export.cached.onnx_for(model, ...)`: the cached export a runtime uses, made on a miss
- `strip_sr_functions(model_proto) -> model_proto` (for TensorRT / our kernels: bodies out, plugin attrs in)
Modules: sr_ops (op contract, schemas, bodies, strip), dynamo / torchscript (the two exporters),
graph (I/O, metadata, checks), fp16, verify (ORT vs PyTorch), fold (bicubic folded into SRCNN's conv1),
extras (folded variants and reference outputs written beside a file), core (orchestration), cached.
The CLI is pipeline.cli.export.

This package and sr_ops and cached import without PyTorch, so the runtime can strip sr bodies and find cached
files without it; core and the modules it uses import torch.
"""
from __future__ import annotations

from pipeline.export.sr_ops import strip_sr_functions

__all__ = ["strip_sr_functions"]
