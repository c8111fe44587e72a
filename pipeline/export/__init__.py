"""Export stage: PyTorch -> ONNX with the `sr` custom-domain ops (runnable as-is by ONNX Runtime), or standard ops.

API other stages use:
- `export_model(model, output, *, exporter, ops, precision, io_dtype, weights, opset, verify) -> ExportResult`
- `strip_sr_functions(model_proto) -> model_proto` (for TensorRT / our kernels: bodies out, plugin attrs in)
- `onnx_filename(model, ...)`: the file names `--all` writes
Modules: sr_ops (op contract, schemas, bodies, strip), dynamo / torchscript (the two exporters),
graph (I/O, metadata, checks), fp16, verify (ORT vs PyTorch), fold (bicubic folded into SRCNN's conv1),
core (orchestration). The CLI is pipeline.cli.export.
"""
from pipeline.export.core import ExportResult, export_model, onnx_filename
from pipeline.export.sr_ops import strip_sr_functions

__all__ = ["ExportResult", "export_model", "onnx_filename", "strip_sr_functions"]
