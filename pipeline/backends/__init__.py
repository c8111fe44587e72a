"""Backends: one inference interface (base.Backend) over PyTorch, ONNX Runtime and TensorRT.

    create(backend, model, precision="fp32", **opts) -> loaded Backend   ("auto" = pick_auto)
    available(model, precision="fp32", weights=None, onnx=None, engine=None) -> [BackendStatus(name, available, reason)]
    pick_auto(model, precision="fp32") -> AutoPick(name, reason)

Nothing falls back silently: a backend that cannot run raises PipelineError saying why, `available`
says why for each, and a backend made by "auto" carries `selection_reason`. With `onnx=FILE` (or
`engine=FILE`) the model comes from the file's metadata and nothing here imports PyTorch.

    base          the Backend interface (each class: status, OPTIONS, load, infer)
    checks        which model (registry or file metadata), input validation every backend runs
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
from pipeline.backends.availability import available
from pipeline.backends.base import Backend, BackendStatus
from pipeline.backends.checks import resolve_spec
from pipeline.backends.registry import NAMES, backend_class, create_named

__all__ = ["NAMES", "AutoPick", "Backend", "BackendStatus", "available", "backend_class", "create", "create_named",
           "measure", "measured", "pick_auto", "resolve_spec", "time_backend"]
