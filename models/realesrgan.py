"""Real-ESRGAN's nets as registered models: spandrel's architectures taking our run-time-factor interface.

Each is the spandrel class itself (so the state dict keys are spandrel's, and models.fetched's converted weights
load as they are) with `forward(x, size)`: the net at its own x4, then `models.ops.dynamic_resize` to `size`, as
models.external.modules.AnyScale runs any fixed-factor net (identity at x4: bicubic at unit scale samples pixel
centres with weights 0, 1, 0, 0; x2/x3 are the x4 output downscaled, which is what the wheel's x2/x3 files do).
"""
from __future__ import annotations

import torch
from spandrel.architectures.Compact import Compact
from spandrel.architectures.ESRGAN import ESRGAN

from models.ops import dynamic_resize

NATIVE_SCALE = 4


class RRDBNet(ESRGAN):
    """ESRGAN's RRDBNet (Real-ESRGAN x4plus: 23 blocks; x4plus-anime: 6), x4 then resized to `size`."""

    def __init__(self, num_blocks: int = 23):
        super().__init__(num_blocks=num_blocks, scale=NATIVE_SCALE)

    def forward(self, x: torch.Tensor, size: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return dynamic_resize(super().forward(x), size)


class SRVGGNetCompact(Compact):
    """Real-ESRGAN's compact VGG-style net (animevideov3: 16 body convs, PReLU), x4 then resized to `size`."""

    def __init__(self, num_conv: int = 16):
        super().__init__(num_conv=num_conv, upscale=NATIVE_SCALE)

    def forward(self, x: torch.Tensor, size: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return dynamic_resize(super().forward(x), size)
