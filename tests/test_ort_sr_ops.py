"""pipeline.native.ort_ops: graphs with sr ops run in ONNX Runtime on our CPU kernels, checked against ORT's standard
Resize / DeformConv and against torch / torchvision."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh

from pipeline.errors import PipelineError
from pipeline.native.ort_ops import adapt_for_ort, session_with_sr_kernels

tv_deform_conv2d = pytest.importorskip("torchvision.ops", reason="torchvision: the reference").deform_conv2d

torch.set_num_threads(1)
OPSET, IR = 19, 10


pytestmark = pytest.mark.usefixtures("cpu_kernels")


def build_graph(sr: bool, *, c=3, c_out=4, k=3, stride=1, pads=(1, 1, 1, 1), dil=1, group=1, offset_group=1,
                bias=True, mask=True, dtype=TP.FLOAT, seed=0):
    """x -> DynamicResize(size) -> DeformConv2d(W, offset, [B], [mask]) -> y.

    sr=True uses the sr custom ops (no function bodies, plugin attributes as strip_sr_functions leaves them);
    sr=False the standard-ONNX equivalents (Resize cubic half_pixel A=-0.75 on Concat(Shape(x)[:2], size),
    DeformConv opset 19). dtype FLOAT16 casts x to half at the start and y back to float at the end.
    """
    rng = np.random.default_rng(seed)
    weight = (rng.standard_normal((c_out, c // group, k, k)) * 0.3).astype(np.float32)
    b = rng.standard_normal(c_out).astype(np.float32) if bias else np.zeros(c_out, np.float32)
    np_dt = np.float16 if dtype == TP.FLOAT16 else np.float32
    inits = [nh.from_array(weight.astype(np_dt), "W"), nh.from_array(b.astype(np_dt), "B")]
    nodes = [oh.make_node("Cast", ["x"], ["x_t"], to=dtype), oh.make_node("Cast", ["offset"], ["off_t"], to=dtype),
             oh.make_node("Cast", ["mask"], ["mask_t"], to=dtype)]
    if sr:
        nodes.append(oh.make_node("DynamicResize", ["x_t", "size"], ["r"], domain="sr", plugin_namespace="sr",
                                  tensorrt_plugin_shape_input_indices=[1]))
    else:
        inits += [nh.from_array(np.array([0], np.int64), "zero"), nh.from_array(np.array([2], np.int64), "two")]
        nodes += [oh.make_node("Shape", ["x_t"], ["shape"]), oh.make_node("Slice", ["shape", "zero", "two"], ["nc"]),
                  oh.make_node("Concat", ["nc", "size"], ["sizes"], axis=0),
                  oh.make_node("Resize", ["x_t", "", "", "sizes"], ["r"], mode="cubic", cubic_coeff_a=-0.75,
                               coordinate_transformation_mode="half_pixel")]
    dc_inputs = ["r", "W", "off_t"] + (["B", "mask_t"] if mask else ["B"] if bias else [])
    attrs = dict(strides=[stride, stride], pads=list(pads), dilations=[dil, dil], group=group,
                 offset_group=offset_group, kernel_shape=[k, k])
    if sr:
        nodes.append(oh.make_node("DeformConv2d", dc_inputs, ["y_t"], domain="sr", plugin_namespace="sr", **attrs))
    else:
        nodes.append(oh.make_node("DeformConv", dc_inputs, ["y_t"], **attrs))
    nodes.append(oh.make_node("Cast", ["y_t"], ["y"], to=TP.FLOAT))
    inputs = [oh.make_tensor_value_info("x", TP.FLOAT, ["n", c, "h", "w"]),
              oh.make_tensor_value_info("size", TP.INT64, [2]),
              oh.make_tensor_value_info("offset", TP.FLOAT, ["n", 2 * offset_group * k * k, "ho", "wo"]),
              oh.make_tensor_value_info("mask", TP.FLOAT, ["n", offset_group * k * k, "ho", "wo"])]
    graph = oh.make_graph(nodes, "sr_graph", inputs, [oh.make_tensor_value_info("y", TP.FLOAT, None)], inits)
    opsets = [oh.make_opsetid("", OPSET)] + ([oh.make_opsetid("sr", 1)] if sr else [])
    return oh.make_model(graph, opset_imports=opsets, ir_version=IR), weight, b


def feeds(rng, n, c, h, w, size, k, stride, pads, dil, offset_group, off_scale=2.0):
    ho_r, wo_r = size
    ho = (ho_r + pads[0] + pads[2] - dil * (k - 1) - 1) // stride + 1
    wo = (wo_r + pads[1] + pads[3] - dil * (k - 1) - 1) // stride + 1
    return {"x": rng.random((n, c, h, w), dtype=np.float32),
            "size": np.array(size, np.int64),
            "offset": (rng.standard_normal((n, 2 * offset_group * k * k, ho, wo)) * off_scale).astype(np.float32),
            "mask": rng.random((n, offset_group * k * k, ho, wo), dtype=np.float32)}


def torch_ref(f, weight, b, *, stride, pads, dil, mask, bias):
    r = F.interpolate(torch.from_numpy(f["x"]), size=tuple(int(v) for v in f["size"]), mode="bicubic",
                      align_corners=False)
    assert pads[:2] == pads[2:], "torchvision takes symmetric padding"
    return tv_deform_conv2d(r, torch.from_numpy(f["offset"]), torch.from_numpy(weight),
                            torch.from_numpy(b) if bias else None, stride=stride, padding=pads[:2], dilation=dil,
                            mask=torch.from_numpy(f["mask"]) if mask else None).numpy()


def plain_session(model):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def tol(ref, rel):
    return rel * max(1.0, float(np.abs(ref).max()))


CASES = [
    # c, c_out, k, stride, pads, dil, group, offset_group, bias, mask, (n, h, w), size
    (3, 4, 3, 1, (1, 1, 1, 1), 1, 1, 1, True, True, (1, 5, 6), (10, 12)),
    (3, 4, 3, 1, (1, 1, 1, 1), 1, 1, 1, False, False, (2, 7, 5), (16, 11)),   # 3 inputs
    (3, 4, 3, 1, (1, 1, 1, 1), 1, 1, 1, True, False, (1, 8, 8), (5, 6)),      # 4 inputs, downscale
    (4, 6, 3, 2, (2, 2, 2, 2), 2, 2, 4, True, True, (2, 6, 7), (13, 15)),
    (6, 6, 1, 1, (0, 0, 0, 0), 1, 3, 2, True, True, (1, 1, 1), (3, 4)),       # 1x1 image, 1x1 kernel
]


@pytest.mark.parametrize("case", CASES)
def test_sr_graph_matches_standard_ort_and_torch(case):
    c, c_out, k, stride, pads, dil, group, og, bias, mask, (n, h, w), size = case
    kw = dict(c=c, c_out=c_out, k=k, stride=stride, pads=pads, dil=dil, group=group, offset_group=og, bias=bias,
              mask=mask)
    sr_model, weight, b = build_graph(True, **kw)
    std_model, _, _ = build_graph(False, **kw)
    f = feeds(np.random.default_rng(1), n, c, h, w, size, k, stride, pads, dil, og)
    ours = session_with_sr_kernels(sr_model).run(None, f)[0]
    std = plain_session(std_model).run(None, f)[0]
    ref = torch_ref(f, weight, b, stride=stride, pads=pads, dil=dil, mask=mask, bias=bias)
    assert ours.shape == ref.shape == std.shape
    assert np.abs(ours - ref).max() <= tol(ref, 1e-5)
    assert np.abs(ours - std).max() <= tol(std, 1e-4)  # ORT's own kernels differ from torch by ~1e-5


def test_offsets_far_outside_and_asymmetric_pads_match_ort_deformconv():
    kw = dict(c=4, c_out=4, k=3, stride=1, pads=(0, 1, 2, 1), dil=1, group=1, offset_group=2)
    sr_model, _, _ = build_graph(True, **kw)
    std_model, _, _ = build_graph(False, **kw)
    f = feeds(np.random.default_rng(2), 1, 4, 6, 6, (9, 8), 3, 1, (0, 1, 2, 1), 1, 2, off_scale=15.0)
    ours = session_with_sr_kernels(sr_model).run(None, f)[0]
    std = plain_session(std_model).run(None, f)[0]
    assert np.abs(ours - std).max() <= tol(std, 1e-4)


def test_fp16_graph_runs_with_emulated_rounding():
    kw = dict(c=3, c_out=4, k=3, stride=1, pads=(1, 1, 1, 1), dil=1, group=1, offset_group=1)
    sr_model, weight, b = build_graph(True, dtype=TP.FLOAT16, **kw)
    adapted = adapt_for_ort(sr_model)
    sr_nodes = [n for n in adapted.graph.node if n.domain == "sr"]
    assert all(oh.get_attribute_value(next(a for a in n.attribute if a.name == "emulate_fp16")) == 1
               for n in sr_nodes)
    f = feeds(np.random.default_rng(3), 1, 3, 6, 7, (12, 14), 3, 1, (1, 1, 1, 1), 1, 1)
    ours = session_with_sr_kernels(sr_model).run(None, f)[0]
    ref = torch_ref(f, weight, b, stride=1, pads=(1, 1, 1, 1), dil=1, mask=True, bias=True)
    assert np.array_equal(ours, ours.astype(np.float16).astype(np.float32))
    assert 0 < np.abs(ours - ref).max() <= tol(ref, 1e-2)
    std_model, _, _ = build_graph(False, dtype=TP.FLOAT16, **kw)
    std = plain_session(std_model).run(None, f)[0]
    assert np.abs(ours - std).max() <= tol(std, 1e-2)


def test_model_from_path_and_function_bodies_rejected(tmp_path):
    sr_model, _, _ = build_graph(True)
    path = tmp_path / "m.onnx"
    onnx.save(sr_model, str(path))
    f = feeds(np.random.default_rng(4), 1, 3, 5, 5, (7, 9), 3, 1, (1, 1, 1, 1), 1, 1)
    assert session_with_sr_kernels(path).run(None, f)[0].shape == (1, 4, 7, 9)
    with pytest.raises(PipelineError, match="not found"):
        session_with_sr_kernels(tmp_path / "missing.onnx")
    with_body = onnx.ModelProto()
    with_body.CopyFrom(sr_model)
    with_body.functions.append(oh.make_function("sr", "DynamicResize", ["X", "size"], ["Y"],
                                                [oh.make_node("Identity", ["X"], ["Y"])], [oh.make_opsetid("", OPSET)]))
    with pytest.raises(PipelineError, match="strip_sr_functions"):
        session_with_sr_kernels(with_body)


def test_exported_function_bodies_vs_stripped_kernels():
    """A model with the exporter's sr function bodies runs in plain ORT; stripped, it runs on our kernels: same."""
    sr_ops = pytest.importorskip("pipeline.export.sr_ops", reason="pipeline.export.sr_ops not available")
    model, _, _ = build_graph(True, c=4, c_out=4, group=2, offset_group=2)
    with_bodies = onnx.ModelProto()
    with_bodies.CopyFrom(model)
    del with_bodies.functions[:]
    for node in with_bodies.graph.node:  # as exported: no plugin attributes yet
        kept = [a for a in node.attribute if a.name not in ("plugin_namespace", "tensorrt_plugin_shape_input_indices")]
        del node.attribute[:]
        node.attribute.extend(kept)
    sr_ops.add_sr_functions(with_bodies)
    f = feeds(np.random.default_rng(5), 2, 4, 6, 5, (11, 9), 3, 1, (1, 1, 1, 1), 1, 2)
    reference = plain_session(with_bodies).run(None, f)[0]
    ours = session_with_sr_kernels(sr_ops.strip_sr_functions(with_bodies)).run(None, f)[0]
    assert np.abs(ours - reference).max() <= tol(reference, 1e-4)


def test_bad_sr_node_is_a_clear_error():
    model, _, _ = build_graph(True)
    node = next(n for n in model.graph.node if n.op_type == "DeformConv2d")
    del node.input[1:]
    with pytest.raises(PipelineError, match="3 to 5"):
        session_with_sr_kernels(model)


def test_error_inside_a_kernel_is_one_line_not_an_abort():
    """A Python exception thrown through ONNX Runtime from an op callback used to terminate the process."""
    from pipeline.native import ort_ops

    model, _, _ = build_graph(True)
    node = next(n for n in model.graph.node if n.op_type == "DeformConv2d")
    next(a for a in node.attribute if a.name == "kernel_shape").ints[:] = [5, 5]  # weight is 3x3
    session = session_with_sr_kernels(model)
    f = feeds(np.random.default_rng(0), 1, 3, 5, 6, (10, 12), 3, 1, (1, 1, 1, 1), 1, 1)
    with pytest.raises(PipelineError, match="sr kernel failed: DeformConv2d kernel_shape"):
        ort_ops.run(session, f)
    good, _, _ = build_graph(True)
    assert ort_ops.run(session_with_sr_kernels(good), f)[0].shape == (1, 4, 10, 12)  # the error does not linger


@pytest.mark.slow
@pytest.mark.parametrize("precision,rel", [("fp32", 1e-5), ("fp16", 2e-3)])
def test_exported_deform_srcnn_runs_on_our_kernels(tmp_path, precision, rel):
    """The real exported model (random weights, non-zero offsets), stripped, on our kernels == torch."""
    from models.registry import get_spec, load_model
    from pipeline.export import strip_sr_functions
    from pipeline.export.core import export_model

    torch.manual_seed(0)
    net = get_spec("deform-srcnn").build()
    torch.nn.init.normal_(net.offset_conv.weight, std=0.05)  # shipped init is zero: make offsets/mask vary
    torch.nn.init.normal_(net.offset_conv.bias, std=1.0)
    weights = tmp_path / "w.pt"
    torch.save(net.state_dict(), weights)
    onnx_path = tmp_path / "deform-srcnn.onnx"
    export_model("deform-srcnn", onnx_path, precision=precision, weights=weights, verify=False)
    stripped = strip_sr_functions(onnx.load(str(onnx_path)))
    assert {n.op_type for n in stripped.graph.node if n.domain == "sr"} == {"DynamicResize", "DeformConv2d"}
    x = np.random.default_rng(0).random((1, 3, 20, 24), dtype=np.float32)
    size = np.array([50, 61], np.int64)
    ours = session_with_sr_kernels(stripped).run(None, {"input": x, "size": size})[0]
    with torch.no_grad():
        ref = load_model("deform-srcnn", weights=weights)(torch.from_numpy(x), torch.from_numpy(size)).numpy()
    assert ours.shape == ref.shape == (1, 3, 50, 61)
    assert np.abs(ours - ref).max() <= tol(ref, rel)


def test_dynamic_resize_to_its_own_size_is_a_copy_on_our_kernels():
    model, _, _ = build_graph(True)
    resize = next(n for n in model.graph.node if n.op_type == "DynamicResize")
    del model.graph.node[:]
    model.graph.node.append(resize)
    model.graph.node[0].input[0], model.graph.node[0].output[0] = "x", "y"
    del model.graph.input[2:]
    x = np.random.default_rng(0).standard_normal((1, 3, 5, 6)).astype(np.float32)
    x[0, 0, 0, 0] = np.inf
    got = session_with_sr_kernels(model).run(None, {"x": x, "size": np.array([5, 6], np.int64)})[0]
    assert got.tobytes() == x.tobytes()
