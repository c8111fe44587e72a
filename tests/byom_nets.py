"""Small nets of three spandrel architecture families, built with spandrel's own classes and a fixed seed, saved as
checkpoints the way their users have them (no checkpoint can be downloaded in tests), and small user factories.

Importing this module needs PyTorch only: spandrel and safetensors (the `export` extra) are imported by the
functions that use them, and `need_spandrel()` skips a test with the reason where they are missing, so
`pytest -m gpu` collects on a GPU machine's bare Python (`make gpu-check PY=python3`)."""
from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import torch


def need_spandrel() -> None:
    """Skip the calling test (or fixture) with the reason when spandrel or safetensors is not installed."""
    for package in ("spandrel", "safetensors"):
        pytest.importorskip(package, reason=f"{package} is not installed (the `export` extra: pip install -e "
                                            "'.[export]')")


def _arch(module: str, cls: str):
    need_spandrel()
    return getattr(importlib.import_module(f"spandrel.architectures.{module}"), cls)


# name -> (constructor, scale, spandrel architecture id)
NETS = {
    "compact": (lambda: _arch("Compact", "Compact")(num_in_ch=3, num_out_ch=3, num_feat=8, num_conv=2, upscale=4),
                4, "Compact"),
    "rrdb": (lambda: _arch("ESRGAN", "ESRGAN")(in_nc=3, out_nc=3, num_filters=8, num_blocks=1, scale=2), 2, "ESRGAN"),
    "swinir": (lambda: _arch("SwinIR", "SwinIR")(img_size=16, embed_dim=12, depths=[2], num_heads=[2], window_size=4,
                                                 upscale=2, upsampler="pixelshuffledirect", mlp_ratio=2.0),
               2, "SwinIR"),
}


def build(name: str, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    net = NETS[name][0]().eval()
    # Random init of some families (zero-initialised last convs) would make the output ignore the input.
    with torch.no_grad():
        for p in net.parameters():
            if p.ndim > 1 and not p.abs().sum():
                p.normal_(0, 0.05)
    return net


def save(name: str, directory: Path, fmt: str = "pth", wrap: str | None = None) -> Path:
    """Write `name`'s state dict as `<name>.<fmt>` (pth: torch.save, safetensors); `wrap` nests it under a key
    (BasicSR writes {'params_ema': ...})."""
    state = {k: v.contiguous() for k, v in build(name).state_dict().items()}
    path = Path(directory) / f"{name}.{fmt}"
    if fmt == "safetensors":
        save_file(state, path)
    else:
        torch.save({wrap: state} if wrap else state, path)
    return path


def save_file(state: dict[str, torch.Tensor], path: str | Path) -> None:
    """safetensors.torch.save_file (skips the calling test where safetensors is missing)."""
    need_spandrel()
    from safetensors.torch import save_file as save

    save(state, str(path))


class TinyDeform(torch.nn.Module):
    """A user's own net calling torchvision's deform_conv2d (DCNv2): conv -> offsets/mask -> deform conv -> x2."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.head = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.offsets = torch.nn.Conv2d(8, 27, 3, padding=1)  # 2*9 offsets + 9 mask logits
        self.weight = torch.nn.Parameter(torch.randn(8, 8, 3, 3) * 0.1)
        self.bias = torch.nn.Parameter(torch.zeros(8))
        self.tail = torch.nn.Conv2d(8, 12, 3, padding=1)
        self.shuffle = torch.nn.PixelShuffle(2)
        torch.nn.init.normal_(self.offsets.weight, std=0.05)

    def forward(self, x):
        from torchvision.ops import deform_conv2d

        f = torch.relu(self.head(x))
        o = self.offsets(f)
        f = deform_conv2d(f, o[:, :18], self.weight, self.bias, padding=1, mask=torch.sigmoid(o[:, 18:]))
        return self.shuffle(self.tail(torch.relu(f)))


class TwoConvs(torch.nn.Module):
    """Two 5x5 convs then x2 pixel shuffle: receptive field exactly 4 LR pixels; declares `scale`."""

    scale = 2

    def __init__(self):
        super().__init__()
        torch.manual_seed(2)
        self.a = torch.nn.Conv2d(3, 8, 5, padding=2)
        self.b = torch.nn.Conv2d(8, 12, 5, padding=2)

    def forward(self, x):
        return torch.nn.functional.pixel_shuffle(self.b(torch.tanh(self.a(x))), 2)


def deform_factory():
    return TinyDeform().eval(), 2


def two_convs_factory():
    return TwoConvs().eval()


def undeclared_scale_factory():
    return torch.nn.Conv2d(3, 3, 1)


class NanNearWhite(torch.nn.Module):
    """issue 48's user net: x2 nearest, plus sqrt(0.999 - y) * 0 -- NaN wherever the input is near white, exact
    elsewhere (at every precision)."""

    scale = 2

    def forward(self, x):
        y = torch.nn.functional.interpolate(x, scale_factor=2, mode="nearest")
        return y + torch.sqrt(0.999 - y) * 0


def nan_near_white_factory():
    return NanNearWhite().eval()


class Nearest3(torch.nn.Module):
    """Exactly x3 nearest-neighbour: what comes out is what went in, so a video round trip shows the conversions'
    own error (issue 59)."""

    scale = 3

    def forward(self, x):
        return torch.nn.functional.interpolate(x, scale_factor=3, mode="nearest")


def nearest3_factory():
    return Nearest3().eval()


class Fp16OverflowOnWhite(torch.nn.Module):
    """x2 nearest plus a^5, a = 5000 relu(y - 0.998): about 1e5 on pure white (past fp16's 65504: inf), 0 on every
    other sample value (254/255 is below 0.998), so the written output is the same white at fp32. ONNX Runtime's CPU
    provider runs fp16 ops in fp32 behind casts it then merges, so only a tensor the graph itself keeps in fp16 (here
    the net's output, before sr::DynamicResize and the fp32 I/O cast) overflows for real. The export's own check
    (two crops with no white sample) lets the fp16 file through."""

    scale = 2

    def forward(self, x):
        y = torch.nn.functional.interpolate(x, scale_factor=2, mode="nearest")
        a = torch.relu(y - 0.998) * 5000
        return y + a * a * a * a * a


def fp16_overflow_factory():
    return Fp16OverflowOnWhite().eval()
