"""The one resolver from a --model value that is not a registered name to a registry ModelSpec.

`models.spec.get_spec` calls `model_spec(value)` for checkpoint paths and factories, so every stage that takes a
model name takes these too. The spec is a run-time-factor model (`forward(x, size)`, like srcnn): the net runs
at its own factor and `sr::DynamicResize` resizes to the requested size (identity at the net's own factor:
bicubic at unit scale samples pixel centres with weights 0, 1, 0, 0), so one exported graph serves every scale
in (1, native]. Loading (and the receptive-field probe) happens once per file version per process.
"""
from __future__ import annotations

import functools
import importlib
import inspect
import math
import re
from dataclasses import dataclass
from pathlib import Path

from models.spec import ModelSpec

from .spec import ExternalSpec, is_factory

# Tiling margin for a net whose change reaches the whole probe: larger than any image, so plans keep it whole.
UNBOUNDED_RADIUS = 1 << 20
MAX_ANY_SCALE = 8.0  # a x1 (restoration) net is offered the same range as our run-time-factor models


@dataclass(frozen=True)
class ExternalModelSpec(ModelSpec):
    """A registry spec whose identity (architecture, scale, weights SHA-256) comes from a user's model."""

    external: ExternalSpec | None = None

    @property
    def cache_token(self) -> str:
        """File-name-safe part of cache keys: the user's name for it plus its identity."""
        stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(self.external.name).stem)[:40]
        return f"{stem}-{self.external.identity}"

    def to_metadata(self) -> dict[str, str]:
        return super().to_metadata() | self.external.to_metadata()

    def weights_sha256(self, weights=None) -> str:
        """The checkpoint file's SHA-256, or a factory's weights hash (models.external.loader.factory_sha256):
        not its source file's, which neither changes with the weights it loads nor stays put when only a comment
        changes. `weights` is ignored: a checkpoint or factory brings its own (registry.load_model refuses one)."""
        return self.external.sha256

    def scale_note(self, scale: float) -> str:
        """What a run at `scale` does, for the run's first line."""
        native = self.external.scale
        if float(scale) == native:
            return f"{self.external.architecture} runs at its own x{native}"
        return f"{self.external.architecture} runs at x{native}, then sr::DynamicResize to x{float(scale):g}"


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
    """The nn.Module the registry builds: AnyScale(net) taking (x, size) (factory of ExternalModelSpec)."""
    from .modules import AnyScale

    ext = loaded(value)
    return AnyScale(ext.module, ext.spec.scale).eval()


def _weights_file(ext: ExternalSpec) -> str:
    if not is_factory(ext.source):
        return ext.source  # absolute: WEIGHTS_DIR / it is the checkpoint itself
    return inspect.getfile(importlib.import_module(ext.source.partition(":")[0]))


def model_spec(value: str) -> ExternalModelSpec:
    """The registry spec of a checkpoint path or factory (WeightsError, one line, when it does not load)."""
    ext = loaded(value).spec
    top = float(ext.scale) if ext.scale > 1 else MAX_ANY_SCALE
    rf = ext.receptive_field
    # A crop's first window (shifted windows wrap there) differs from the whole image's: one more window of context.
    radius = UNBOUNDED_RADIUS if rf is None else math.ceil((rf + (ext.align if ext.align > 1 else 0)) * top)
    return ExternalModelSpec(
        name=value, factory=f"{__name__}:build_module", weights_file=_weights_file(ext),
        default_scale=float(max(ext.scale, 2)), scale_range=(1.0, top), dynamic_scale=True,
        description=f"{ext.architecture} x{ext.scale} from {ext.name} (other scales: sr::DynamicResize)",
        receptive_radius=radius, factory_kwargs=(("value", value),), tile_align=ext.align, external=ext)
