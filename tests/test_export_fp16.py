"""FP16 export: half weights/compute graph, float32 or float16 I/O, verified within 1e-2 of PyTorch FP32."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto

pytest.importorskip("onnxscript", reason="these tests export with torch.onnx, which needs onnxscript (export extra)")
from test_export_exporters import make_weights  # noqa: E402

from models.registry import load_model, size_tensor  # noqa: E402
from pipeline.export import strip_sr_functions  # noqa: E402
from pipeline.export.core import export_model  # noqa: E402
from pipeline.export.fp16 import convert_to_fp16  # noqa: E402
from pipeline.export.verify import sample_batch  # noqa: E402


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    d = tmp_path_factory.mktemp("w")
    return {n: make_weights(d / f"{n}.pt", n) for n in ("deform-srcnn", "srcnn")}


@pytest.fixture(scope="module")
def fp16_files(tmp_path_factory, weights):
    out = tmp_path_factory.mktemp("onnx16")
    w = weights["deform-srcnn"]
    return {
        ("torchscript", "fp32"): export_model("deform-srcnn", out / "ts.onnx", exporter="torchscript",
                                              precision="fp16", weights=w),
        ("torchscript", "fp16"): export_model("deform-srcnn", out / "ts-io16.onnx", exporter="torchscript",
                                              precision="fp16", io_dtype="fp16", weights=w),
        ("dynamo", "fp32"): export_model("deform-srcnn", out / "dyn.onnx", precision="fp16", weights=w),
    }


def _elem(vi):
    return vi.type.tensor_type.elem_type


@pytest.mark.parametrize("key", [("torchscript", "fp32"), ("torchscript", "fp16"), ("dynamo", "fp32")])
def test_fp16_graph_types_and_accuracy(fp16_files, weights, key):
    r = fp16_files[key]
    io = key[1]
    m = onnx.load(r.path)
    onnx.checker.check_model(m, full_check=True)
    float_inits = [i.name for i in m.graph.initializer if i.data_type == TensorProto.FLOAT]
    assert not float_inits, f"float32 weights left: {float_inits}"
    assert any(i.data_type == TensorProto.FLOAT16 for i in m.graph.initializer)
    io_type = TensorProto.FLOAT16 if io == "fp16" else TensorProto.FLOAT
    assert _elem(m.graph.input[0]) == io_type and _elem(m.graph.output[0]) == io_type
    assert _elem(m.graph.input[1]) == TensorProto.INT64
    casts = [n for n in m.graph.node if n.op_type == "Cast"]
    assert (m.graph.node[0].op_type == "Cast" and m.graph.node[-1].op_type == "Cast") == (io == "fp32")
    assert len(casts) == (2 if io == "fp32" else 0)
    # the sr ops now run on half tensors and keep their (type-generic) bodies
    assert {n.op_type for n in m.graph.node if n.domain == "sr"} == {"DynamicResize", "DeformConv2d"}
    assert len(m.functions) == 2
    meta = {p.key: p.value for p in m.metadata_props}
    assert (meta["precision"], meta["io_dtype"]) == ("fp16", io)

    x = sample_batch()
    size = size_tensor(x.shape[-2], x.shape[-1], 3.0)
    with torch.no_grad():
        ref = load_model("deform-srcnn", weights["deform-srcnn"])(x, size).numpy()
    feed = {"input": x.numpy().astype(np.float16 if io == "fp16" else np.float32), "size": size.numpy()}
    got = ort.InferenceSession(str(r.path)).run(None, feed)[0]
    assert got.dtype == (np.float16 if io == "fp16" else np.float32)
    err = float(np.abs(got.astype(np.float32) - ref).max())
    assert err <= 1e-2
    assert r.max_abs_error is not None and r.max_abs_error <= 1e-2


def test_strip_keeps_fp16_graph(fp16_files):
    m = strip_sr_functions(onnx.load(fp16_files["dynamo", "fp32"].path))
    assert not m.functions
    assert all(any(a.name == "plugin_namespace" for a in n.attribute) for n in m.graph.node if n.domain == "sr")


def test_fp16_scale_input_keeps_float32_scales(tmp_path, weights):
    r = export_model("srcnn", tmp_path / "s.onnx", exporter="torchscript", ops="standard", size_input="scale",
                     precision="fp16", weights=weights["srcnn"])
    m = onnx.load(r.path)
    assert [i.name for i in m.graph.input] == ["input", "scale"] and _elem(m.graph.input[1]) == TensorProto.FLOAT
    inferred = onnx.shape_inference.infer_shapes(m)
    types = {v.name: _elem(v) for v in list(inferred.graph.value_info) + list(inferred.graph.input)}
    types.update({i.name: i.data_type for i in m.graph.initializer})
    (resize,) = [n for n in m.graph.node if n.op_type == "Resize"]
    assert types[resize.input[0]] == TensorProto.FLOAT16 and types[resize.input[2]] == TensorProto.FLOAT
    assert r.max_abs_error <= 1e-2


def test_convert_rejects_unknown_io_dtype(fp16_files):
    with pytest.raises(ValueError, match="io_dtype"):
        convert_to_fp16(onnx.load(fp16_files["dynamo", "fp32"].path), "bf16")
