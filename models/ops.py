"""Ops the nets call that ONNX/TensorRT lack natively, written so both exporters can map them.

`dynamic_resize(x, size)` is bicubic resizing (PyTorch semantics: half-pixel centres, A=-0.75,
clamped borders) to an output size given *as a tensor* (int64 [2] = H_out, W_out), so the size is
a run-time input of the exported graph rather than a constant baked in at export.
A floating-point `size` is read as scale factors (s_h, s_w) instead (`resize_by_scale`): that is the
tutorial's NewInterpolate flavour, exported as a standard Resize with run-time scales.

- Eager: `F.interpolate(..., mode="bicubic", align_corners=False)`.
- Legacy TorchScript exporter: `DynamicResizeFunction.symbolic` (registered by pipeline.export).
- Dynamo exporter: the `sr::dynamic_resize` custom op below, translated by pipeline.export.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


@torch.library.custom_op("sr::dynamic_resize", mutates_args=())
def _dynamic_resize_op(x: torch.Tensor, size: torch.Tensor) -> torch.Tensor:
    h, w = (int(v) for v in size.tolist())
    return F.interpolate(x, size=(h, w), mode="bicubic", align_corners=False)


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
