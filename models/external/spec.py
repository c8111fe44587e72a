"""What a user's model is, without PyTorch: how a --model value is recognised, and the facts the stages need.

The identity of a user's model is (architecture, scale, weights SHA-256); it goes into the ONNX metadata
(`to_metadata`) and, through the weights hash and `identity`, into every cache key.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path

SUFFIXES = (".pth", ".pt", ".ckpt", ".safetensors")
FACTORY = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")  # package.module:factory
RGB = 3  # the pipeline feeds and writes RGB


def is_factory(value: str) -> bool:
    return bool(FACTORY.match(value))


def is_external(value: str) -> bool:
    """Whether a --model value names a checkpoint file or a factory rather than a registered model."""
    return Path(value).suffix.lower() in SUFFIXES or is_factory(value)


@dataclass(frozen=True)
class ExternalSpec:
    name: str  # file name, or the factory reference
    source: str  # absolute checkpoint path, or the factory reference
    architecture: str  # spandrel architecture id, or "factory:<class name>"
    scale: int  # the net's own factor
    sha256: str  # of the checkpoint file; for a factory, of its name and state-dict tensors (loader.factory_sha256)
    input_channels: int
    output_channels: int
    min_size: int  # smallest input side the net accepts
    align: int  # input sides are padded to a multiple of this (window size); tiles must start on one
    supports_half: bool
    supports_bfloat16: bool
    receptive_field: int | None  # LR pixels one output pixel sees (measured); None: the whole image

    @property
    def identity(self) -> str:
        """What makes two specs the same model: architecture, scale and weights (for cache keys, metadata)."""
        return f"{self.architecture}-x{self.scale}-{self.sha256[:16]}"

    def describe(self) -> dict:
        return asdict(self) | {"any_size": self.min_size <= 1, "identity": self.identity}

    def to_metadata(self) -> dict[str, str]:
        """ONNX metadata_props naming the model exactly (added to the registry spec's own)."""
        return {"architecture": self.architecture, "native_scale": str(self.scale), "checkpoint_sha256": self.sha256,
                "source": self.source, "receptive_field": "none" if self.receptive_field is None
                else str(self.receptive_field), "identity": self.identity}
