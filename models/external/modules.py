"""The nn.Modules that make a user's net look like ours: NCHW float in [0, 1] in, upscaled NCHW out.

`PaddedNet` pads the input (reflect, bottom/right) to the multiple its net needs (e.g. SwinIR's window)
and crops the output back, so any input size works and the exported graph keeps the padding as ops.
`AnyScale` runs the net at its own factor and resizes the result to a size given at run time with
`models.ops.dynamic_resize`, which both exporters turn into `sr::DynamicResize`.
"""
from __future__ import annotations

import sys

import torch
import torch.nn.functional as F
from torch import nn

from models.ops import dynamic_resize


def _window_reverse(windows: torch.Tensor, window_size: int, h: int, w: int) -> torch.Tensor:
    """Swin's window_reverse with the batch left to view(-1): the original computes it by float division, on
    which torch.export can only specialise to the example size (the exported graph is then wrong elsewhere)."""
    c = windows.shape[-1]
    x = windows.view(-1, h // window_size, w // window_size, window_size, window_size, c)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, h, w, c)


def make_traceable(net: nn.Module) -> nn.Module:
    """Make Swin-style nets export at any size, with the same values: the shifted-window mask is always computed
    for the actual size (not the cached one, chosen by comparing sizes, which export freezes to the example),
    and window_reverse is the integer-exact version above (patched in spandrel's arch module, same results)."""
    for m in net.modules():
        if hasattr(m, "calculate_mask") and isinstance(getattr(m, "input_resolution", None), tuple):
            m.input_resolution = (0, 0)
        arch_module = sys.modules.get(type(m).__module__)
        if arch_module is not None and arch_module.__name__.startswith("spandrel.") \
                and callable(getattr(arch_module, "window_reverse", None)):
            arch_module.window_reverse = _window_reverse
    return net


class PaddedNet(nn.Module):
    """`net` at its own integer `scale`; input sides padded to a multiple of `align` and cropped back."""

    def __init__(self, net: nn.Module, scale: int, align: int = 1):
        super().__init__()
        self.net = net
        self.scale = int(scale)
        self.align = max(1, int(align))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.align == 1:
            return self.net(x)
        h, w = x.shape[-2], x.shape[-1]
        # Always pad (possibly by 0) so the exported graph has no branch specialised on the example size.
        x = F.pad(x, (0, (-w) % self.align, 0, (-h) % self.align), mode="reflect")
        return self.net(x)[..., : h * self.scale, : w * self.scale]


class AnyScale(nn.Module):
    """A fixed-factor net at any scale: run it at its own factor, then bicubic-resize to `size` (int64 [2]).

    This is the run-time-factor interface of our own models (`forward(x, size)`), so every stage treats it
    the same way; the resize is `sr::DynamicResize` in the exported graph.
    """

    def __init__(self, net: nn.Module, native_scale: int):
        super().__init__()
        self.net = net
        self.native_scale = int(native_scale)

    def forward(self, x: torch.Tensor, size: torch.Tensor) -> torch.Tensor:
        return dynamic_resize(self.net(x), size)
