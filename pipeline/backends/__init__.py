"""Backends: one inference interface (base.Backend) over PyTorch, ONNX Runtime and TensorRT.

    create(backend, model, precision="fp32", **opts) -> loaded Backend   ("auto" = pick_auto)
    available(model, precision="fp32", weights=None, onnx=None, engine=None) -> [BackendStatus(name, available, reason)]
    pick_auto(model, precision="fp32") -> AutoPick(name, reason)

Nothing falls back silently: a backend that cannot run raises PipelineError saying why, `available`
says why for each, and a backend made by "auto" carries `selection_reason`. With `onnx=FILE` (or
`engine=FILE`) the model comes from the file's metadata (pipeline.artifacts.identity.resolve, the one
answer to which model) and nothing here imports PyTorch.

    base          the Backend interface: everything callers read, declared (status, OPTIONS, load, infer,
                  describe, selected/selection_reason, profiles, max_input_size, onnx_file)
    checks        input validation every backend runs
    pixels        integer pixels <-> model tensors: the one rounding rule, in numpy, torch and ONNX
    registry      names -> classes, create_named       availability  what can run here, and why not
    auto          the `auto` choice and --measure
    *_backend     one module per runtime
"""
from pipeline.backends.auto import (
    AutoPick,
    create,
    measure,
    measured,
    pick_auto,
    time_backend,
)
from pipeline.backends.availability import available, no_gpu_line
from pipeline.backends.base import Backend, BackendStatus
from pipeline.backends.registry import NAMES, backend_class, create_named

__all__ = ["NAMES", "AutoPick", "Backend", "BackendStatus", "available", "backend_class", "create", "create_named",
           "measure", "measured", "no_gpu_line", "pick_auto", "time_backend"]
