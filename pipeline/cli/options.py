"""Argument groups and checks the stage commands share: one definition and one default each."""
from __future__ import annotations

from pipeline.errors import PipelineError


def models_arg(name: str) -> list[str]:
    from models.registry import MODELS

    if name == "all":
        return list(MODELS)
    if name not in MODELS:
        raise PipelineError(f"unknown model '{name}' (known: all, {', '.join(MODELS)})")
    return [name]

