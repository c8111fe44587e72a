"""Super-resolution nets: torch-free specs (models.spec, models.lookup) and the PyTorch side (models.registry).

`import models` does not import torch; the torch side (building, loading weights, running) is
`models.registry`, imported where PyTorch is needed, so the deploy runtime reads specs without PyTorch installed.
"""
from __future__ import annotations

from .lookup import get_spec
from .spec import MODELS, ModelError, ModelSpec, WeightsError, file_sha256, output_size

__all__ = ["MODELS", "ModelError", "ModelSpec", "WeightsError", "file_sha256", "get_spec", "output_size"]
