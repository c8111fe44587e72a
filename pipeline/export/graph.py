"""Exporter-independent finishing of an exported ModelProto: I/O types and names, sr function bodies,
IR version, metadata, and the full check + shape inference every written file passes."""
from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from pipeline.export import sr_ops

# ONNX Runtime 1.31 rejects IR > 13; 10 is what opsets 19..21 need and every current tool reads.
IR_VERSION = 10
IMAGE_DIMS = ("batch", 3, "height", "width")
OUTPUT_DIMS = ("batch", 3, "out_height", "out_width")


def _set_type(vi: onnx.ValueInfoProto, elem_type: int, dims) -> None:
    vi.type.CopyFrom(helper.make_tensor_type_proto(elem_type, list(dims)))


def normalise_io(model: onnx.ModelProto, size_input: str | None) -> onnx.ModelProto:
    """Contract I/O: input float[batch,3,height,width], size int64[2] / scale float[2], output
    float[batch,3,out_height,out_width]. Stale intermediate value_info is dropped (re-inferred later)."""
    g = model.graph
    names = [i.name for i in g.input]
    expected = ["input"] + ([size_input] if size_input else [])
    if names != expected:
        raise RuntimeError(f"exported graph inputs are {names}, expected {expected}")
    if [o.name for o in g.output] != ["output"]:
        raise RuntimeError(f"exported graph outputs are {[o.name for o in g.output]}, expected ['output']")
    _set_type(g.input[0], TensorProto.FLOAT, IMAGE_DIMS)
    if size_input == "size":
        _set_type(g.input[1], TensorProto.INT64, [2])
    elif size_input == "scale":
        _set_type(g.input[1], TensorProto.FLOAT, [2])
    _set_type(g.output[0], TensorProto.FLOAT, OUTPUT_DIMS)
    for vi in list(g.input) + list(g.output):
        del vi.metadata_props[:]
    del g.value_info[:]
    return model


def set_metadata(model: onnx.ModelProto, props: dict[str, str]) -> onnx.ModelProto:
    existing = {p.key: p for p in model.metadata_props}
    for k, v in props.items():
        if k in existing:
            existing[k].value = str(v)
        else:
            model.metadata_props.append(onnx.StringStringEntryProto(key=k, value=str(v)))
    return model


def metadata(model: onnx.ModelProto) -> dict[str, str]:
    return {p.key: p.value for p in model.metadata_props}


def sr_op_versions(model: onnx.ModelProto) -> str:
    """e.g. "sr.DynamicResize=1,sr.DeformConv2d=1" (empty when the graph has no sr op)."""
    return ",".join(f"{sr_ops.DOMAIN}.{t}={sr_ops.VERSION}" for t in sr_ops.used_sr_ops(model))


def finish(model: onnx.ModelProto) -> onnx.ModelProto:
    """Attach sr bodies, pin the IR version, then full check + strict shape inference (returns inferred model)."""
    sr_ops.add_sr_functions(model)
    model.ir_version = IR_VERSION
    model.producer_name = "srdeploy"
    return check(model)


def check(model: onnx.ModelProto) -> onnx.ModelProto:
    onnx.checker.check_model(model, full_check=True)
    return onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
