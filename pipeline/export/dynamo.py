"""Dynamo exporter (torch.export -> ONNX): custom ops mapped through `custom_translation_table`.

Dynamo ignores `register_custom_op_symbolic` and `autograd.Function.symbolic`; it sees the torch.library
custom ops instead (`sr::dynamic_resize`, `sr::resize_by_scale` from models/ops.py, and torchvision's
`deform_conv2d`), and we translate each one with an onnxscript function.
"""
from __future__ import annotations

import warnings

import onnx
import onnxscript
import torch
from onnxscript import opset19 as op

from pipeline.export import sr_ops

try:
    import torchvision.ops  # noqa: F401 (registers torch.ops.torchvision.deform_conv2d, translated below)
except ImportError:  # only deform-srcnn needs it (models.deform_srcnn says so); srcnn exports without it
    torchvision = None

sr_ops.register_schemas()  # onnxscript resolves sr.<Op> through onnx.defs
_sr = onnxscript.values.Opset(sr_ops.DOMAIN, sr_ops.VERSION)


def _resize_sizes(x, size):
    sizes = op.Concat(op.Shape(x, start=0, end=2), size, axis=0)
    return op.Resize(x, None, None, sizes, **sr_ops.RESIZE_ATTRS)


def _deform_attrs(weight, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, n_weight_grps, n_offset_grps):
    return dict(strides=[stride_h, stride_w], pads=[pad_h, pad_w, pad_h, pad_w], dilations=[dil_h, dil_w],
                group=n_weight_grps, offset_group=n_offset_grps,
                kernel_shape=[int(weight.shape[2]), int(weight.shape[3])])


def _translations(ops: str) -> dict:
    """aten/custom op overload -> onnxscript function, for one ops flavour ("custom" or "standard")."""
    custom = ops == "custom"

    def dynamic_resize(x, size):
        return _sr.DynamicResize(x, size) if custom else _resize_sizes(x, size)

    def resize_by_scale(x, scale):
        # The tutorial's NewInterpolate: Resize with run-time scales (1, 1, s_h, s_w); standard ops only.
        scales = op.Concat(op.Constant(value_floats=[1.0, 1.0]), scale, axis=0)
        return op.Resize(x, None, scales, **sr_ops.RESIZE_ATTRS)

    def deform_conv2d(input, weight, offset, mask, bias, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w,
                      n_weight_grps, n_offset_grps, use_mask):
        attrs = _deform_attrs(weight, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, n_weight_grps, n_offset_grps)
        inputs = [input, weight, offset, bias] + ([mask] if use_mask else [])
        if custom:
            return _sr.DeformConv2d(*inputs, **attrs)
        return op.DeformConv(*inputs, **attrs)

    table = {
        torch.ops.sr.dynamic_resize.default: dynamic_resize,
        torch.ops.sr.resize_by_scale.default: resize_by_scale,
    }
    if torchvision is not None:
        table[torch.ops.torchvision.deform_conv2d.default] = deform_conv2d
    return table


def export(module: torch.nn.Module, args: tuple, input_names: list[str], *, ops: str, opset: int) -> onnx.ModelProto:
    """Export `module(*args)`; first input gets dynamic batch/height/width, other inputs are static."""
    dims = {0: "batch", 2: "height", 3: "width"}
    dynamic_shapes = (dims,) + (None,) * (len(args) - 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            module, args, dynamo=True, input_names=input_names, output_names=["output"],
            dynamic_shapes=dynamic_shapes, custom_translation_table=_translations(ops),
            opset_version=opset, optimize=True, verbose=False, external_data=False)
    return program.model_proto
