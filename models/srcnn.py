"""SRCNN (Dong et al. 2014) laid out exactly as mmagic/mmediting's SRCNNNet.

conv1 3->64 k9 p4, ReLU, conv2 64->32 k1, ReLU, conv3 32->3 k5 p2, after bicubic pre-upsampling.
Two forms: `SRCNN(upscale_factor=3)` upsamples by a fixed factor with nn.Upsample (the classic
tutorial's first model); `SRCNN()` takes the output size at run time: `forward(x, size)` with
`size` an int64 tensor [H_out, W_out] (see models.registry.output_size for scale -> size).
"""
from __future__ import annotations

import torch
from torch import nn

from .ops import dynamic_resize


class SRCNN(nn.Module):
    def __init__(self, upscale_factor: float | None = None, channels=(3, 64, 32, 3), kernel_sizes=(9, 1, 5)):
        super().__init__()
        self.upscale_factor = upscale_factor
        if upscale_factor is not None:
            self.img_upsampler = nn.Upsample(scale_factor=upscale_factor, mode="bicubic", align_corners=False)
        self.conv1 = nn.Conv2d(channels[0], channels[1], kernel_sizes[0], padding=kernel_sizes[0] // 2)
        self.conv2 = nn.Conv2d(channels[1], channels[2], kernel_sizes[1], padding=kernel_sizes[1] // 2)
        self.conv3 = nn.Conv2d(channels[2], channels[3], kernel_sizes[2], padding=kernel_sizes[2] // 2)
        self.relu = nn.ReLU()

    def upsample(self, x: torch.Tensor, size: torch.Tensor | None) -> torch.Tensor:
        if self.upscale_factor is not None:
            return self.img_upsampler(x)
        if size is None:
            raise ValueError("this SRCNN takes its output size at run time: forward(x, size)")
        return dynamic_resize(x, size)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv3(self.relu(self.conv2(self.relu(self.conv1(x)))))

    def forward(self, x: torch.Tensor, size: torch.Tensor | None = None) -> torch.Tensor:
        return self.features(self.upsample(x, size))
