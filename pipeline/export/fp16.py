"""FP32 -> FP16 / BF16 conversion of an exported graph (TensorRT 11 networks are strongly typed: an FP16 or BF16
engine is built only from an FP16 or BF16 graph).

Weights, float constants and Casts to float become half. Tensors that ONNX requires to stay float32
(Resize roi/scales and whatever only feeds them, e.g. the `scale` input) are left alone. With
io_dtype="fp32" the graph keeps float32 I/O through Cast nodes at the boundary; "fp16" makes `input`
and `output` half.

BF16 (convert_to_bf16, made at engine build time from the fp32 file): our sr ops stay FP32 between Casts, their
weights too (the plugins run FP32 and FP16), and so does Resize (the bicubic upscale reads the float32 image and is
rounded to bf16 after it, not before); the default-domain opset is raised to 22, the first that admits bfloat16 in
Conv and its neighbours.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper, version_converter

from pipeline.export.sr_ops import DOMAIN, DYNAMIC_RESIZE, DYNAMIC_RESIZE_SHAPE_INPUTS
from pipeline.precisions import BY_NAME, GRAPH
from pipeline.precisions import HALF as HALF_PRECISIONS

# Inputs that must be tensor(float) whatever the data type, per op: op_type -> input indices.
_FLOAT32_ONLY_INPUTS = {"Resize": (1, 2)}
IMAGE_INPUT, OUTPUT = "input", "output"
# each 16-bit float precision: its ONNX type and numpy type (numpy has no bfloat16: ml_dtypes' then)
HALF = {p.name: (p.onnx_type, getattr(np, p.numpy, None) or getattr(ml_dtypes, p.numpy))
        for p in map(BY_NAME.get, HALF_PRECISIONS)}
BF16_OPSET = 22  # the first default-domain opset whose Conv (and Relu, Sigmoid, Slice, ...) admit bfloat16


def _keep_fp32(graph: onnx.GraphProto) -> set[str]:
    producer = {o: n for n in graph.node for o in n.output}
    keep: set[str] = set()
    stack = [n.input[i] for n in graph.node for i in _FLOAT32_ONLY_INPUTS.get(n.op_type, ())
             if i < len(n.input) and n.input[i]]
    while stack:
        name = stack.pop()
        if name in keep:
            continue
        keep.add(name)
        node = producer.get(name)
        if node is not None and node.op_type in ("Concat", "Cast", "Constant", "Identity", "Unsqueeze",
                                                 "Reshape", "Mul", "Div", "Add", "Sub"):
            stack.extend(i for i in node.input if i)
    return keep


def _half_tensor(t: onnx.TensorProto, half: str = "fp16") -> onnx.TensorProto:
    arr = numpy_helper.to_array(t).astype(HALF[half][1])
    return numpy_helper.from_array(arr, t.name)


def _runs_fp32(node: onnx.NodeProto) -> bool:
    """A node a bf16 graph runs in FP32 between Casts: our sr ops, and Resize (the image's bicubic upscale)."""
    return node.domain == DOMAIN or (node.domain in ("", "ai.onnx") and node.op_type == "Resize")


def _sr_float_inputs(g: onnx.GraphProto) -> list[tuple[int, int]]:
    """(node index, input index) of every float data input of the nodes run in FP32: our sr ops' (all but
    DynamicResize's int64 size) and Resize's X (its roi and scales are float32 anyway)."""
    return [(i, k) for i, n in enumerate(g.node) if _runs_fp32(n) for k, name in enumerate(n.input)
            if name and not (n.op_type == DYNAMIC_RESIZE and k in DYNAMIC_RESIZE_SHAPE_INPUTS)
            and not (n.op_type == "Resize" and k > 0)]


def _sr_ops_in_fp32(g: onnx.GraphProto, keep: set[str], half: str) -> None:
    """Our sr ops and Resize between Casts: float inputs computed in the graph -> float32 before, outputs -> half
    after (the image input itself is read as the float32 graph input, never rounded to half first). Their constant
    inputs (weights, biases) are in `keep`, so they stay float32 and need no Cast. Runs after _cast_io."""
    nodes = list(g.node)
    before: dict[int, list[onnx.NodeProto]] = {}
    for i, k in _sr_float_inputs(g):
        node, name = nodes[i], nodes[i].input[k]
        if name == f"{IMAGE_INPUT}_{half}":
            node.input[k] = IMAGE_INPUT
        elif name not in keep:
            node.input[k] = f"{name}_fp32_for_{node.name or node.op_type}_{k}"
            before.setdefault(i, []).append(helper.make_node("Cast", [name], [node.input[k]], to=TensorProto.FLOAT,
                                                             name=f"cast_{node.input[k]}"))
    out: list[onnx.NodeProto] = []
    for i, node in enumerate(nodes):
        out += before.get(i, [])
        out.append(node)
        if _runs_fp32(node):
            for k, name in enumerate(node.output):
                node.output[k] = f"{name}_fp32"
                out.append(helper.make_node("Cast", [node.output[k]], [name], to=HALF[half][0],
                                          name=f"cast_{name}_{half}"))
    if not any(f"{IMAGE_INPUT}_{half}" in n.input for n in out):  # only sr ops read the image: no input Cast
        out = [n for n in out if n.name != f"cast_input_{half}"]
    del g.node[:]
    g.node.extend(out)


def _halve_node_constants(g: onnx.GraphProto, keep: set[str], half: str = "fp16") -> None:
    """float32 Constant values and Cast targets -> half, except in nodes producing a value kept in fp32."""
    for node in g.node:
        if any(o in keep for o in node.output):
            continue
        for a in node.attribute:
            is_value = node.op_type in ("Constant", "ConstantOfShape") and a.name == "value"
            if is_value and a.t.data_type == TensorProto.FLOAT:
                a.t.CopyFrom(_half_tensor(a.t, half))
            elif node.op_type == "Constant" and a.name in ("value_float", "value_floats"):
                raise NotImplementedError(f"Constant {a.name} in FP16 conversion (node {node.name})")
            elif node.op_type == "Cast" and a.name == "to" and a.i == TensorProto.FLOAT:
                a.i = HALF[half][0]


def _cast_io(g: onnx.GraphProto, half: str = "fp16") -> None:
    """Keep float32 graph I/O around a half graph: Cast after the input, Cast before the output."""
    half_in, half_out = f"{IMAGE_INPUT}_{half}", f"{OUTPUT}_{half}"
    for node in g.node:
        for k, name in enumerate(node.input):
            if name == IMAGE_INPUT:
                node.input[k] = half_in
        for k, name in enumerate(node.output):
            if name == OUTPUT:
                node.output[k] = half_out
    g.node.insert(0, helper.make_node("Cast", [IMAGE_INPUT], [half_in], to=HALF[half][0], name=f"cast_input_{half}"))
    g.node.append(helper.make_node("Cast", [half_out], [OUTPUT], to=TensorProto.FLOAT, name="cast_output_fp32"))


def convert_to_fp16(model: onnx.ModelProto, io_dtype: str = "fp32") -> onnx.ModelProto:
    if io_dtype not in GRAPH:
        raise ValueError(f"io_dtype must be fp32 or fp16, got {io_dtype!r}")
    return _convert(model, "fp16", io_dtype)


def convert_to_bf16(model: onnx.ModelProto) -> onnx.ModelProto:
    """The BF16 graph of an fp32 one, float32 I/O, our sr ops (their plugins have no BF16) and Resize in FP32
    between Casts."""
    functions = list(model.functions)  # the version converter drops model-local functions
    if max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0) < BF16_OPSET:
        model = version_converter.convert_version(model, BF16_OPSET)
        del model.functions[:]
        model.functions.extend(functions)
        for f in model.functions:  # a function must import the model's version; our bodies' ops (Shape, Gather,
            for o in f.opset_import:  # Cast, arithmetic, DeformConv) mean the same at 22
                if o.domain in ("", "ai.onnx"):
                    o.version = BF16_OPSET
    return _convert(model, "bf16", "fp32")


def _convert(model: onnx.ModelProto, half: str, io_dtype: str) -> onnx.ModelProto:
    elem = HALF[half][0]
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    keep = _keep_fp32(g)
    if half == "bf16":
        consts = {i.name for i in g.initializer} | {o for n in g.node if n.op_type == "Constant" for o in n.output}
        keep |= {g.node[i].input[k] for i, k in _sr_float_inputs(g) if g.node[i].input[k] in consts}
    for i, init in enumerate(g.initializer):
        if init.data_type == TensorProto.FLOAT and init.name not in keep:
            g.initializer[i].CopyFrom(_half_tensor(init, half))
    _halve_node_constants(g, keep, half)
    if io_dtype == "fp16":
        next(i for i in g.input if i.name == IMAGE_INPUT).type.tensor_type.elem_type = elem
        next(o for o in g.output if o.name == OUTPUT).type.tensor_type.elem_type = elem
    else:
        _cast_io(g, half)
    if half == "bf16":
        _sr_ops_in_fp32(g, keep, half)
    del g.value_info[:]
    return out
