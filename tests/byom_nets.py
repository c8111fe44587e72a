"""Small nets of three spandrel architecture families, built with spandrel's own classes and a fixed seed, saved as
checkpoints the way their users have them (no checkpoint can be downloaded in tests)."""
from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_file
from spandrel.architectures.Compact import Compact
from spandrel.architectures.ESRGAN import ESRGAN
from spandrel.architectures.SwinIR import SwinIR

# name -> (constructor, scale, spandrel architecture id)
NETS = {
    "compact": (lambda: Compact(num_in_ch=3, num_out_ch=3, num_feat=8, num_conv=2, upscale=4), 4, "Compact"),
    "rrdb": (lambda: ESRGAN(in_nc=3, out_nc=3, num_filters=8, num_blocks=1, scale=2), 2, "ESRGAN"),
    "swinir": (lambda: SwinIR(img_size=16, embed_dim=12, depths=[2], num_heads=[2], window_size=4, upscale=2,
                              upsampler="pixelshuffledirect", mlp_ratio=2.0), 2, "SwinIR"),
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
        save_file(state, str(path))
    else:
        torch.save({wrap: state} if wrap else state, path)
    return path
