"""A --model value that is a checkpoint path or a factory -> its ModelSpec (with `external` set).

`models.lookup.get_spec` (the model-layer step of `pipeline.artifacts.identity.resolve`) calls `model_spec(value)`
for checkpoint paths and factories, so every stage that takes a model name takes these too. The spec is a
run-time-factor model (`forward(x, size)`, like srcnn): the net runs at its own factor and `sr::DynamicResize`
resizes to the requested size (identity at the net's own factor: bicubic at unit scale samples pixel centres
with weights 0, 1, 0, 0), so one exported graph serves every scale in (1, native]. Loading (and the
receptive-field probe) happens once per file version per process.
"""
from __future__ import annotations

import functools
import importlib
import inspect
import math
from pathlib import Path

from models.spec import ModelSpec

from .spec import ExternalSpec, is_factory

# Tiling margin for a net whose change reaches the whole probe: larger than any image, so plans keep it whole.
UNBOUNDED_RADIUS = 1 << 20
MAX_ANY_SCALE = 8.0  # a x1 (restoration) net is offered the same range as our run-time-factor models


def _stamp(value: str) -> tuple:
    """What invalidates a loaded model: the file's size and mtime (a factory: its module file's)."""
    path = Path(value) if not is_factory(value) else None
    try:
        st = path.stat() if path is not None else None
    except OSError:
        st = None
    return (str(path.resolve()) if path else value, st.st_size if st else None, st.st_mtime_ns if st else None)


@functools.lru_cache(maxsize=8)
def _load(value: str, stamp: tuple):
    from .loader import load

    return load(value)


def loaded(value: str):
    """models.external.loader.External for `value` (cached per file version)."""
    return _load(value, _stamp(value))


def build_module(value: str):
    """The nn.Module the registry builds: AnyScale(net) taking (x, size) (the factory of a user's ModelSpec)."""
    from .modules import AnyScale

    ext = loaded(value)
    return AnyScale(ext.module, ext.spec.scale).eval()


def _weights_file(ext: ExternalSpec) -> str:
    if not is_factory(ext.source):
        return ext.source  # absolute: WEIGHTS_DIR / it is the checkpoint itself
    return inspect.getfile(importlib.import_module(ext.source.partition(":")[0]))


def model_spec(value: str) -> ModelSpec:
    """The registry spec of a checkpoint path or factory (WeightsError, one line, when it does not load)."""
    ext = loaded(value).spec
    top = float(ext.scale) if ext.scale > 1 else MAX_ANY_SCALE
    rf = ext.receptive_field
    # A crop's first window (shifted windows wrap there) differs from the whole image's: one more window of context.
    radius = UNBOUNDED_RADIUS if rf is None else math.ceil((rf + (ext.align if ext.align > 1 else 0)) * top)
    return ModelSpec(
        name=value, factory=f"{__name__}:build_module", weights_file=_weights_file(ext),
        default_scale=float(max(ext.scale, 2)), scale_range=(1.0, top), dynamic_scale=True,
        description=f"{ext.architecture} x{ext.scale} from {ext.name} (other scales: sr::DynamicResize)",
        receptive_radius=radius, factory_kwargs=(("value", value),), tile_align=ext.align, external=ext)
