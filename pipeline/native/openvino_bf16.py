"""sr::DeformConv2d in bf16 for OpenVINO: our CPU kernel (kernels_cpu.deform_conv2d_bf16) as a custom operation.

    bf16_deform_conv(inputs, attrs, threads) -> OpenVINO node | None
    compile_config(model) -> dict   what compile_model needs for a model that runs it

OpenVINO's DeformableConvolution has no bf16 CPU kernel: where a model is compiled at bf16 inference precision (the
bf16 precision, and the float parts of an int8 file: openvino_backend.inference_hint) it ran in FP32 and took most of
deform-srcnn's time. Our kernel rounds the input, the weights and the sampled columns to bf16 and accumulates in FP32
(AVX512-BF16), as OpenVINO's bf16 convolutions do. Without the kernel library the conversion returns None and the
FP32 DeformableConvolution runs as before.
"""
from __future__ import annotations

import numpy as np

from pipeline.errors import PipelineError
from pipeline.native import kernels_cpu


def bf16_deform_conv(inputs: list, attrs: dict, threads: int | None):
    """DeformConv2dBf16 on sr::DeformConv2d's inputs (X, W, offset, bias or None, mask or None), or None without
    the kernel library or with pads the kernel does not take (different begin and end pads)."""
    if attrs["pads_begin"] != attrs["pads_end"]:
        return None
    try:
        kernels_cpu.library()
    except PipelineError:  # no kernel library built: OpenVINO's FP32 DeformableConvolution runs instead
        return None
    import openvino.opset13 as ops

    x, weight, offset, bias, mask = inputs
    split = mask_logits_split(offset, mask)
    if split is not None:  # one tensor of offsets and mask logits: no split copies, the kernel takes the sigmoid
        offset, mask = split, None
    # X, offset and mask in bf16 (what OpenVINO's bf16 layers around hold), the output too: no FP32 copies of them
    bf16 = [ops.convert(t, "bf16").output(0) if t is not None else None for t in (x, offset, mask)]
    present = [t for t in (bf16[0], weight, bf16[1], bias, bf16[2]) if t is not None]
    config = {"attrs": attrs, "bias": bias is not None, "mask": mask is not None, "logits": split is not None,
              "threads": int(threads or 0)}
    return ops.convert(_op_class()(present, config).output(0), "f32")


def _constant(output, depth: int = 3) -> np.ndarray | None:
    """The value of an output computed from constants alone (the frontend may wrap one in Convert or Unsqueeze),
    evaluated node by node; None when it depends on anything else."""
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


def _channel_slice(output) -> tuple | None:
    """(source, start, stop) of a step-1 Slice along the channel axis with constant bounds, else None."""
    node = output.get_node()
    if node.get_type_name() != "Slice" or node.get_input_size() != 5:
        return None
    start, stop, step, axes = (_constant(node.input_value(i)) for i in range(1, 5))
    if any(v is None or v.size != 1 for v in (start, stop, step, axes)) or int(step.item()) != 1 or \
            int(axes.item()) != 1:
        return None
    return node.input_value(0), int(start.item()), int(stop.item())


def mask_logits_split(offset, mask):
    """The tensor T where offset = T[:, :2k] and mask = Sigmoid(T[:, 2k:3k]) with T's 3k channels (a torchvision
    model's offset/mask convolution, split: OpenVINO copies both parts out of it), else None."""
    if mask is None or mask.get_node().get_type_name() != "Sigmoid":
        return None
    a, b = _channel_slice(offset), _channel_slice(mask.get_node().input_value(0))
    if a is None or b is None or a[0].get_node().get_friendly_name() != b[0].get_node().get_friendly_name() or \
            a[0].get_index() != b[0].get_index():
        return None
    channels = a[0].get_partial_shape()[1]
    k2 = a[2]
    if not channels.is_static or a[1] != 0 or b[1] != k2 or k2 % 2 or channels.get_length() != k2 + k2 // 2 or \
            b[2] < channels.get_length():
        return None
    return a[0]


TYPE_NAME = "DeformConv2dBf16"


def compile_config(model) -> dict:
    """OpenVINO CPU settings for a model that runs our kernel: unpinned threads. OpenVINO pins its inference threads
    to cores, and the kernel's worker threads, started from one, inherit its single core (measured: 427 ms for the
    768x768 layer pinned, 270 ms not, against 223 ms outside OpenVINO; 2-core EPYC)."""
    if any(op.get_type_name() == TYPE_NAME for op in model.get_ops()):
        return {"ENABLE_CPU_PINNING": False}
    return {}


_OP = None


def _op_class():
    """DeformConv2dBf16, an openvino.Op, defined on first use (OpenVINO is imported only by the backend that runs
    it)."""
    global _OP
    if _OP is None:
        _OP = _define_op()
    return _OP


def _define_op():
    import openvino as ov
    from openvino import Op

    class DeformConv2dBf16(Op):
        """Inputs: X, W, offset[, bias][, mask] (X, offset, mask and the output bf16, W and bias float32); the
        convolution's attributes are the node's config."""

        def __init__(self, inputs=None, config=None):
            super().__init__(self)
            self.config = config or {}
            if inputs:
                self.set_arguments(inputs)
                self.constructor_validate_and_infer_types()

        def validate_and_infer_types(self):
            x, w, off = (self.get_input_partial_shape(i) for i in range(3))
            self.set_output_type(0, ov.Type.bf16, ov.PartialShape([x[0], w[0], off[2], off[3]]))

        def clone_with_new_inputs(self, new_inputs):
            return DeformConv2dBf16(new_inputs, self.config)

        def get_type_name(self):
            return TYPE_NAME

        def has_evaluate(self):
            return True

        def visit_attributes(self, visitor):
            return True

        def evaluate(self, outputs, inputs):
            x, w, off = (inputs[i].shape for i in range(3))
            outputs[0].shape = ov.Shape([x[0], w[0], off[2], off[3]])
            run(self.config, [_values(t) for t in inputs], outputs[0].data)
            return True

    return DeformConv2dBf16


def _values(tensor) -> np.ndarray:
    """An OpenVINO tensor's values: bf16 ones as their bit patterns (uint16), others as they are."""
    data = tensor.data
    return data.view(np.uint16) if tensor.element_type.get_type_name() == "bf16" else data


def run(config: dict, tensors: list[np.ndarray], out: np.ndarray | None = None) -> np.ndarray:
    """The kernel on one call's tensors (X, W, offset[, bias][, mask]; X, offset and mask bf16 bit patterns) with a
    node's config, into `out` (bf16) if given.

    A CPU without bf16 hands this node float32 inputs (the graph's Converts to bf16 lowered away; `out` may be
    either): they are rounded to bf16 here as the Converts would have, so the node computes the same bytes on every
    CPU."""
    if tensors[0].dtype == np.float32:
        rounded = {0, 2} | ({3 + config["bias"]} if config["mask"] else set())  # X, offset, mask; not W or bias
        result = run(config, [to_bf16_bits(t) if i in rounded else t for i, t in enumerate(tensors)])
        if out is None:
            return result
        if out.dtype.itemsize == 2:  # bf16 bit patterns (OpenVINO shows a bf16 tensor as a float16 view)
            np.copyto(out.view(np.uint16), result)
        else:
            np.copyto(out, (result.astype(np.uint32) << 16).view(np.float32))
        return out
    x, weight, offset, rest = tensors[0], _float32(tensors[1]), tensors[2], list(tensors[3:])
    bias = _float32(rest.pop(0)) if config["bias"] else None
    mask = rest.pop(0) if config["mask"] else None
    if config["logits"]:  # offsets and mask logits in one tensor (mask_logits_split)
        k2 = offset.shape[1] * 2 // 3
        offset, mask = offset[:, :k2], offset[:, k2:]
    a = config["attrs"]
    return kernels_cpu.deform_conv2d_bf16(
        x, weight, offset, bias, mask, stride=a["strides"], padding=a["pads_begin"], dilation=a["dilations"],
        groups=a["group"], offset_groups=a["deformable_group"], threads=config["threads"], out=out, bf16_io=True,
        mask_logits=config["logits"])


def to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """float32 values rounded to bf16 (to nearest, ties to even, as OpenVINO's Convert), as bit patterns (uint16);
    NaN stays NaN."""
    bits = np.ascontiguousarray(values, np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(values), np.uint16(0x7FC0), rounded)


def _float32(values: np.ndarray) -> np.ndarray:
    """Weights or bias as float32, from bf16 bit patterns where OpenVINO handed them over in bf16."""
    if values.dtype == np.uint16:
        return (values.astype(np.uint32) << 16).view(np.float32)
    return values
