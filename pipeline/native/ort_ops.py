"""Our CPU kernels as ONNX Runtime's `sr` domain ops (onnxruntime-extensions Python custom ops).

`session_with_sr_kernels(model)` runs an exported graph whose sr function bodies were stripped (exactly as for
TensorRT, `pipeline.export.strip_sr_functions`) with libsr_kernels_cpu.so in place of the TensorRT plugins: a CPU
stand-in for the engine that checks the plugin math inside the real model.

onnxruntime-extensions' Python ops have fixed input counts, only scalar/string attributes and no float16, so the
session runs an adapted copy of the graph (`adapt_for_ort`): every sr node gets all 5 DeformConv2d inputs (a
zero-size tensor marks an absent bias/mask), list attributes are passed as "a,b,..." strings, plugin-only attributes
are dropped, and float16 sr nodes are wrapped in Casts with `emulate_fp16=1` (the kernel rounds as FP16 I/O would).
"""
from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from pipeline.contract import DEFORM_CONV, DOMAIN, DYNAMIC_RESIZE
from pipeline.errors import PipelineError, first_line
from pipeline.native import kernels_cpu

ABSENT = "sr_ort_absent_input"  # zero-size float tensor standing for an absent optional input
_LIST_ATTRS = ("strides", "pads", "dilations", "kernel_shape")
_INT_ATTRS = ("group", "offset_group")


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


# Errors raised inside our op callbacks. They must not propagate: a Python exception thrown through ONNX Runtime's
# C++ (pybind11 error_already_set) terminates the process. The op returns zeros instead and `run` raises this.
_op_errors: list[Exception] = []


def _guarded(op, out_shape):
    """`op` that records its exception and returns zeros of `out_shape(*inputs)` instead of raising into ORT."""
    @functools.wraps(op)
    def call(*inputs, **attrs):
        try:
            return op(*inputs, **attrs)
        except Exception as e:  # any failure: reported by `run` as one line
            _op_errors.append(e)
            return np.zeros(out_shape(*inputs), np.float32)
    return call


def _guarded_as(out_shape):
    return lambda op: _guarded(op, out_shape)


def run(session, feeds: dict, outputs: list[str] | None = None) -> list:
    """session.run for a session made by `session_with_sr_kernels`: an error inside one of our kernels is one
    PipelineError line, not a process abort."""
    _op_errors.clear()
    try:
        result = session.run(outputs, feeds)
    except Exception:
        if not _op_errors:
            raise
        result = None
    if _op_errors:
        raise PipelineError(f"sr kernel failed: {first_line(_op_errors[0])}")
    return result


@functools.cache
def register_sr_ops() -> str:
    """Registers sr::DynamicResize and sr::DeformConv2d once per process; returns the extensions library path."""
    try:
        from onnxruntime_extensions import PyCustomOpDef, get_library_path, onnx_op
    except ImportError as e:  # pragma: no cover - a declared dependency
        raise PipelineError(f"onnxruntime-extensions is needed for the sr kernels in ORT: {e}") from None
    f32, i64, s = PyCustomOpDef.dt_float, PyCustomOpDef.dt_int64, PyCustomOpDef.dt_string

    @onnx_op(op_type=f"{DOMAIN}::{DYNAMIC_RESIZE}", inputs=[f32, i64], outputs=[f32],
             attrs={"emulate_fp16": i64})
    @_guarded_as(lambda x, size: (*x.shape[:2], *(max(int(v), 0) for v in np.ravel(size)[:2])))
    def _dynamic_resize(x, size, emulate_fp16=0):
        return kernels_cpu.dynamic_resize(x, size, emulate_fp16=bool(emulate_fp16))

    @onnx_op(op_type=f"{DOMAIN}::{DEFORM_CONV}", inputs=[f32] * 5, outputs=[f32],
             attrs={**{a: s for a in _LIST_ATTRS}, **{a: i64 for a in _INT_ATTRS}, "emulate_fp16": i64})
    @_guarded_as(lambda x, weight, offset, *rest: (x.shape[0], weight.shape[0], *offset.shape[2:4]))
    def _deform_conv2d(x, weight, offset, bias, mask, strides="", pads="", dilations="", kernel_shape="",
                       group=1, offset_group=1, emulate_fp16=0):
        k = _ints(kernel_shape)
        if k and tuple(k) != tuple(weight.shape[2:]):
            raise PipelineError(f"DeformConv2d kernel_shape {k} does not match weight shape {weight.shape}")
        return kernels_cpu.deform_conv2d(
            x, weight, offset, bias if bias.size else None, mask if mask.size else None,
            stride=_ints(strides) or 1, padding=_ints(pads) or 0, dilation=_ints(dilations) or 1,
            groups=int(group), offset_groups=int(offset_group), emulate_fp16=bool(emulate_fp16))

    return get_library_path()


def _load(model: onnx.ModelProto | str | Path) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        return model
    path = Path(model)
    if not path.is_file():
        raise PipelineError(f"ONNX model not found: {path}")
    return onnx.load(str(path))


def _elem_types(model: onnx.ModelProto) -> dict[str, int]:
    """Element type of every value ONNX shape inference can type (sr outputs typed like their first input)."""
    work = onnx.ModelProto()
    work.CopyFrom(model)
    sr_nodes = [n for n in work.graph.node if n.domain == DOMAIN]
    types: dict[str, int] = {}
    for _ in range(len(sr_nodes) + 1):
        g = onnx.shape_inference.infer_shapes(work, strict_mode=False).graph
        types = {vi.name: vi.type.tensor_type.elem_type for vi in [*g.input, *g.value_info, *g.output]
                 if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type}
        types.update({t.name: t.data_type for t in g.initializer})
        new = [helper.make_tensor_value_info(n.output[0], types[n.input[0]], None) for n in sr_nodes
               if n.input and n.input[0] in types and n.output[0] not in types]
        if not new:
            break
        work.graph.value_info.extend(new)
    return types


def adapt_for_ort(model: onnx.ModelProto) -> onnx.ModelProto:
    """Copy of a stripped model whose sr nodes fit the Python custom op definitions (see module docstring)."""
    if any(f.domain == DOMAIN for f in model.functions):
        raise PipelineError("model still has sr function bodies: pass it through "
                            "pipeline.export.strip_sr_functions first")
    types = _elem_types(model)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    nodes: list[onnx.NodeProto] = []
    need_absent = False
    for node in out.graph.node:
        if node.domain != DOMAIN:
            nodes.append(node)
            continue
        if node.op_type not in (DYNAMIC_RESIZE, DEFORM_CONV):
            raise PipelineError(f"unknown sr op {node.op_type!r} (node {node.name!r})")
        inputs = list(node.input)
        attrs: dict[str, object] = {}
        if node.op_type == DEFORM_CONV:
            if not 3 <= len(inputs) <= 5:
                raise PipelineError(f"DeformConv2d node {node.name!r} has {len(inputs)} inputs, expected 3 to 5")
            inputs += [""] * (5 - len(inputs))
            need_absent |= any(not name for name in inputs[3:])
            inputs = inputs[:3] + [name or ABSENT for name in inputs[3:]]
            for a in node.attribute:
                if a.name in _LIST_ATTRS:
                    attrs[a.name] = ",".join(str(v) for v in a.ints)
                elif a.name in _INT_ATTRS:
                    attrs[a.name] = int(a.i)
        elif len(inputs) != 2:
            raise PipelineError(f"DynamicResize node {node.name!r} has {len(inputs)} inputs, expected 2")
        float_inputs = [0] if node.op_type == DYNAMIC_RESIZE else [i for i in range(5) if inputs[i] != ABSENT]
        elem = types.get(node.input[0])
        outputs = list(node.output)
        tag = node.name or f"{node.op_type}_{len(nodes)}"
        if elem != TensorProto.FLOAT:
            # Kernels compute in float32: cast in, cast back like the original input (float16 => emulate rounding).
            for i in float_inputs:
                cast = f"{tag}_{i}_as_f32"
                nodes.append(helper.make_node("Cast", [inputs[i]], [cast], to=TensorProto.FLOAT))
                inputs[i] = cast
            y32 = f"{tag}_out_f32"
            nodes_after = [helper.make_node("CastLike", [y32, node.input[0]], [outputs[0]])]
            outputs[0] = y32
            attrs["emulate_fp16"] = int(elem == TensorProto.FLOAT16)
        else:
            nodes_after = []
            attrs["emulate_fp16"] = 0
        nodes.append(helper.make_node(node.op_type, inputs, outputs, name=node.name, domain=DOMAIN, **attrs))
        nodes.extend(nodes_after)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    if need_absent and all(t.name != ABSENT for t in out.graph.initializer):
        out.graph.initializer.append(helper.make_tensor(ABSENT, TensorProto.FLOAT, [0], []))
    if not any(op.domain == DOMAIN for op in out.opset_import):
        out.opset_import.append(helper.make_opsetid(DOMAIN, 1))
    return out


def session_with_sr_kernels(model: onnx.ModelProto | str | Path, session_options=None):
    """onnxruntime.InferenceSession (CPU) running `model` with our CPU kernels as the sr ops.

    `model` (ModelProto or path) must have its sr function bodies stripped (pipeline.export.strip_sr_functions).
    """
    # Load the kernel library now: the ops call it from inside ORT, where a Python exception (library missing)
    # cannot propagate and terminates the process (pybind11 error_already_set through C++, exit 134).
    kernels_cpu.library()
    adapted = adapt_for_ort(_load(model))
    so = session_options or ort.SessionOptions()
    if session_options is None:
        so.log_severity_level = 4  # ORT's colour log lines would repeat the error we raise as one line
    so.register_custom_ops_library(register_sr_ops())
    try:
        return ort.InferenceSession(adapted.SerializeToString(), so, providers=["CPUExecutionProvider"])
    except Exception as e:  # ORT raises its own exception types
        raise PipelineError(f"ONNX Runtime rejected the model with sr kernels: {first_line(e)}") from None
