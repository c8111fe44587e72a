"""int8 sr::DeformConv2d in OpenVINO: our CPU kernel (kernels_cpu.deform_conv2d_int8) as a custom operation.

    int8_deform_conv(x, weight, offset, bias, mask, attrs, threads) -> OpenVINO output | None

An int8 Q/DQ file (pipeline.export.quantize) feeds DeformConv2d a dequantized input (DequantizeLinear of a
QuantizeLinear) and dequantized int8 weights (one step per output channel). OpenVINO's ONNX frontend turns each
DequantizeLinear into Multiply(Subtract(Convert(q), zero point), step); where both inputs have that form (constant
steps and zero points, constant int8 weights), the node runs as DeformConv2dInt8: the input requantized to uint8
(exact: its values lie on that grid), columns sampled and rounded to the same step, an int8 GEMM with int32
accumulation (AVX512-VNNI where the CPU has it). Anything else (an fp32 file, or no kernel library: then the
conversion says nothing and the float DeformableConvolution runs) returns None.
"""
from __future__ import annotations

import numpy as np

from pipeline.errors import PipelineError

_INT_TYPES = {"u8": 0, "i8": 128}  # zero-point shift to uint8: an int8 value q is the uint8 value q + 128


def _constant(output, depth: int = 4) -> np.ndarray | None:
    """The value of an output computed from constants alone (the frontend wraps a DequantizeLinear's step and zero
    point in Reshape and Convert nodes), evaluated node by node; None when it depends on anything else."""
    import openvino as ov

    node = output.get_node()
    if node.get_type_name() == "Constant":
        return np.array(node.get_data())
    if depth == 0 or node.get_input_size() == 0 or node.get_output_size() != 1 or \
            not node.get_output_partial_shape(0).is_static:
        return None
    values = [_constant(node.input_value(i), depth - 1) for i in range(node.get_input_size())]
    if any(v is None for v in values):
        return None
    result = ov.Tensor(node.get_output_element_type(0), node.get_output_shape(0))
    if not node.evaluate([result], [ov.Tensor(np.ascontiguousarray(v)) for v in values]):
        return None
    return np.array(result.data)


def dequantized(output) -> tuple | None:
    """(quantized source, its element type, step, zero point) when `output` is OpenVINO's form of DequantizeLinear:
    Multiply(Subtract(Convert(q), zero point) or Convert(q), step) with constant step and zero point; else None."""
    node = output.get_node()
    if node.get_type_name() != "Multiply":
        return None
    inner, step = node.input_value(0), _constant(node.input_value(1))
    zero = np.zeros((), np.float32)
    if step is None:
        return None
    if inner.get_node().get_type_name() == "Subtract":
        zero = _constant(inner.get_node().input_value(1))
        inner = inner.get_node().input_value(0)
        if zero is None:
            return None
    if inner.get_node().get_type_name() != "Convert":
        return None
    source = inner.get_node().input_value(0)
    kind = source.get_element_type().get_type_name()
    return (source, kind, step, zero) if kind in _INT_TYPES else None


def _input_grid(x) -> tuple[float, int] | None:
    """The uint8 grid (step, zero point) of a per-tensor dequantized input."""
    found = dequantized(x)
    if found is None or found[2].size != 1 or found[3].size != 1:
        return None
    _, kind, step, zero = found
    return float(step.reshape(())), int(zero.reshape(())) + _INT_TYPES[kind]


def _int8_weight(weight) -> tuple[np.ndarray, np.ndarray] | None:
    """(int8 weights, one step per output channel) of constant symmetric int8 weights, dequantized per channel."""
    found = dequantized(weight)
    if found is None or found[1] != "i8" or np.any(found[3] != 0):
        return None
    values = _constant(found[0])
    if values is None or values.ndim != 4:
        return None
    steps = np.broadcast_to(found[2].astype(np.float32).reshape(-1), (values.shape[0],)).copy() \
        if found[2].size in (1, values.shape[0]) else None
    return (values.astype(np.int8), steps) if steps is not None else None


def int8_deform_conv(x, weight, offset, bias, mask, attrs: dict, threads: int | None):
    """The int8 kernel's node for one DeformConv2d (see the module docstring), or None where it does not apply."""
    from pipeline.native import kernels_cpu

    grid, packed = _input_grid(x), _int8_weight(weight)
    if grid is None or packed is None or attrs["pads_begin"] != attrs["pads_end"]:
        return None
    try:
        kernels_cpu.library()
    except PipelineError:  # no kernel library built: the float DeformableConvolution runs instead
        return None
    return _op_class()([x, offset] + [t for t in (bias, mask) if t is not None],
                       {"grid": grid, "weight": packed[0], "steps": packed[1], "attrs": attrs,
                        "bias": bias is not None, "mask": mask is not None, "threads": int(threads or 0)})


_OP = None


def _op_class():
    """DeformConv2dInt8, an openvino.Op (defined on first use: OpenVINO is imported only by the backend that runs
    it)."""
    global _OP
    if _OP is None:
        _OP = _define_op()
    return _OP


def _define_op():
    import openvino as ov
    from openvino import Op

    class DeformConv2dInt8(Op):
        """Inputs: x, offset[, bias][, mask] (float32); the int8 weights, their steps, x's grid and the convolution's
        attributes are the node's own."""

        def __init__(self, inputs=None, config=None):
            super().__init__(self)
            self.config = config or {}
            if inputs:
                self.set_arguments(inputs)
                self.constructor_validate_and_infer_types()

        def validate_and_infer_types(self):
            x, off = self.get_input_partial_shape(0), self.get_input_partial_shape(1)
            out = ov.PartialShape([x[0], ov.Dimension(int(self.config["weight"].shape[0])), off[2], off[3]])
            self.set_output_type(0, ov.Type.f32, out)

        def clone_with_new_inputs(self, new_inputs):
            return DeformConv2dInt8(new_inputs, self.config)

        def get_type_name(self):
            return "DeformConv2dInt8"

        def has_evaluate(self):
            return True

        def visit_attributes(self, visitor):
            return True

        def evaluate(self, outputs, inputs):
            x, off = inputs[0].shape, inputs[1].shape
            outputs[0].shape = ov.Shape([x[0], int(self.config["weight"].shape[0]), off[2], off[3]])
            run(self.config, [t.data for t in inputs], outputs[0].data)
            return True

    return DeformConv2dInt8


def run(config: dict, tensors: list[np.ndarray], out: np.ndarray | None = None) -> np.ndarray:
    """The kernel on one call's tensors (x, offset[, bias][, mask]) with a node's config, into `out` if given."""
    from pipeline.native import kernels_cpu

    x, offset, rest = tensors[0], tensors[1], list(tensors[2:])
    bias = rest.pop(0) if config["bias"] else None
    mask = rest.pop(0) if config["mask"] else None
    a = config["attrs"]
    step, zero = config["grid"]
    return kernels_cpu.deform_conv2d_int8(
        x, step, zero, config["weight"], config["steps"], offset, bias, mask, stride=a["strides"],
        padding=a["pads_begin"], dilation=a["dilations"], groups=a["group"], offset_groups=a["deformable_group"],
        threads=config["threads"], out=out)
