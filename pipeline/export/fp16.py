"""FP32 -> FP16 conversion of an exported graph (TensorRT 11 builds FP16 engines only from FP16 graphs).

Weights, float constants and Casts to float become float16. Tensors that ONNX requires to stay float32
(Resize roi/scales and whatever only feeds them, e.g. the `scale` input) are left alone. With
io_dtype="fp32" the graph keeps float32 I/O through Cast nodes at the boundary; "fp16" makes `input`
and `output` half.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# Inputs that must be tensor(float) whatever the data type, per op: op_type -> input indices.
_FLOAT32_ONLY_INPUTS = {"Resize": (1, 2)}
IMAGE_INPUT, OUTPUT = "input", "output"


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


def _half_tensor(t: onnx.TensorProto) -> onnx.TensorProto:
    arr = numpy_helper.to_array(t).astype(np.float16)
    return numpy_helper.from_array(arr, t.name)


def _halve_node_constants(g: onnx.GraphProto, keep: set[str]) -> None:
    """float32 Constant values and Cast targets -> float16, except in nodes producing a value kept in fp32."""
    for node in g.node:
        if any(o in keep for o in node.output):
            continue
        for a in node.attribute:
            is_value = node.op_type in ("Constant", "ConstantOfShape") and a.name == "value"
            if is_value and a.t.data_type == TensorProto.FLOAT:
                a.t.CopyFrom(_half_tensor(a.t))
            elif node.op_type == "Constant" and a.name in ("value_float", "value_floats"):
                raise NotImplementedError(f"Constant {a.name} in FP16 conversion (node {node.name})")
            elif node.op_type == "Cast" and a.name == "to" and a.i == TensorProto.FLOAT:
                a.i = TensorProto.FLOAT16


def _cast_io(g: onnx.GraphProto) -> None:
    """Keep float32 graph I/O around a half graph: Cast after the input, Cast before the output."""
    half_in, half_out = IMAGE_INPUT + "_fp16", OUTPUT + "_fp16"
    for node in g.node:
        for k, name in enumerate(node.input):
            if name == IMAGE_INPUT:
                node.input[k] = half_in
        for k, name in enumerate(node.output):
            if name == OUTPUT:
                node.output[k] = half_out
    g.node.insert(0, helper.make_node("Cast", [IMAGE_INPUT], [half_in], to=TensorProto.FLOAT16,
                                      name="cast_input_fp16"))
    g.node.append(helper.make_node("Cast", [half_out], [OUTPUT], to=TensorProto.FLOAT, name="cast_output_fp32"))


def convert_to_fp16(model: onnx.ModelProto, io_dtype: str = "fp32") -> onnx.ModelProto:
    if io_dtype not in ("fp32", "fp16"):
        raise ValueError(f"io_dtype must be fp32 or fp16, got {io_dtype!r}")
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    keep = _keep_fp32(g)
    for i, init in enumerate(g.initializer):
        if init.data_type == TensorProto.FLOAT and init.name not in keep:
            g.initializer[i].CopyFrom(_half_tensor(init))
    _halve_node_constants(g, keep)
    if io_dtype == "fp16":
        next(i for i in g.input if i.name == IMAGE_INPUT).type.tensor_type.elem_type = TensorProto.FLOAT16
        next(o for o in g.output if o.name == OUTPUT).type.tensor_type.elem_type = TensorProto.FLOAT16
    else:
        _cast_io(g)
    del g.value_info[:]
    return out
