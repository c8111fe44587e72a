"""sr op contract: the model-local function bodies reproduce torch/torchvision in ONNX Runtime, and the strip
transform leaves the graph for TensorRT plugins. Graphs are built with onnx.helper (no exporter involved)."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper

from models.ops import bicubic_exact
from pipeline.export import sr_ops, strip_sr_functions

deform_conv2d = pytest.importorskip("torchvision.ops", reason="torchvision: the reference").deform_conv2d

OPSET = 20


def _model(nodes, inputs, outputs, initializers=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid("sr", 1)],
                          ir_version=10)
    sr_ops.add_sr_functions(m)
    onnx.checker.check_model(m, full_check=True)
    return m


def _run(m, feed):
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)[0]


def _resize_model():
    return _model([helper.make_node("DynamicResize", ["X", "size"], ["Y"], domain="sr")],
                  [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["n", "c", "h", "w"]),
                   helper.make_tensor_value_info("size", TensorProto.INT64, [2])],
                  [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["n", "c", "ho", "wo"])])


@pytest.mark.parametrize("out_hw", [(21, 34), (7, 5), (13, 13)])  # up, down, mixed
def test_dynamic_resize_body_matches_torch_bicubic(out_hw):
    x = torch.rand(2, 3, 9, 11)
    got = _run(_resize_model(), {"X": x.numpy(), "size": np.array(out_hw, dtype=np.int64)})
    ref = F.interpolate(x, size=out_hw, mode="bicubic", align_corners=False).numpy()
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, atol=1e-5)
    # ... and bit for bit what eager PyTorch's sr::dynamic_resize and the C++ kernels compute (exact taps)
    assert np.array_equal(got, bicubic_exact(x, *out_hw).numpy())


@pytest.mark.parametrize("dtype", [TensorProto.FLOAT, TensorProto.FLOAT16])
def test_dynamic_resize_body_crop_equals_whole(dtype):
    """A crop whose size ratio is the image's resizes to exactly the whole image's pixels (x3, x2.5: ONNX Resize's
    float source positions differ from the whole image's by an ulp there, models.ops.cubic_taps)."""
    np_type = helper.tensor_dtype_to_np_dtype(dtype)
    m = _model([helper.make_node("DynamicResize", ["X", "size"], ["Y"], domain="sr")],
               [helper.make_tensor_value_info("X", dtype, ["n", "c", "h", "w"]),
                helper.make_tensor_value_info("size", TensorProto.INT64, [2])],
               [helper.make_tensor_value_info("Y", dtype, ["n", "c", "ho", "wo"])])
    x = np.random.default_rng(0).random((1, 3, 40, 36)).astype(np_type)
    for scale, (c0, c1) in ((3, (10, 31)), (2.5, (12, 30))):  # crops start/end where LR rows map to HR rows
        whole = _run(m, {"X": x, "size": np.array([round(40 * scale), round(36 * scale)], np.int64)})
        y0, y1 = round(c0 * scale), round(c1 * scale)
        crop = _run(m, {"X": x[:, :, c0:c1], "size": np.array([y1 - y0, round(36 * scale)], np.int64)})
        interior = slice(8, y1 - y0 - 8)  # away from the crop's clamped borders
        assert np.array_equal(crop[:, :, interior], whole[:, :, y0:y1][:, :, interior])


def _deform_case(n_inputs, stride=1, pad=1, dil=1, groups=1, offset_groups=1, k=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    cin, cout, h, w = 4, 6, 9, 8
    x = torch.rand(2, cin, h, w, generator=g)
    weight = torch.randn(cout, cin // groups, k, k, generator=g) * 0.3
    ho = (h + 2 * pad - dil * (k - 1) - 1) // stride + 1
    wo = (w + 2 * pad - dil * (k - 1) - 1) // stride + 1
    offset = torch.randn(2, 2 * offset_groups * k * k, ho, wo, generator=g) * 1.5  # reaches outside the image
    bias = torch.randn(cout, generator=g) if n_inputs >= 4 else None
    mask = torch.rand(2, offset_groups * k * k, ho, wo, generator=g) if n_inputs == 5 else None
    ref = deform_conv2d(x, offset, weight, bias, stride=stride, padding=pad, dilation=dil, mask=mask).numpy()
    names = ["X", "W", "offset", "B", "mask"][:n_inputs]
    tensors = [x, weight, offset, bias, mask][:n_inputs]
    node = helper.make_node("DeformConv2d", names, ["Y"], domain="sr", strides=[stride, stride],
                            pads=[pad] * 4, dilations=[dil, dil], group=groups, offset_group=offset_groups,
                            kernel_shape=[k, k])
    inputs = [helper.make_tensor_value_info(nm, TensorProto.FLOAT, list(t.shape))
              for nm, t in zip(names, tensors, strict=True)]
    m = _model([node], inputs, [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["n", "c", "ho", "wo"])])
    return m, {nm: t.numpy() for nm, t in zip(names, tensors, strict=True)}, ref


@pytest.mark.parametrize("n_inputs,kw", [
    (3, {}),                                                   # no bias, no mask (DCNv1)
    (4, {"stride": 2}),                                        # bias
    (5, {"dil": 2, "pad": 2}),                                 # bias + mask (DCNv2), dilation
    (5, {"groups": 2, "offset_groups": 2, "stride": 2}),       # groups, offset groups
])
def test_deform_conv2d_body_matches_torchvision(n_inputs, kw):
    m, feed, ref = _deform_case(n_inputs, **kw)
    got = _run(m, feed)
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, atol=1e-4)


def test_function_bodies_are_standard_onnx():
    m = _resize_model()
    (f,) = m.functions
    assert (f.domain, f.name) == ("sr", "DynamicResize")
    assert all(n.domain == "" for n in f.node)
    # the same size is a copy (If -> Identity); otherwise exact int64 tap arithmetic and gathers, not Resize (whose
    # float source positions are not tile-exact)
    (branch,) = [n for n in f.node if n.op_type == "If"]
    assert {n.op_type for n in f.node} <= {"Constant", "Shape", "Gather", "Equal", "And", "If"}
    branches = {a.name: a.g for a in branch.attribute}
    then, other = branches["then_branch"], branches["else_branch"]
    assert [n.op_type for n in then.node] == ["Identity"] and list(then.node[0].input) == ["X"]
    assert {n.op_type for n in other.node} <= {"Constant", "Shape", "Gather", "Range", "Mul", "Add", "Sub", "Mod",
                                               "Div", "Cast", "Min", "Max", "Unsqueeze", "CastLike"}
    dc = sr_ops.deform_conv_function(19)
    assert [n.op_type for n in dc.node] == ["DeformConv"] and set(dc.attribute) == set(sr_ops.DEFORM_CONV_ATTRS)


def test_deform_conv_body_rejects_old_opset():
    node = helper.make_node("DeformConv2d", ["X", "W", "o"], ["Y"], domain="sr")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in "XWo"],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["n", "c", "ho", "wo"])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("sr", 1)])
    with pytest.raises(ValueError, match="opset 18 is too old"):
        sr_ops.add_sr_functions(m)


def test_strip_removes_bodies_and_adds_plugin_attributes():
    m, feed, _ = _deform_case(5)
    resize = _resize_model()
    # one graph with both ops: resize the DeformConv2d output
    nodes = list(m.graph.node) + [helper.make_node("DynamicResize", ["Y", "size"], ["Z"], domain="sr")]
    both = _model(nodes, list(m.graph.input) + [helper.make_tensor_value_info("size", TensorProto.INT64, [2])],
                  [helper.make_tensor_value_info("Z", TensorProto.FLOAT, ["n", "c", "ho", "wo"])])
    before = both.SerializeToString()
    stripped = strip_sr_functions(both)
    assert both.SerializeToString() == before, "input model must not be modified"
    assert len(both.functions) == 2 and len(stripped.functions) == 0
    attrs = {n.op_type: {a.name: helper.get_attribute_value(a) for a in n.attribute} for n in stripped.graph.node}
    assert attrs["DynamicResize"] == {"plugin_namespace": b"sr", "tensorrt_plugin_shape_input_indices": [1]}
    assert attrs["DeformConv2d"]["plugin_namespace"] == b"sr"
    assert "tensorrt_plugin_shape_input_indices" not in attrs["DeformConv2d"]
    assert attrs["DeformConv2d"]["offset_group"] == 1 and attrs["DeformConv2d"]["kernel_shape"] == [3, 3]
    # idempotent, and still a valid model for the checker (sr schemas registered)
    assert strip_sr_functions(stripped).SerializeToString() == stripped.SerializeToString()
    sr_ops.register_schemas()
    onnx.checker.check_model(stripped)
    # Without bodies plain ORT cannot run it: that is what the plugins / registered kernels are for.
    with pytest.raises(Exception, match="DeformConv2d|DynamicResize"):
        ort.InferenceSession(stripped.SerializeToString(), providers=["CPUExecutionProvider"])
    assert resize.functions  # untouched fixture


def test_register_schemas_is_idempotent():
    sr_ops.register_schemas()
    sr_ops.register_schemas()
    s = onnx.defs.get_schema("DeformConv2d", 1, "sr")
    assert [i.name for i in s.inputs] == ["X", "W", "offset", "B", "mask"]
    assert onnx.defs.get_schema("DynamicResize", 1, "sr").inputs[1].type_str == "tensor(int64)"


def test_dynamic_resize_to_its_own_size_is_a_copy_in_the_body_and_the_torch_op():
    from models import ops

    x = torch.rand(1, 3, 9, 11) * 1e3 - 500  # any values, NaN and inf included: a copy keeps every bit
    x[0, 0, 0, :3] = torch.tensor([float("nan"), float("inf"), -float("inf")])
    got = _run(_resize_model(), {"X": x.numpy(), "size": np.array([9, 11], dtype=np.int64)})
    assert got.tobytes() == x.numpy().tobytes()  # 16 taps a pixel would turn the inf row into NaN
    eager = ops.dynamic_resize(x, torch.tensor([9, 11]))
    assert eager.numpy().tobytes() == x.numpy().tobytes() and eager.data_ptr() != x.data_ptr()
    # one side the same is still a resize (the other axis)
    half = _run(_resize_model(), {"X": x[:, :, :, 3:].numpy(), "size": np.array([9, 16], dtype=np.int64)})
    assert half.shape == (1, 3, 9, 16)
