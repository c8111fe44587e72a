"""Bicubic folded into SRCNN's conv1: an exact, faster SRCNN on the CPU (the `ort-folded` backend's graphs).

Main idea -- fold the fixed bicubic upsampler into conv1 (sub-pixel reformulation):
for an integer scale s, every HR pixel (s*m + p, s*n + q) of a bicubic upsample is a fixed 4x4-tap
combination of LR pixels around (m, n) that depends only on the phase (p, q).  conv1 (9x9 on the HR
grid) after that upsample is therefore, per phase, a small convolution on the LR grid.  All s*s
phases stacked give ONE conv 3 -> s*s*64 (7x7 for s=3) on the LR grid, followed by ReLU, conv2 as a
grouped 1x1 conv (per phase) and ReLU, then a depth-to-space to the HR grid; conv3 runs unchanged.
conv1 MACs per HR pixel drop from 3*64*81 = 15552 to 3*64*49 = 9408 (s=3), and the HR-sized
upsampled image and 64-channel HR feature map are never materialised.

Borders: bicubic clamps its taps (replicate) -> replicate-pad the LR input, exact.  conv1 zero-pads
the *HR* upsampled image, which the LR formulation cannot see, so the 4-pixel HR frame (kernel//2)
is recomputed on thin strips with the original ops and concatenated -- the result is exact (fp32
rounding only, < 1e-5 on [0, 1] images), which tests/test_optimize.py checks.

The export writes one folded ONNX per integer scale beside an SRCNN file (pipeline.export.extras); the
`ort-folded` backend runs them with the one set of session options (backends.ort_backend.cpu_session_options).
"""
from __future__ import annotations

import math

import onnx
import torch
import torch.nn.functional as F
from torch import nn

from pipeline.artifacts.onnx_file import FOLDED_SCALE_KEY


def bicubic_phase_taps(scale: int, radius: int = 8) -> dict[int, dict[int, float]]:
    """For each phase p in [0, s): {LR offset d: weight} with U[s*m + p] = sum_d w_d X[m + d] (interior).

    Measured from torch's own bicubic (float64) so it matches F.interpolate exactly, whatever its
    coefficient conventions.
    """
    length = 4 * radius + 1
    m0 = 2 * radius
    x = torch.zeros(1, 1, 1, length, dtype=torch.float64)
    x[..., m0] = 1.0
    u = F.interpolate(x, size=(1, length * scale), mode="bicubic", align_corners=False)[0, 0, 0]
    taps: dict[int, dict[int, float]] = {}
    for p in range(scale):
        row = {}
        for d in range(-radius, radius + 1):  # U[s*(m0 - d) + p] = weight of X[m + d] at LR m = m0 - d
            w = float(u[scale * (m0 - d) + p])
            if w != 0.0:
                row[d] = w
        taps[p] = row
    return taps


def _folded_kernel(weight: torch.Tensor, scale: int) -> tuple[torch.Tensor, int]:
    """conv1 weight [Co, Ci, k, k] on the HR grid -> [s*s*Co, Ci, K, K] on the LR grid (phase-major
    output channels: (p*s + q)*Co + c, the layout of ONNX DepthToSpace mode DCR) and its radius P."""
    co, ci, kh, kw = weight.shape
    assert kh == kw and kh % 2 == 1
    r = kh // 2
    taps = bicubic_phase_taps(scale)
    # 1D operator per phase: A[p][k_index, d] = weight of LR offset d for HR offset k (k in -r..r).
    big = r // scale + 4
    ops = torch.zeros(scale, kh, 2 * big + 1, dtype=torch.float64)
    for p in range(scale):
        for ki, k in enumerate(range(-r, r + 1)):
            pk = p + k
            base, phase = pk // scale, pk % scale  # floor division: HR row s*(m+base) + phase
            for d, w in taps[phase].items():
                ops[p, ki, base + d + big] += w
    # Smallest symmetric LR radius holding every non-zero tap.
    nz = torch.nonzero(ops.abs().sum(dim=(0, 1)) > 0).flatten()
    P = int(max(big - nz.min(), nz.max() - big))
    ops = ops[:, :, big - P: big + P + 1]
    w64 = weight.detach().to(torch.float64)
    # K[p, q, co, ci, dy, dx] = sum_{k,l} W[co, ci, k, l] * A[p, k, dy] * A[q, l, dx]
    folded = torch.einsum("oikl,pky,qlx->pqoiyx", w64, ops, ops)
    return folded.reshape(scale * scale * co, ci, 2 * P + 1, 2 * P + 1), P


def _conv3_on_lr_kernel(w3: torch.Tensor, s: int, mid: int) -> tuple[torch.Tensor, int]:
    """conv3 (on the HR grid) as one conv on the LR grid's s*s phases of `mid` channels each: (kernel, LR radius)."""
    co3, r3 = w3.shape[0], w3.shape[-1] // 2
    R = -(-r3 // s)  # LR radius of conv3
    k3 = torch.zeros(s * s * co3, s * s * mid, 2 * R + 1, 2 * R + 1, dtype=w3.dtype)
    for p in range(s):
        for q in range(s):
            for k in range(-r3, r3 + 1):
                for j in range(-r3, r3 + 1):
                    (bp, pp), (bq, qq) = divmod(p + k, s), divmod(q + j, s)
                    # Output channels channel-major (c*s*s + phase): F.pixel_shuffle / DepthToSpace CRD.
                    o = torch.arange(co3) * s * s + p * s + q
                    i = (pp * s + qq) * mid
                    k3[o, i:i + mid, bp + R, bq + R] += w3[:, :, k + r3, j + r3]
    return k3, R


def depth_to_space_dcr(x: torch.Tensor, s: int) -> torch.Tensor:
    """[N, s*s*C, H, W] phase-major -> [N, C, H*s, W*s] (ONNX DepthToSpace, mode DCR)."""
    n, c, h, w = x.shape
    c //= s * s
    return x.reshape(n, s, s, c, h, w).permute(0, 3, 4, 1, 5, 2).reshape(n, c, h * s, w * s)


class FoldedSRCNN(nn.Module):
    """Exact, faster equivalent of an SRCNN (bicubic x s + conv1 9x9 + conv2 1x1 + conv3) for integer s.

    forward(x) -> same output as the reference model at scale s (fp32 rounding only). With
    `conv3_on_lr` conv3 also runs on the LR grid (phase-major 288 -> 27 channels, 3x3 for s=3: its
    zero padding is exact there), so no HR feature map is ever built; otherwise the 32-channel map is
    moved to the HR grid (depth-to-space) and conv3 runs as in the reference. Inputs smaller than the
    border strips fall back to the reference ops.
    """

    def __init__(self, model: nn.Module, scale: int, conv3_on_lr: bool = True):
        super().__init__()
        if int(scale) != scale or scale < 2:
            raise ValueError(f"bicubic folding needs an integer scale >= 2, got {scale}")
        s = self.scale = int(scale)
        c1, c2, c3 = model.conv1, model.conv2, model.conv3
        if (c1.kernel_size[0] != c1.kernel_size[1] or c1.padding[0] != c1.kernel_size[0] // 2
                or c2.kernel_size != (1, 1) or c3.padding[0] != c3.kernel_size[0] // 2):
            raise ValueError("FoldedSRCNN expects SRCNN's layout (square 'same' conv1/conv3, 1x1 conv2)")
        self.conv1, self.conv2, self.conv3 = c1, c2, c3  # reference ops for the border strips
        self.r1, self.r3 = c1.kernel_size[0] // 2, c3.kernel_size[0] // 2
        kernel, self.P = _folded_kernel(c1.weight, s)
        co, mid = c1.out_channels, c2.out_channels
        self.fold1 = nn.Conv2d(c1.in_channels, s * s * co, kernel.shape[-1])
        self.fold2 = nn.Conv2d(s * s * co, s * s * mid, 1, groups=s * s)
        self.conv3_on_lr = conv3_on_lr
        with torch.no_grad():
            self.fold1.weight.copy_(kernel.to(c1.weight.dtype))
            self.fold1.bias.copy_(c1.bias.repeat(s * s))
            self.fold2.weight.copy_(c2.weight.repeat(s * s, 1, 1, 1))
            self.fold2.bias.copy_(c2.bias.repeat(s * s))
        if conv3_on_lr:
            k3, R = _conv3_on_lr_kernel(c3.weight.detach(), s, mid)
            # Unpadded where its outer ring (R*s HR pixels) lies in the frame the strips recompute anyway: the int8
            # recipe shifts an unpadded conv's input without a Pad (pipeline.export.quantize.relu_convs).
            self.trim = R * s if R * s <= self.r1 + self.r3 else 0
            self.fold3 = nn.Conv2d(s * s * mid, k3.shape[0], 2 * R + 1, padding=0 if self.trim else R)
            with torch.no_grad():
                self.fold3.weight.copy_(k3)
                self.fold3.bias.copy_(c3.bias.repeat_interleave(s * s))
        # Output frame that sees conv1's HR zero padding: r1 + r3 pixels. LR rows/cols needed to
        # rebuild the first 2*(r1+r3) upsampled HR rows without touching the crop's own clamp.
        self.frame = self.r1 + self.r3
        self.crop = math.ceil(2 * self.frame / s) + 3
        self.min_lr = self.crop
        # The strips' upsample, also on the LR grid: per-phase bicubic taps as a depthwise conv (replicate padding
        # = bicubic's clamped taps) and a pixel shuffle. Every HR pixel is then the same sum wherever the strip
        # lies, so a tile's frame equals the whole image's bit for bit (Resize computes source positions in float,
        # which differ by an ulp with the position: tiled != whole at x3).
        taps = bicubic_phase_taps(s)
        self.R = max(abs(d) for row in taps.values() for d in row)
        k = 2 * self.R + 1
        up = torch.zeros(c1.in_channels * s * s, 1, k, k, dtype=torch.float64)
        for p in range(s):
            for q in range(s):
                for dy, wy in taps[p].items():
                    for dx, wx in taps[q].items():
                        up[torch.arange(c1.in_channels) * s * s + p * s + q, 0, dy + self.R, dx + self.R] = wy * wx
        self.up = nn.Conv2d(c1.in_channels, c1.in_channels * s * s, k, groups=c1.in_channels, bias=False)
        with torch.no_grad():
            self.up.weight.copy_(up.to(c1.weight.dtype))

    def _upsample(self, x: torch.Tensor) -> torch.Tensor:
        """Bicubic x s (F.interpolate's, to fp32 rounding), position-independent (see __init__)."""
        return F.pixel_shuffle(self.up(F.pad(x, (self.R,) * 4, mode="replicate")), self.scale)

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv3(F.relu(self.conv2(F.relu(self.conv1(self._upsample(x))))))

    def _strip(self, u: torch.Tensor, pad1: tuple, pad3: tuple, vertical: bool) -> torch.Tensor:
        """Reference layers on an upsampled strip with the HR zero padding made explicit on one side."""
        p1 = (0, self.r1) if vertical else (self.r1, 0)
        p3 = (0, self.r3) if vertical else (self.r3, 0)
        y = F.conv2d(F.pad(u, pad1), self.conv1.weight, self.conv1.bias, padding=p1)
        y = F.relu(self.conv2(F.relu(y)))
        return F.conv2d(F.pad(y, pad3), self.conv3.weight, self.conv3.bias, padding=p3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s, P, c, f, r1, r3 = self.scale, self.P, self.crop, self.frame, self.r1, self.r3
        h, w = x.shape[-2], x.shape[-1]
        if h < self.min_lr or w < self.min_lr:
            return self.reference(x)
        # Interior: everything on the LR grid.
        y = F.relu(self.fold2(F.relu(self.fold1(F.pad(x, (P, P, P, P), mode="replicate")))))
        out = F.pixel_shuffle(self.fold3(y), s) if self.conv3_on_lr else self.conv3(depth_to_space_dcr(y, s))
        # Output frame (r1 + r3 HR pixels): reference ops on thin strips.
        n = 2 * f
        top = self._strip(self._upsample(x[:, :, :c, :])[:, :, :n, :], (0, 0, r1, 0), (0, 0, r3, 0), True)
        bot = self._strip(self._upsample(x[:, :, h - c:, :])[:, :, -n:, :], (0, 0, 0, r1), (0, 0, 0, r3), True)
        left = self._strip(self._upsample(x[:, :, :, :c])[:, :, :, :n], (r1, 0, 0, 0), (r3, 0, 0, 0), False)
        right = self._strip(self._upsample(x[:, :, :, w - c:])[:, :, :, -n:], (0, r1, 0, 0), (0, r3, 0, 0), False)
        a = f - (self.trim if self.conv3_on_lr else 0)  # out starts `trim` HR pixels in when fold3 is unpadded
        middle = torch.cat([left[:, :, f:-f, :], out[:, :, a:out.shape[-2] - a, a:out.shape[-1] - a],
                            right[:, :, f:-f, :]], dim=3)
        return torch.cat([top, middle, bot], dim=2)


def fold_srcnn(model: nn.Module, scale: int, conv3_on_lr: bool = True) -> FoldedSRCNN:
    """The folded equivalent of a loaded SRCNN (`srcnn` or `srcnn-x3`) at integer `scale`, eval mode."""
    return FoldedSRCNN(model, scale, conv3_on_lr).eval()


def srcnn_macs_per_output_pixel(model: nn.Module, folded_scale: int | None = None) -> int:
    """Multiply-accumulates per HR output pixel (reference layout, or folded at `folded_scale`)."""
    c1, c2, c3 = model.conv1, model.conv2, model.conv3
    k1 = c1.kernel_size[0] * c1.kernel_size[1]
    if folded_scale:
        K = _folded_kernel(c1.weight, folded_scale)[0].shape[-1]
        k1 = K * K
    return (c1.in_channels * c1.out_channels * k1 + c2.in_channels * c2.out_channels
            + c3.in_channels * c3.out_channels * c3.kernel_size[0] * c3.kernel_size[1])


def export_folded_onnx(folded: FoldedSRCNN, path, height: int = 64, width: int = 64) -> None:
    """ONNX (standard ops, opset 17, dynamic batch/height/width) of a FoldedSRCNN: input `input`, output `output`.
    Its metadata records the scale and `min_lr`: smaller inputs must run the plain model (the traced graph holds
    only the folded branch)."""
    x = torch.rand(1, 3, height, width)
    torch.onnx.export(folded, (x,), str(path), input_names=["input"], output_names=["output"], opset_version=17,
                      dynamic_axes={"input": {0: "batch", 2: "height", 3: "width"},
                                    "output": {0: "batch", 2: "out_height", 3: "out_width"}},
                      dynamo=False)
    m = onnx.load(str(path))
    m.ir_version = min(m.ir_version, 10)  # ORT here rejects IR > 13; keep it conservative
    for key, value in ((FOLDED_SCALE_KEY, folded.scale), ("min_lr", folded.min_lr)):
        m.metadata_props.append(onnx.StringStringEntryProto(key=key, value=str(value)))
    onnx.save(m, str(path))
