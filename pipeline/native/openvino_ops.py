"""Our sr ops in OpenVINO: conversion extensions for its ONNX frontend, so an exported file runs as it is.

    extensions() -> [ConversionExtension]   for Core.add_extension, before read_model

- `sr::DynamicResize` becomes OpenVINO operations doing the arithmetic of the C++ kernels and of the ONNX
  function body (pipeline.export.sr_ops._cubic_taps): source positions split into floor and fraction with int64
  math, the 4x4 taps gathered and weighted, each row's columns first, then the rows, in float32. So tiles equal
  the whole image here too (the taps depend only on the size ratio and the output index's phase). To its own
  size it is the identity (the input selected), as there: a NaN does not spread to its neighbours.
- `sr::DeformConv2d` becomes DeformableConvolution-8 (offsets and mask as torchvision lays them out, bilinear
  sampling that reads zeros outside the image) plus the bias; at bf16 inference precision (which OpenVINO's
  DeformableConvolution does not have) our bf16 CPU kernel instead (pipeline.native.openvino_bf16).
OpenVINO is imported only by the backend that runs it; its runtime sends no telemetry.
"""
from __future__ import annotations

import numpy as np

from pipeline.contract import DEFORM_CONV, DOMAIN, DYNAMIC_RESIZE, RESIZE_ATTRS
from pipeline.errors import PipelineError
from pipeline.native.openvino_bf16 import bf16_deform_conv


def _ops():
    import openvino.opset13 as ops

    return ops


def _cubic_taps(ops, in_size, out_size):
    """Tap indices and weights along one axis (scalar int64 in_size, out_size), as models.ops.cubic_taps."""
    i64 = lambda v: ops.constant(np.int64(v))  # noqa: E731 - scalar constants
    f32 = lambda v: ops.constant(np.float32(v))  # noqa: E731
    dst = ops.range(i64(0), out_size, i64(1), output_type="i64")
    den = ops.multiply(out_size, i64(2))
    num = ops.subtract(ops.multiply(ops.add(ops.multiply(dst, i64(2)), i64(1)), in_size), out_size)
    rem = ops.floor_mod(num, den)  # in [0, den)
    first = ops.divide(ops.subtract(num, rem), den)  # exact: num - rem is a multiple of den
    t = ops.divide(ops.convert(rem, "f32"), ops.convert(den, "f32"))
    a = RESIZE_ATTRS["cubic_coeff_a"]

    def cubic1(x):  # |x| <= 1, the C++ header's expression and order
        return ops.add(ops.multiply(ops.multiply(ops.subtract(ops.multiply(x, f32(a + 2)), f32(a + 3)), x), x),
                       f32(1.0))

    def cubic2(x):  # 1 < |x| < 2
        inner = ops.add(ops.multiply(ops.subtract(ops.multiply(x, f32(a)), f32(5 * a)), x), f32(8 * a))
        return ops.subtract(ops.multiply(inner, x), f32(4 * a))

    weights = [cubic2(ops.add(t, f32(1.0))), cubic1(t), cubic1(ops.subtract(f32(1.0), t)),
               cubic2(ops.subtract(f32(2.0), t))]
    last = ops.subtract(in_size, i64(1))
    index = [ops.minimum(ops.maximum(ops.add(first, i64(k - 1)), i64(0)), last) for k in range(4)]
    return index, weights


def convert_dynamic_resize(node) -> list:
    if node.get_input_size() != 2:  # the ORT op's refusal (pipeline.native.ort_ops.adapt_for_ort)
        raise PipelineError(f"DynamicResize node has {node.get_input_size()} inputs, expected 2")
    ops = _ops()
    x, size = node.get_input(0), node.get_input(1)
    shape = ops.shape_of(x, output_type="i64")
    scalar = lambda src, i: ops.gather(src, ops.constant(np.int64(i)), ops.constant(np.int64(0)))  # noqa: E731
    ys, wy = _cubic_taps(ops, scalar(shape, 2), scalar(size, 0))
    xs, wx = _cubic_taps(ops, scalar(shape, 3), scalar(size, 1))
    xf = ops.convert(x, "f32")
    cols = None  # every source row's 4 columns first ([N, C, H_in, W_out]), then the 4 rows: the kernels' sums
    for j in range(4):
        term = ops.multiply(ops.gather(xf, xs[j], ops.constant(np.int64(3))), wx[j])
        cols = term if cols is None else ops.add(cols, term)
    out = None
    for r in range(4):
        w = ops.unsqueeze(wy[r], ops.constant(np.int64(1)))  # [H_out, 1]
        term = ops.multiply(ops.gather(cols, ys[r], ops.constant(np.int64(2))), w)
        out = term if out is None else ops.add(out, term)
    # To its own size the resize is the identity, as the C++ kernels' copy and the ONNX body's If branch make it:
    # the centre tap (the input itself then) is selected, so a NaN stays in its pixel instead of reaching the
    # neighbours through their taps' zero weights (NaN * 0): the same non-finite count on every backend.
    same = ops.logical_and(ops.equal(scalar(shape, 2), scalar(size, 0)), ops.equal(scalar(shape, 3), scalar(size, 1)))
    centre = ops.gather(ops.gather(xf, ys[1], ops.constant(np.int64(2))), xs[1], ops.constant(np.int64(3)))
    return [ops.convert_like(ops.select(same, centre, out), x).output(0)]


def _ints(node, name: str, default: list[int]) -> list[int]:
    try:
        return [int(v) for v in node.get_attribute(name)]
    except Exception:  # an attribute the node does not carry: ONNX's default
        return default


def _int(node, name: str, default: int) -> int:
    try:
        return int(node.get_attribute(name))
    except Exception:
        return default


def deform_attrs(node) -> dict:
    """The node's DeformConv attributes, refused as our ONNX Runtime op and CPU kernels refuse them (the same
    lines: pipeline.native.ort_ops, kernels_cpu.deform_conv2d): 3 to 5 inputs, a kernel_shape that is the weight's,
    positive strides and dilations, non-negative pads (2 or 4), positive groups."""
    count = node.get_input_size()
    if not 3 <= count <= 5:
        raise PipelineError(f"DeformConv2d node has {count} inputs, expected 3 to 5")
    pads = _ints(node, "pads", [0, 0, 0, 0])
    if len(pads) == 2:
        pads = pads * 2
    if len(pads) != 4:
        raise PipelineError(f"padding must be an int, a pair or 4 ONNX pads, got {pads!r}")
    strides, dilations = _ints(node, "strides", [1, 1]), _ints(node, "dilations", [1, 1])
    strides, dilations = [strides * 2 if len(strides) == 1 else strides, dilations * 2 if len(dilations) == 1
                          else dilations]
    if len(strides) != 2 or len(dilations) != 2 or min(strides + dilations) <= 0 or min(pads) < 0:
        raise PipelineError("stride/dilation must be positive and padding non-negative")
    weight = node.get_input(1).get_partial_shape()
    kernel = _ints(node, "kernel_shape", [])
    if kernel and weight.is_static and list(kernel) != [int(d) for d in weight.to_shape()][2:]:
        raise PipelineError(f"DeformConv2d kernel_shape {kernel} does not match weight shape {weight.to_shape()}")
    group, offset_group = _int(node, "group", 1), _int(node, "offset_group", 1)
    if group <= 0 or offset_group <= 0:
        raise PipelineError(f"groups={group} and offset_groups={offset_group} must be positive")
    return {"strides": strides, "pads_begin": pads[:2], "pads_end": pads[2:], "dilations": dilations,
            "group": group, "deformable_group": offset_group}


def convert_deform_conv(node, threads: int | None = None, bf16: bool = False) -> list:
    """sr::DeformConv2d(X, W, offset[, B[, mask]]) with ONNX DeformConv's attributes (torchvision semantics): at bf16
    inference precision our bf16 kernel (pipeline.native.openvino_bf16, `threads` workers), else (or without the
    kernel library) DeformableConvolution-8, which OpenVINO runs in FP32 whatever the precision."""
    attrs = deform_attrs(node)
    ops = _ops()
    x, weight, offset = node.get_input(0), node.get_input(1), node.get_input(2)
    count = node.get_input_size()
    bias = node.get_input(3) if count > 3 else None
    mask = node.get_input(4) if count > 4 else None
    if bf16 and (fast := bf16_deform_conv([x, weight, offset, bias, mask], attrs, threads)) is not None:
        return [fast.output(0)]
    y = ops.deformable_convolution(x, offset, weight, mask=mask, bilinear_interpolation_pad=True, **attrs)
    if bias is not None:
        bias = ops.unsqueeze(bias, ops.constant(np.array([1, 2], dtype=np.int64)))  # [C] -> [C, 1, 1]
        y = ops.add(y, bias)
    return [y.output(0)]


def extensions(threads: int | None = None, bf16: bool = False) -> list:
    """The conversion extensions for Core.add_extension (OpenVINO's ONNX frontend), for a model compiled with
    `threads` inference threads (None: one per core) at bf16 inference precision or not: our bf16 DeformConv2d kernel
    runs with them."""
    from openvino.frontend.onnx import ConversionExtension

    return [ConversionExtension(DYNAMIC_RESIZE, DOMAIN, convert_dynamic_resize),
            ConversionExtension(DEFORM_CONV, DOMAIN, lambda node: convert_deform_conv(node, threads, bf16))]
