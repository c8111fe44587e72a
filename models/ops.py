"""Ops the nets call that ONNX/TensorRT lack natively, written so both exporters can map them.

`dynamic_resize(x, size)` is bicubic resizing (PyTorch semantics: half-pixel centres, A=-0.75,
clamped borders) to an output size given *as a tensor* (int64 [2] = H_out, W_out), so the size is
a run-time input of the exported graph rather than a constant baked in at export.
A floating-point `size` is read as scale factors (s_h, s_w) instead (`resize_by_scale`): that is the
tutorial's NewInterpolate flavour, exported as a standard Resize with run-time scales.

- Eager: `bicubic_exact`, F.interpolate's bicubic with the source position split exactly (as the C++ kernels
  and the ONNX function body do), so tiled output equals whole-image output bit for bit; training uses
  F.interpolate itself (differentiable; the two differ by float rounding only).
- Legacy TorchScript exporter: `DynamicResizeFunction.symbolic` (registered by pipeline.export).
- Dynamo exporter: the `sr::dynamic_resize` custom op below, translated by pipeline.export.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

CUBIC_A = -0.75  # Keys' coefficient, PyTorch's (ONNX Resize cubic_coeff_a)


def _cubic1(x: torch.Tensor) -> torch.Tensor:  # |x| <= 1; the C++ header's expression and order
    return ((CUBIC_A + 2.0) * x - (CUBIC_A + 3.0)) * x * x + 1.0


def _cubic2(x: torch.Tensor) -> torch.Tensor:  # 1 < |x| < 2
    return ((CUBIC_A * x - 5.0 * CUBIC_A) * x + 8.0 * CUBIC_A) * x - 4.0 * CUBIC_A


def cubic_taps(in_size: int, out_size: int, device=None) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The 4 clamped tap indices and weights of every output index along one axis, as
    plugins_trt/dynamicResize/dynamicResizeMath.h computes them: the source position
    (dst + 0.5) * in / out - 0.5 = num / den is split into floor and fraction with integer math, so the
    fraction is the correctly rounded float of a rational that depends only on in/out and dst's phase.
    A crop with the image's size ratio then gets bit-identical weights (tiled == whole at x3, x2.5; ATen's
    float source index differs by an ulp there, pipeline/images/tiling.py)."""
    dst = torch.arange(out_size, dtype=torch.int64, device=device)
    den = 2 * out_size
    num = (2 * dst + 1) * in_size - out_size
    rem = torch.remainder(num, den)  # floor remainder, in [0, den)
    first = torch.div(num - rem, den, rounding_mode="floor")
    # tensor / tensor: true division (a Python-scalar divisor may become a multiply by its reciprocal)
    t = rem.to(torch.float32) / torch.full_like(rem, den, dtype=torch.float32)
    weights = [_cubic2(t + 1.0), _cubic1(t), _cubic1(1.0 - t), _cubic2(2.0 - t)]
    index = [(first + (k - 1)).clamp(0, in_size - 1) for k in range(4)]
    return index, weights


def bicubic_exact(x: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """F.interpolate(x, (height, width), mode="bicubic", align_corners=False) with exact source positions
    (cubic_taps), in float32 with the C++ kernels' arithmetic: each source row's 4 columns weighted and summed, then
    the 4 rows. Done separably (all rows' column pass first), which is the same sums in the same order per output
    value. Elementwise ops only, so every value is the same whatever the image's size: tiles equal the whole."""
    iy, wy = cubic_taps(x.shape[-2], height, x.device)
    ix, wx = cubic_taps(x.shape[-1], width, x.device)
    xf = x.float()
    cols = xf.index_select(-1, ix[0]) * wx[0]  # [N, C, H_in, W_out]
    for j in range(1, 4):
        cols = cols + xf.index_select(-1, ix[j]) * wx[j]
    out = cols.index_select(-2, iy[0]) * wy[0][:, None]
    for r in range(1, 4):
        out = out + cols.index_select(-2, iy[r]) * wy[r][:, None]
    return out.to(x.dtype)


@torch.library.custom_op("sr::dynamic_resize", mutates_args=())
def _dynamic_resize_op(x: torch.Tensor, size: torch.Tensor) -> torch.Tensor:
    h, w = (int(v) for v in size.tolist())
    if (h, w) == tuple(x.shape[-2:]):  # the identity (taps 0, 1, 0, 0): a copy (a custom op may not alias)
        return x.clone()
    return bicubic_exact(x, h, w)


def _resized_fake(x: torch.Tensor, size_or_scale: torch.Tensor) -> torch.Tensor:
    # The output size is data (the values of the second input), so it is unknown while tracing.
    ctx = torch.library.get_ctx()
    return x.new_empty((x.shape[0], x.shape[1], ctx.new_dynamic_size(), ctx.new_dynamic_size()))


_dynamic_resize_op.register_fake(_resized_fake)


class DynamicResizeFunction(torch.autograd.Function):
    """Wrapper the legacy exporter sees as one PythonOp; its `symbolic` is attached by pipeline.export."""

    @staticmethod
    def forward(ctx, x, size):  # noqa: D401 - torch signature
        return _dynamic_resize_op(x, size)

    @staticmethod
    def backward(ctx, grad):  # pragma: no cover - inference-only op
        raise RuntimeError("dynamic_resize is for inference; train with F.interpolate")


@torch.library.custom_op("sr::resize_by_scale", mutates_args=())
def _resize_by_scale_op(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    sh, sw = (float(v) for v in scale.tolist())
    return F.interpolate(x, scale_factor=(sh, sw), mode="bicubic", align_corners=False)


_resize_by_scale_op.register_fake(_resized_fake)


class ResizeByScaleFunction(torch.autograd.Function):
    """Legacy-exporter wrapper of `sr::resize_by_scale` (the tutorial's NewInterpolate)."""

    @staticmethod
    def forward(ctx, x, scale):
        return _resize_by_scale_op(x, scale)

    @staticmethod
    def backward(ctx, grad):  # pragma: no cover - inference-only op
        raise RuntimeError("resize_by_scale is for inference; train with F.interpolate")


def dynamic_resize(x: torch.Tensor, size: torch.Tensor) -> torch.Tensor:
    """Bicubic resize of NCHW `x` to `size` = int64 tensor [H_out, W_out].

    A floating-point `size` holds scale factors (s_h, s_w) instead: output floor(H*s_h) x floor(W*s_w),
    sampling with the factors themselves (F.interpolate(scale_factor=...) semantics, = ONNX Resize scales).
    """
    if size.is_floating_point():
        if torch.onnx.is_in_onnx_export():
            return ResizeByScaleFunction.apply(x, size)
        return _resize_by_scale_op(x, size)
    if torch.onnx.is_in_onnx_export():
        return DynamicResizeFunction.apply(x, size)
    if x.requires_grad:  # training path: differentiable and fast
        h, w = (int(v) for v in size.tolist())
        return F.interpolate(x, size=(h, w), mode="bicubic", align_corners=False)
    return _dynamic_resize_op(x, size)
