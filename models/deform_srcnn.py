"""DeformSRCNN: SRCNN whose middle layer is a modulated deformable convolution (DCNv2).

bicubic upsample (run-time size) -> conv1 3->64 k9 -> ReLU -> DeformConv2d 64->32 k3 (offsets and
mask predicted from the features by `offset_conv`) -> ReLU -> conv3 32->3 k5.
forward calls torchvision.ops.deform_conv2d so the TorchScript exporter meets
`torchvision::deform_conv2d`.
"""
from __future__ import annotations

import torch
from torch import nn

try:
    from torchvision.ops import deform_conv2d
except ImportError:  # only this model needs it: the registry (and srcnn) work on a Python without torchvision
    deform_conv2d = None

from .ops import dynamic_resize


class DeformSRCNN(nn.Module):
    def __init__(self, mid_channels: int = 64, deform_channels: int = 32, kernel_size: int = 3, offset_groups: int = 2):
        super().__init__()
        if deform_conv2d is None:
            raise ModuleNotFoundError("DeformSRCNN needs torchvision (pip install 'srdeploy[export]')")
        k = kernel_size
        self.offset_groups = offset_groups
        self.conv1 = nn.Conv2d(3, mid_channels, 9, padding=4)
        # 2*k*k offsets (dy, dx) and k*k mask logits per offset group.
        self.offset_conv = nn.Conv2d(mid_channels, 3 * offset_groups * k * k, 3, padding=1)
        nn.init.zeros_(self.offset_conv.weight)
        nn.init.zeros_(self.offset_conv.bias)
        self.deform_weight = nn.Parameter(torch.empty(deform_channels, mid_channels, k, k))
        self.deform_bias = nn.Parameter(torch.zeros(deform_channels))
        nn.init.kaiming_uniform_(self.deform_weight, a=5**0.5)
        self.conv3 = nn.Conv2d(deform_channels, 3, 5, padding=2)
        self.relu = nn.ReLU()
        self.kernel_size = k

    def forward(self, x: torch.Tensor, size: torch.Tensor) -> torch.Tensor:
        x = dynamic_resize(x, size)
        feat = self.relu(self.conv1(x))
        n_off = 2 * self.offset_groups * self.kernel_size**2
        om = self.offset_conv(feat)
        offset, mask = om[:, :n_off], torch.sigmoid(om[:, n_off:])
        pad = self.kernel_size // 2
        feat = deform_conv2d(feat, offset, self.deform_weight, self.deform_bias, padding=(pad, pad), mask=mask)
        return self.conv3(self.relu(feat))
