"""Bring your own model: a checkpoint file (through spandrel) or a `package.module:factory`.

`load(value)` gives an `External`: its `ExternalSpec` (name, architecture, scale, checkpoint SHA-256, channels,
size needs, dtypes, measured receptive field) and a torch module taking NCHW float RGB in [0, 1] at the net's
own factor; `External.module_for(scale)` runs it at another scale (its own output resized with
`sr::DynamicResize`: a fixed-x4 net asked for x3 runs at x4). Failures are one-line
`models.registry.WeightsError`s naming the file or factory.

This package imports without torch (`is_external`, `ExternalSpec`): the registry lookup asks it first.
"""
from __future__ import annotations

from .spec import RGB, SUFFIXES, ExternalSpec, is_external, is_factory


def load(value, *, measure: bool = True):
    """models.external.loader.load (imports torch and spandrel)."""
    from .loader import load as _load

    return _load(value, measure=measure)


def architectures() -> list[str]:
    """Ids of the architectures spandrel recognises from a state dict (imports spandrel)."""
    from .checkpoint import architectures as _architectures

    return _architectures()


__all__ = ["RGB", "SUFFIXES", "ExternalSpec", "architectures", "is_external", "is_factory", "load"]
