"""Backend names -> classes and fixed options; constructing one named backend."""
from __future__ import annotations

import importlib
import inspect

from pipeline.backends.base import Backend
from pipeline.errors import PipelineError

# name -> (module, class, fixed constructor options)
_REGISTRY = {
    "torch": ("torch_backend", "TorchBackend", {}),
    "ort": ("ort_backend", "OrtBackend", {}),
    "ort-cpu": ("ort_backend", "OrtBackend", {"provider": "cpu"}),
    "ort-cuda": ("ort_backend", "OrtBackend", {"provider": "cuda"}),
    "ort-trt": ("ort_backend", "OrtBackend", {"provider": "tensorrt"}),
    "ort-sr-kernels": ("ort_sr_kernels_backend", "OrtSrKernelsBackend", {}),
    "ort-folded": ("ort_folded_backend", "OrtFoldedBackend", {}),
    "trt": ("trt_backend", "TrtBackend", {}),
}


NAMES = tuple(_REGISTRY)


def backend_class(name: str):
    if name not in _REGISTRY:
        raise PipelineError(f"unknown backend '{name}' (choose from: auto, {', '.join(NAMES)})")
    module, cls, _ = _REGISTRY[name]
    return getattr(importlib.import_module(f"pipeline.backends.{module}"), cls)


def _constructor_opts(cls, name: str, opts: dict) -> dict:
    params = inspect.signature(cls.__init__).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    if takes_any:  # forwards to a base class: check against that one
        params = {**inspect.signature(cls.__mro__[1].__init__).parameters, **params}
    out = {}
    for key, value in opts.items():
        if key in params:
            out[key] = value
        elif value is not None:
            raise PipelineError(f"option '{key}' does not apply to backend '{name}'")
    return out



def create_named(backend: str, model: str, precision: str = "fp32", **opts) -> Backend:
    """A loaded backend of this exact name (no 'auto')."""
    cls = backend_class(backend)
    fixed = _REGISTRY[backend][2]
    kwargs = _constructor_opts(cls, backend, {k: v for k, v in opts.items() if k not in fixed})
    b = cls(model, precision, **fixed, **kwargs).load()
    if backend != b.name:  # aliases (ort-cpu, ...) keep their own name so reports tell providers apart
        b.name = backend
    b.selection_reason = f"requested: {backend}"
    return b

