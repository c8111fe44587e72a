"""Legacy TorchScript exporter (`torch.onnx.export(..., dynamo=False)`), the classic tutorial's way.

- torchvision's `deform_conv2d` is a TorchScript op: `register_custom_op_symbolic("torchvision::deform_conv2d")`
  with `@parse_args` maps it.
- The run-time-size resize is an `autograd.Function` (models.ops.DynamicResizeFunction, and
  ResizeByScaleFunction for the scale-input flavour) whose `symbolic` staticmethod the exporter calls.
"""
from __future__ import annotations

import contextlib
import io
import warnings

import onnx
import torch
from torch.onnx import register_custom_op_symbolic
from torch.onnx.symbolic_helper import parse_args

from models.ops import DynamicResizeFunction, ResizeByScaleFunction
from pipeline.export import sr_ops

_state = {"ops": "custom"}  # flavour of the export in progress; symbolics read it


def _absent(g):
    """An omitted optional input: serialised as "" (what torch's own upsample symbolics do from opset 13)."""
    n = g.op("prim::Constant")
    n.setType(torch._C.OptionalType.ofTensor())
    return n


def _resize_sizes(g, x, size):
    shape = g.op("Shape", x, start_i=0, end_i=2)
    sizes = g.op("Concat", shape, size, axis_i=0)
    return g.op("Resize", x, _absent(g), _absent(g), sizes, mode_s="cubic", cubic_coeff_a_f=-0.75,
                coordinate_transformation_mode_s="half_pixel")


def _dynamic_resize_symbolic(g, x, size):
    if _state["ops"] == "custom":
        y = g.op(f"{sr_ops.DOMAIN}::{sr_ops.DYNAMIC_RESIZE}", x, size)
    else:
        y = _resize_sizes(g, x, size)
    return _typed_like(y, x)


def _typed_like(y, x):
    """Rank and dtype of y are those of x even where sizes are data: tell the exporter (no shape warning)."""
    return y.setType(x.type().with_sizes([None] * 4)) if x.type().dim() == 4 else y


def _resize_by_scale_symbolic(g, x, scale):
    # The tutorial's NewInterpolate: standard Resize with run-time scales (1, 1, s_h, s_w).
    ones = g.op("Constant", value_t=torch.tensor([1.0, 1.0], dtype=torch.float32))
    scales = g.op("Concat", ones, scale, axis_i=0)
    y = g.op("Resize", x, _absent(g), scales, mode_s="cubic", cubic_coeff_a_f=-0.75,
             coordinate_transformation_mode_s="half_pixel")
    return _typed_like(y, x)


@parse_args("v", "v", "v", "v", "v", "i", "i", "i", "i", "i", "i", "i", "i", "b")
def _deform_conv2d_symbolic(g, input, weight, offset, mask, bias, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w,
                            n_weight_grps, n_offset_grps, use_mask):
    kh, kw = weight.type().sizes()[2:]
    inputs = [input, weight, offset, bias] + ([mask] if use_mask else [])
    name = f"{sr_ops.DOMAIN}::{sr_ops.DEFORM_CONV}" if _state["ops"] == "custom" else "DeformConv"
    y = g.op(name, *inputs, strides_i=[stride_h, stride_w], pads_i=[pad_h, pad_w, pad_h, pad_w],
                dilations_i=[dil_h, dil_w], group_i=n_weight_grps, offset_group_i=n_offset_grps,
                kernel_shape_i=[kh, kw])
    return _typed_like(y, input)


def _register() -> None:
    # Re-done before every export (cheap, idempotent): registrations are process-wide and other code
    # (pipeline.recipes) registers and unregisters its own symbolic for the same op.
    register_custom_op_symbolic("torchvision::deform_conv2d", _deform_conv2d_symbolic, 9)
    DynamicResizeFunction.symbolic = staticmethod(_dynamic_resize_symbolic)
    ResizeByScaleFunction.symbolic = staticmethod(_resize_by_scale_symbolic)


def export(module: torch.nn.Module, args: tuple, input_names: list[str], *, ops: str, opset: int) -> onnx.ModelProto:
    _register()
    dynamic_axes = {input_names[0]: {0: "batch", 2: "height", 3: "width"},
                    "output": {0: "batch", 2: "out_height", 3: "out_width"}}
    buf = io.BytesIO()
    _state["ops"] = ops
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            torch.onnx.export(module, args, buf, dynamo=False, input_names=input_names, output_names=["output"],
                              dynamic_axes=dynamic_axes, opset_version=opset, do_constant_folding=True)
    finally:
        _state["ops"] = "custom"
    return onnx.load_from_string(buf.getvalue())
