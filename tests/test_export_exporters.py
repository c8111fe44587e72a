"""Both exporters (dynamo, legacy TorchScript) give the same sr nodes and the same ONNX Runtime outputs; the
standard-ops flavour matches too; plain onnxruntime.InferenceSession(path) runs the custom-op files."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import helper

from models.registry import get_spec, load_model, size_tensor

pytest.importorskip("onnxscript", reason="these tests export with torch.onnx, which needs onnxscript (export extra)")
from pipeline.export.core import export_model  # noqa: E402
from pipeline.export.verify import sample_batch  # noqa: E402

MODEL = "deform-srcnn"  # has both sr ops


def make_weights(path, name, seed=0):
    """Random weights for `name`; non-zero offset predictor so the deformable conv really samples off-grid."""
    torch.manual_seed(seed)
    m = get_spec(name).build()
    if hasattr(m, "offset_conv"):
        torch.nn.init.normal_(m.offset_conv.weight, std=0.05)
    torch.save(m.state_dict(), path)
    return path


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    return make_weights(tmp_path_factory.mktemp("w") / "deform.pt", MODEL)


@pytest.fixture(scope="module")
def exported(tmp_path_factory, weights):
    out = tmp_path_factory.mktemp("onnx")
    return {(e, o): export_model(MODEL, out / f"{e}-{o}.onnx", exporter=e, ops=o, weights=weights)
            for e in ("dynamo", "torchscript") for o in ("custom", "standard")}


def _sr_nodes(path):
    m = onnx.load(path)
    return [(n.domain, n.op_type, len(n.input), {a.name: helper.get_attribute_value(a) for a in n.attribute})
            for n in m.graph.node if n.domain == "sr"]


def _run(path, x, size):
    sess = ort.InferenceSession(str(path))  # plain: no custom-op library, default providers
    return sess.run(None, {"input": x.numpy(), "size": size.numpy()})[0]


def test_both_exporters_emit_the_same_sr_nodes(exported):
    dyn = _sr_nodes(exported["dynamo", "custom"].path)
    ts = _sr_nodes(exported["torchscript", "custom"].path)
    assert dyn == ts
    assert [(d, t, n) for d, t, n, _ in dyn] == [("sr", "DynamicResize", 2), ("sr", "DeformConv2d", 5)]
    assert dyn[0][3] == {}  # no attributes on DynamicResize
    assert dyn[1][3] == {"strides": [1, 1], "pads": [1, 1, 1, 1], "dilations": [1, 1], "group": 1,
                         "offset_group": 2, "kernel_shape": [3, 3]}


def test_both_exporters_give_the_same_ort_outputs_as_torch(exported, weights):
    model = load_model(MODEL, weights)
    x = sample_batch()
    for scale in (3.0, 1.7):  # the size is a run-time input: one file, any factor
        size = size_tensor(x.shape[-2], x.shape[-1], scale)
        with torch.no_grad():
            ref = model(x, size).numpy()
        dyn = _run(exported["dynamo", "custom"].path, x, size)
        ts = _run(exported["torchscript", "custom"].path, x, size)
        assert dyn.shape == ts.shape == ref.shape == (2, 3, *size.tolist())
        np.testing.assert_allclose(dyn, ts, atol=1e-5)
        np.testing.assert_allclose(dyn, ref, atol=1e-4)


def test_standard_flavour_has_no_sr_ops_and_same_outputs(exported):
    x = sample_batch()[:1]
    size = size_tensor(x.shape[-2], x.shape[-1], 2.0)
    ref = _run(exported["dynamo", "custom"].path, x, size)
    for exporter in ("dynamo", "torchscript"):
        path = exported[exporter, "standard"].path
        m = onnx.load(path)
        assert not m.functions and all(n.domain == "" for n in m.graph.node)
        assert {"Resize", "DeformConv"} <= {n.op_type for n in m.graph.node}
        (resize,) = [n for n in m.graph.node if n.op_type == "Resize"]
        assert list(resize.input[1:3]) == ["", ""] and resize.input[3]  # Resize(X, "", "", sizes) as the body
        np.testing.assert_allclose(_run(path, x, size), ref, atol=1e-5)


@pytest.mark.parametrize("key", [("dynamo", "custom"), ("torchscript", "custom"), ("dynamo", "standard")])
def test_io_names_dims_opset_and_checks(exported, key):
    r = exported[key]
    m = onnx.load(r.path)
    onnx.checker.check_model(m, full_check=True)
    assert m.ir_version <= 13
    opsets = {o.domain: o.version for o in m.opset_import}
    assert opsets[""] == r.opset >= 19
    if key[1] == "custom":
        assert opsets["sr"] == 1 and {(f.domain, f.name) for f in m.functions} == {("sr", "DynamicResize"),
                                                                                  ("sr", "DeformConv2d")}

    def dims(vi):
        return [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]

    assert [i.name for i in m.graph.input] == ["input", "size"] and [o.name for o in m.graph.output] == ["output"]
    assert dims(m.graph.input[0]) == ["batch", 3, "height", "width"]
    assert m.graph.input[1].type.tensor_type.elem_type == onnx.TensorProto.INT64 and dims(m.graph.input[1]) == [2]
    assert dims(m.graph.output[0]) == ["batch", 3, "out_height", "out_width"]
    assert r.max_abs_error is not None and r.max_abs_error <= 1e-4


def test_static_x3_model_has_only_the_image_input(tmp_path):
    w = make_weights(tmp_path / "x3.pt", "srcnn-x3")
    r = export_model("srcnn-x3", tmp_path / "x3.onnx", exporter="torchscript", weights=w)
    m = onnx.load(r.path)
    assert [i.name for i in m.graph.input] == ["input"] and r.size_input is None
    y = ort.InferenceSession(str(r.path)).run(None, {"input": sample_batch().numpy()})[0]
    assert y.shape == (2, 3, 69, 87)


class _DeformBlock(torch.nn.Module):
    """deform_conv2d with every parameter off its default: stride, padding, dilation, groups, offset groups,
    no bias and no mask (DCNv1) -> the 3-input form of sr::DeformConv2d."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.offset = torch.nn.Conv2d(4, 2 * 2 * 9, 3, padding=1)
        self.weight = torch.nn.Parameter(torch.randn(6, 2, 3, 3) * 0.3)

    def forward(self, x):
        from torchvision.ops import deform_conv2d

        off = self.offset(x)[:, :, ::2, ::2]  # (H+2*2-2*2-1)//2+1 == ceil(H/2) rows of offsets
        return deform_conv2d(x, off, self.weight, None, stride=2, padding=2, dilation=2)


@pytest.mark.parametrize("exporter", ["dynamo", "torchscript"])
def test_deform_conv2d_parameters_map_through_both_exporters(exporter):
    from pipeline.export import dynamo, sr_ops, torchscript

    module = _DeformBlock().eval()
    x = torch.rand(2, 4, 10, 12)
    backend = dynamo if exporter == "dynamo" else torchscript
    proto = sr_ops.add_sr_functions(backend.export(module, (x,), ["input"], ops="custom", opset=20))
    (node,) = [n for n in proto.graph.node if n.domain == "sr"]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert node.op_type == "DeformConv2d"
    assert attrs == {"strides": [2, 2], "pads": [2, 2, 2, 2], "dilations": [2, 2], "group": 2, "offset_group": 2,
                     "kernel_shape": [3, 3]}
    assert len(node.input) == 4  # torchvision passes a zero bias when there is none; no mask
    x2 = torch.rand(1, 4, 14, 9)
    got = ort.InferenceSession(proto.SerializeToString()).run(None, {"input": x2.numpy()})[0]
    with torch.no_grad():
        np.testing.assert_allclose(got, module(x2).numpy(), atol=1e-4)
