"""Registers our plugin creators (sr::DynamicResize, sr::DeformConv2d) with TensorRT's plugin registry."""
from __future__ import annotations

from pathlib import Path

from pipeline.contract import DOMAIN, OP_TYPES, VERSION
from pipeline.errors import PipelineError
from pipeline.native.cuda_runtime import missing_hint, preload

_LOADED_LIBS: dict[str, object] = {}


def load_plugins(plugin_lib: Path):
    """Register our plugin creators (sr::DynamicResize, sr::DeformConv2d) with TensorRT's plugin registry."""
    import tensorrt as trt


    key = str(Path(plugin_lib).resolve())
    if key not in _LOADED_LIBS:
        preload()  # the library's RUNPATH is $ORIGIN alone: cudart/cuBLAS must be loaded before TensorRT dlopens it
        registry = trt.get_plugin_registry()
        handle = registry.load_library(key)
        if handle is None:
            raise PipelineError(f"TensorRT could not load the plugin library {plugin_lib} (see the TensorRT log); "
                                f"if libcudart/libcublas are missing: {missing_hint()}")
        _LOADED_LIBS[key] = handle
        for op in OP_TYPES:
            if registry.get_creator(op, str(VERSION), DOMAIN) is None:
                raise PipelineError(f"{plugin_lib} does not register the TensorRT plugin {DOMAIN}::{op} v{VERSION}")
    return _LOADED_LIBS[key]

