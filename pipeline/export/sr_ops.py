"""The `sr` custom-domain ops: contract constants, ONNX schemas, model-local function bodies, strip transform.

Contract: pipeline.contract (domain "sr", v1).
- DynamicResize(X, size:int64[2]) -> Y: torch bicubic, align_corners=False, A=-0.75, with exact source
  positions. Body: Gather/Mul/Add with int64 tap arithmetic (`dynamic_resize_function`), not Resize, so tiled
  output equals whole-image output bit for bit.
- DeformConv2d(X, W, offset[, B[, mask]]) -> Y with standard DeformConv attributes. Body: DeformConv (opset 19).

The bodies make every exported file runnable by plain ONNX Runtime (or any ONNX backend); the engine stage
calls `strip_sr_functions` so TensorRT's parser, finding no body, falls back to our `sr` plugins.
"""
from __future__ import annotations

import onnx
from onnx import TensorProto, defs, helper

from pipeline.contract import (  # noqa: F401 (re-exported)
    ALLOW_TF32_ATTR,
    DEFORM_CONV,
    DEFORM_CONV_ATTRS,
    DEFORM_CONV_MIN_OPSET,
    DOMAIN,
    DYNAMIC_RESIZE,
    DYNAMIC_RESIZE_SHAPE_INPUTS,
    OP_TYPES,
    PLUGIN_NAMESPACE_ATTR,
    RESIZE_ATTRS,
    SHAPE_INPUT_ATTR,
    VERSION,
)


def register_schemas() -> None:
    """Register the sr schemas with onnx.defs (idempotent): onnxscript needs them to emit sr.* calls."""
    Schema = defs.OpSchema
    image = ("T", ["tensor(float)", "tensor(float16)"], "image / feature tensor")
    opt = Schema.FormalParameterOption.Optional
    # What strip_sr_functions adds for TensorRT's parser; declared so stripped files still pass the checker.
    plugin_attrs = [Schema.Attribute(PLUGIN_NAMESPACE_ATTR, Schema.AttrType.STRING, required=False),
                    Schema.Attribute(SHAPE_INPUT_ATTR, Schema.AttrType.INTS, required=False)]
    schemas = [
        Schema(DYNAMIC_RESIZE, DOMAIN, VERSION,
               "Bicubic resize (torch, align_corners=False) of NCHW X to run-time size = (H_out, W_out).",
               inputs=[Schema.FormalParameter("X", "T"), Schema.FormalParameter("size", "tensor(int64)")],
               outputs=[Schema.FormalParameter("Y", "T")], type_constraints=[image], attributes=plugin_attrs),
        Schema(DEFORM_CONV, DOMAIN, VERSION,
               "torchvision deform_conv2d (offsets (dy, dx) per tap, optional DCNv2 mask).",
               inputs=[Schema.FormalParameter("X", "T"), Schema.FormalParameter("W", "T"),
                       Schema.FormalParameter("offset", "T"), Schema.FormalParameter("B", "T", param_option=opt),
                       Schema.FormalParameter("mask", "T", param_option=opt)],
               outputs=[Schema.FormalParameter("Y", "T")], type_constraints=[image],
               attributes=[Schema.Attribute(a, Schema.AttrType.INT if a in ("group", "offset_group")
                                            else Schema.AttrType.INTS, required=False)
                           for a in DEFORM_CONV_ATTRS]
                          + [Schema.Attribute(ALLOW_TF32_ATTR, Schema.AttrType.INT, required=False)] + plugin_attrs),
    ]
    for s in schemas:
        if not defs.has(s.name, s.since_version, s.domain):
            defs.register_schema(s)


def _int64s(name: str, values: list[int]) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name],
                            value=helper.make_tensor(name, TensorProto.INT64, [len(values)], values))


class _Nodes:
    """Builds a function body node by node with fresh value names."""

    def __init__(self):
        self.nodes: list[onnx.NodeProto] = []
        self._n = 0

    def __call__(self, op: str, *inputs: str, **attrs) -> str:
        self._n += 1
        out = f"v{self._n}"
        self.nodes.append(helper.make_node(op, list(inputs), [out], **attrs))
        return out

    def const(self, value: float | int, dtype: int) -> str:
        self._n += 1
        out = f"c{self._n}"
        self.nodes.append(helper.make_node("Constant", [], [out], value=helper.make_tensor(out, dtype, [], [value])))
        return out


def _cubic_taps(b: _Nodes, in_size: str, out_size: str) -> tuple[list[str], list[str]]:
    """The 4 clamped tap indices and weights per output index along one axis (scalars in_size, out_size),
    exactly as plugins_trt/dynamicResize/dynamicResizeMath.h and models.ops.cubic_taps compute them: the source
    position ((2 dst + 1) in - out) / (2 out) split into floor and fraction with int64 math, so a crop with the
    image's size ratio gets bit-identical weights (tiled == whole)."""
    i64, f32 = TensorProto.INT64, TensorProto.FLOAT
    one, two = b.const(1, i64), b.const(2, i64)
    dst = b("Range", b.const(0, i64), out_size, one)
    den = b("Mul", out_size, two)
    num = b("Sub", b("Mul", b("Add", b("Mul", dst, two), one), in_size), out_size)
    rem = b("Mod", num, den)  # fmod=0 on integers: the floor remainder, in [0, den)
    first = b("Div", b("Sub", num, rem), den)  # exact
    t = b("Div", b("Cast", rem, to=f32), b("Cast", den, to=f32))
    a = RESIZE_ATTRS["cubic_coeff_a"]  # the header's expressions, in its order

    def f(v: float) -> str:
        return b.const(v, f32)

    def cubic1(x: str) -> str:  # |x| <= 1
        return b("Add", b("Mul", b("Mul", b("Sub", b("Mul", x, f(a + 2)), f(a + 3)), x), x), f(1.0))

    def cubic2(x: str) -> str:  # 1 < |x| < 2
        inner = b("Add", b("Mul", b("Sub", b("Mul", x, f(a)), f(5 * a)), x), f(8 * a))
        return b("Sub", b("Mul", inner, x), f(4 * a))

    weights = [cubic2(b("Add", t, f(1.0))), cubic1(t), cubic1(b("Sub", f(1.0), t)), cubic2(b("Sub", f(2.0), t))]
    last = b("Sub", in_size, one)
    zero = b.const(0, i64)
    index = [b("Min", b("Max", b("Add", first, b.const(k - 1, i64)), zero), last) for k in range(4)]
    return index, weights


def dynamic_resize_function(opset: int) -> onnx.FunctionProto:
    """Body of sr::DynamicResize in standard ops: Gather the 4x4 taps and weight them (each row's columns first,
    then the rows, in float32), the arithmetic of the C++ kernels and of eager PyTorch (models.ops.bicubic_exact).
    ONNX Resize would compute source positions in float, off by an ulp depending on the position, so a tile
    would differ from the whole image in the last bit at x3 or x2.5."""
    top, b = _Nodes(), _Nodes()
    top._n = 10_000  # value names of the body and of the resize branch must not meet
    i64 = TensorProto.INT64
    shape = top("Shape", "X")
    h_in, w_in = top("Gather", shape, top.const(2, i64)), top("Gather", shape, top.const(3, i64))
    h_out, w_out = top("Gather", "size", top.const(0, i64)), top("Gather", "size", top.const(1, i64))
    same = top("And", top("Equal", h_in, h_out), top("Equal", w_in, w_out))
    ys, wy = _cubic_taps(b, h_in, h_out)
    xs, wx = _cubic_taps(b, w_in, w_out)
    x = b("Cast", "X", to=TensorProto.FLOAT)
    b.nodes.append(_int64s("axis_1", [1]))
    cols = None  # every source row's 4 columns first ([N, C, H_in, W_out]), then the 4 rows: the kernels' sums
    for j in range(4):
        term = b("Mul", b("Gather", x, xs[j], axis=3), wx[j])
        cols = term if cols is None else b("Add", cols, term)
    out = None
    for r in range(4):
        term = b("Mul", b("Gather", cols, ys[r], axis=2), b("Unsqueeze", wy[r], "axis_1"))  # wy as [H_out, 1]
        out = term if out is None else b("Add", out, term)
    b.nodes.append(helper.make_node("CastLike", [out, "X"], ["Y_resized"]))
    # To its own size the resize is the identity (taps 0, 1, 0, 0 exactly): a copy, not 16 multiply-adds a pixel.
    untyped = helper.make_empty_tensor_value_info  # branch outputs take X's type
    copy = helper.make_graph([helper.make_node("Identity", ["X"], ["Y_same"])], "same_size", [], [untyped("Y_same")])
    resize = helper.make_graph(b.nodes, "resize", [], [untyped("Y_resized")])
    top.nodes.append(helper.make_node("If", [same], ["Y"], then_branch=copy, else_branch=resize))
    return helper.make_function(DOMAIN, DYNAMIC_RESIZE, ["X", "size"], ["Y"], top.nodes,
                                [helper.make_opsetid("", opset)])


def deform_conv_function(opset: int) -> onnx.FunctionProto:
    node = helper.make_node("DeformConv", ["X", "W", "offset", "B", "mask"], ["Y"])
    for a in DEFORM_CONV_ATTRS:
        kind = onnx.AttributeProto.INT if a in ("group", "offset_group") else onnx.AttributeProto.INTS
        node.attribute.append(helper.make_attribute_ref(a, kind))
    return helper.make_function(DOMAIN, DEFORM_CONV, ["X", "W", "offset", "B", "mask"], ["Y"], [node],
                                [helper.make_opsetid("", opset)], attributes=list(DEFORM_CONV_ATTRS))


def default_opset(model: onnx.ModelProto) -> int:
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return o.version
    raise ValueError("model imports no default-domain opset")


def used_sr_ops(model: onnx.ModelProto) -> list[str]:
    used = {n.op_type for n in model.graph.node if n.domain == DOMAIN}
    return [t for t in OP_TYPES if t in used]


def add_sr_functions(model: onnx.ModelProto) -> onnx.ModelProto:
    """Attach a standard-ONNX body for every sr op the graph uses (in place; returns the model)."""
    opset = default_opset(model)
    builders = {DYNAMIC_RESIZE: dynamic_resize_function, DEFORM_CONV: deform_conv_function}
    have = {(f.domain, f.name) for f in model.functions}
    for op_type in used_sr_ops(model):
        if op_type == DEFORM_CONV and opset < DEFORM_CONV_MIN_OPSET:
            raise ValueError(f"opset {opset} is too old for {DOMAIN}::{DEFORM_CONV} "
                             f"(its DeformConv body needs opset >= {DEFORM_CONV_MIN_OPSET})")
        if (DOMAIN, op_type) not in have:
            model.functions.append(builders[op_type](opset))
    if used_sr_ops(model) and not any(o.domain == DOMAIN for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(DOMAIN, VERSION))
    return model


def strip_sr_functions(model: onnx.ModelProto, *, allow_tf32: bool = False) -> onnx.ModelProto:
    """Copy of `model` for TensorRT / our own kernels: sr function bodies removed, plugin attributes added.

    Every sr node gets plugin_namespace="sr"; DynamicResize also gets tensorrt_plugin_shape_input_indices=[1]
    so its size input reaches the plugin as a shape tensor; with allow_tf32, DeformConv2d gets allow_tf32=1 (its
    FP32 GEMMs may then use TF32, as the engine's own layers do with --tf32). The input model is not modified.
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    kept = [f for f in out.functions if f.domain != DOMAIN]
    del out.functions[:]
    out.functions.extend(kept)
    for node in _all_nodes(out.graph):
        if node.domain != DOMAIN:
            continue
        _set_attr(node, helper.make_attribute(PLUGIN_NAMESPACE_ATTR, DOMAIN))
        if node.op_type == DYNAMIC_RESIZE:
            _set_attr(node, helper.make_attribute(SHAPE_INPUT_ATTR, list(DYNAMIC_RESIZE_SHAPE_INPUTS)))
        if node.op_type == DEFORM_CONV and allow_tf32:
            _set_attr(node, helper.make_attribute(ALLOW_TF32_ATTR, 1))
    return out


def _set_attr(node: onnx.NodeProto, attr: onnx.AttributeProto) -> None:
    for i, a in enumerate(node.attribute):
        if a.name == attr.name:
            node.attribute[i].CopyFrom(attr)
            return
    node.attribute.append(attr)


def _all_nodes(graph: onnx.GraphProto):
    """Nodes of a graph and of its subgraphs (If/Loop bodies)."""
    for node in graph.node:
        yield node
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from _all_nodes(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    yield from _all_nodes(g)
