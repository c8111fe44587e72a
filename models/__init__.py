"""Super-resolution nets: torch-free specs (models.spec) and the PyTorch side (models.registry).

`import models` does not import torch: the torch-side names load on first use, so the deploy runtime can
read specs without PyTorch installed.
"""
from __future__ import annotations

import importlib

from .spec import MODELS, ModelSpec, WeightsError, file_sha256, get_spec, output_size

_TORCH_SIDE = ("load_model", "run", "size_tensor", "load_state_dict_file", "adapt_mmagic_state_dict")

__all__ = ["MODELS", "ModelSpec", "WeightsError", "file_sha256", "get_spec", "output_size", *_TORCH_SIDE]


def __getattr__(name: str):
    if name in _TORCH_SIDE:
        return getattr(importlib.import_module(".registry", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
