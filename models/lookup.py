"""A --model value -> its ModelSpec: a registered name, or a user's checkpoint path / package.module:factory.

This is the model layer's step of the one resolver, `pipeline.artifacts.identity.resolve` (which also reads
exported files); stages ask that, not this. Failures are one-line `ModelError`s.
"""
from __future__ import annotations

from models.external.resolve import model_spec
from models.external.spec import is_external
from models.spec import MODELS, ModelError, ModelSpec


def get_spec(name: str) -> ModelSpec:
    """A registered model, or a user's model (loaded once per file version: torch + spandrel)."""
    if name in MODELS:
        return MODELS[name]
    if is_external(name):
        return model_spec(name)
    raise ModelError(f"unknown model '{name}' (known: {', '.join(MODELS)}, or a checkpoint path, or "
                     "package.module:factory)")
