"""Receptive field measured, not declared: how far a change to one input pixel reaches in the output.

A user's net is a black box, so tiling cannot read its radius from a table. We perturb single LR pixels of
a random input and find the farthest output pixel that moves, in LR pixels. Several positions across the
net's alignment block are probed, because windowed attention reaches further from some than from others.
If a change reaches the border of the probe, the probe grows; past `max_side` the field is reported as
unbounded (None), i.e. the net mixes the whole image and tiling cannot reproduce whole-image output.
"""
from __future__ import annotations

import math

import torch
from torch import nn

# An output pixel counts as reached when it moves at all: outside the field it is computed from bit-equal inputs
# by the same ops, so it is bit-equal. (A threshold would give a smaller, "effective" field -- RRDB with one block:
# 5 px at 1e-5, 19 exactly -- and tiles at that margin would no longer equal the whole image.)
REACH_EPS = 0.0
MAX_PROBES = 4


def _reach(diff: torch.Tensor, scale: int, py: int, px: int) -> tuple[int, bool]:
    """Farthest changed output pixel from the probe, in LR pixels (rounded up), and whether it hit the border."""
    moved = (diff.abs().amax(dim=(0, 1)) > REACH_EPS).nonzero()
    if moved.numel() == 0:
        return 0, False
    h, w = diff.shape[-2:]
    ys, xs = moved[:, 0], moved[:, 1]
    # distance from the probe's HR footprint [p*s, (p+1)*s) to each moved pixel, in HR pixels
    dy = torch.clamp(torch.maximum(py * scale - ys, ys - ((py + 1) * scale - 1)), min=0)
    dx = torch.clamp(torch.maximum(px * scale - xs, xs - ((px + 1) * scale - 1)), min=0)
    reach = math.ceil(int(torch.maximum(dy, dx).max()) / scale)
    border = bool((ys == 0).any() or (xs == 0).any() or (ys == h - 1).any() or (xs == w - 1).any())
    return reach, border


@torch.no_grad()
def measure(net: nn.Module, scale: int, channels: int = 3, align: int = 1, side: int = 48,
            max_side: int = 256, seed: int = 0) -> int | None:
    """Receptive-field radius of `net` (NCHW -> NCHW at integer `scale`) in LR pixels; None if unbounded."""
    gen = torch.Generator().manual_seed(seed)
    align = max(1, int(align))
    while side <= max_side:
        side = -(-side // align) * align
        x = torch.rand(1, channels, side, side, generator=gen)
        base = net(x)
        c = side // 2
        step = max(1, align // MAX_PROBES)
        radius, border = 0, False
        for k in range(min(align, MAX_PROBES)):
            p = c + k * step
            y = x.clone()
            y[..., p, p] = (y[..., p, p] + 0.5) % 1.0  # a change of 0.5 that stays in [0, 1]
            r, b = _reach(net(y) - base, scale, p, p)
            radius, border = max(radius, r), border or b
        if not border:
            return radius
        side *= 2
    return None
