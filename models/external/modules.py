"""The nn.Modules that make a user's net look like ours: NCHW float in [0, 1] in, upscaled NCHW out.

`PaddedNet` pads the input (reflect, bottom/right) to the multiple its net needs (e.g. SwinIR's window)
and crops the output back, so any input size works and the exported graph keeps the padding as ops.
`AnyScale` runs the net at its own factor and resizes the result to a size given at run time with
`models.ops.dynamic_resize`, which both exporters turn into `sr::DynamicResize`.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from models.ops import dynamic_resize


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
