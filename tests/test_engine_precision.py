"""TensorRT engine precisions bf16 and int8 (pipeline.engine.precision): which file an engine of each precision is
built from, the bf16 graph (checked by ONNX's full checker and computed by ONNX's reference evaluator against the
fp32 file on ONNX Runtime), the staleness rule and the CLI's plan. TensorRT itself cannot run here; the int8 file's
fitness for its explicit quantization is checked in test_quantize_quality."""
from __future__ import annotations

import argparse
import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto
from onnx.reference import ReferenceEvaluator

pytest.importorskip("onnxscript", reason="these tests export with torch.onnx, which needs onnxscript (export extra)")
from test_engine import ENV, SRCNN, _onnx, _sidecar  # noqa: E402
from test_export_exporters import make_weights  # noqa: E402

from pipeline.cli import engine as engine_cli  # noqa: E402
from pipeline.engine import default_profile, plan_engine, sidecar_path  # noqa: E402
from pipeline.engine.precision import (  # noqa: E402
    bf16_problem,
    derivation,
    engine_graph,
    engine_precision,
    engine_source,
    graph_note,
)
from pipeline.errors import PipelineError  # noqa: E402
from pipeline.export.core import export_model  # noqa: E402
from pipeline.export.fp16 import convert_to_bf16  # noqa: E402
from pipeline.export.quantize import RECIPE  # noqa: E402
from pipeline.export.sr_ops import DOMAIN  # noqa: E402


@pytest.fixture(scope="module")
def fp32_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bf16")
    return {m: export_model(m, d / f"{m}.onnx", exporter="torchscript", weights=make_weights(d / f"{m}.pt", m)).path
            for m in ("srcnn", "deform-srcnn", "srcnn-x3")}


def _types(model: onnx.ModelProto) -> dict[str, int]:
    inferred = onnx.shape_inference.infer_shapes(model)
    g = inferred.graph
    types = {v.name: v.type.tensor_type.elem_type for v in [*g.value_info, *g.input, *g.output]}
    types.update({i.name: i.data_type for i in g.initializer})
    return types


@pytest.mark.parametrize("model", ["srcnn", "deform-srcnn"])
def test_bf16_graph_is_valid_bf16_with_our_ops_in_fp32(fp32_files, model):
    b = convert_to_bf16(onnx.load(str(fp32_files[model])))
    onnx.checker.check_model(b, full_check=True)  # bfloat16 where ONNX admits it (opset 22), types consistent
    assert {o.domain: o.version for o in b.opset_import}[""] == 22
    types = _types(b)
    convs = [n for n in b.graph.node if n.op_type == "Conv"]
    assert convs and all(types[n.input[1]] == TensorProto.BFLOAT16 and types[n.output[0]] == TensorProto.BFLOAT16
                         for n in convs)
    # our ops run FP32 (their plugins have no BF16): float32 in (a Cast, the image, their own weights), Cast out
    sr = [n for n in b.graph.node if n.domain == DOMAIN]
    made_by = {o: n for n in b.graph.node for o in n.output}
    fp32_in = lambda name: (name == "input" or types.get(name) == TensorProto.FLOAT  # noqa: E731
                            or (made_by[name].op_type == "Cast" and made_by[name].attribute[0].i == TensorProto.FLOAT))
    assert sr and all(fp32_in(i) for n in sr for k, i in enumerate(n.input)
                      if i and not (n.op_type == "DynamicResize" and k == 1))
    read_by = {i: n for n in b.graph.node for i in n.input}
    assert all(read_by[n.output[0]].op_type == "Cast" and read_by[n.output[0]].attribute[0].i == TensorProto.BFLOAT16
               for n in sr)
    assert [types[i.name] for i in b.graph.input if i.name == "input"] == [TensorProto.FLOAT]
    assert [types[o.name] for o in b.graph.output] == [TensorProto.FLOAT]
    resize = next(n for n in sr if n.op_type == "DynamicResize")
    assert resize.input[0] == "input"  # the image reaches the resize as given, never rounded to bf16 first


def test_bf16_graph_computes_the_fp32_result_at_bf16_precision(fp32_files):
    """srcnn's bf16 graph on ONNX's reference evaluator (numpy, bfloat16 through ml_dtypes) against the fp32 file
    on ONNX Runtime: close at bf16's precision (8 mantissa bits), not equal (it is really bf16)."""
    path = fp32_files["srcnn"]
    x = np.random.default_rng(0).random((1, 3, 6, 5), dtype=np.float32)
    feeds = {"input": x, "size": np.array([12, 10], dtype=np.int64)}
    ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = ReferenceEvaluator(convert_to_bf16(onnx.load(str(path)))).run(None, feeds)[0]
    err = np.abs(got - ref).max()
    assert got.dtype == np.float32 and got.shape == ref.shape == (1, 3, 12, 10)
    assert 0 < err < 0.03 * max(1.0, np.abs(ref).max())


def test_bf16_graph_resizes_the_image_in_fp32_and_rounds_after(fp32_files):
    """srcnn-x3's bicubic upscale is a standard Resize: in the bf16 graph it reads the float32 image itself and its
    float32 output is cast to bf16 after it (rounding the image to bf16 first cost the whole net 8 bits of input)."""
    b = convert_to_bf16(onnx.load(str(fp32_files["srcnn-x3"])))
    onnx.checker.check_model(b, full_check=True)
    types = _types(b)
    (resize,) = [n for n in b.graph.node if n.op_type == "Resize"]
    assert resize.input[0] == "input" and types[resize.output[0]] == TensorProto.FLOAT
    (after,) = [n for n in b.graph.node if resize.output[0] in n.input]
    assert after.op_type == "Cast" and after.attribute[0].i == TensorProto.BFLOAT16
    assert not [n for n in b.graph.node if n.op_type == "Cast" and "input" in n.input]  # no bf16 copy of the image
    x = np.random.default_rng(1).random((1, 3, 6, 5), dtype=np.float32)
    ref = ort.InferenceSession(str(fp32_files["srcnn-x3"]), providers=["CPUExecutionProvider"]).run(None,
                                                                                                  {"input": x})[0]
    got = ReferenceEvaluator(b).run(None, {"input": x})[0]
    assert got.shape == ref.shape == (1, 3, 18, 15) and 0 < np.abs(got - ref).max() < 0.03


def test_engine_precision_is_the_files_own_or_made_from_fp32():
    fp32, fp16 = {"precision": "fp32"}, {"precision": "fp16"}
    assert engine_precision(fp32, None) == "fp32" and engine_precision(fp16, None) == "fp16"
    assert engine_precision(fp32, "bf16") == "bf16" and engine_precision(fp32, "int8") == "int8"
    with pytest.raises(PipelineError, match="export --precision fp16"):
        engine_precision(fp32, "fp16")
    with pytest.raises(PipelineError, match="made from the fp32 file, and this one is an fp16 graph"):
        engine_precision(fp16, "int8")
    assert bf16_problem("9.0") is None and bf16_problem("8.0") is None
    assert "compute capability 8.0 or newer" in bf16_problem("7.5")


def test_engine_graph_per_precision(fp32_files):
    path = fp32_files["srcnn"]
    model = onnx.load(str(path))
    assert engine_graph(path, model, "fp32") is model
    b = engine_graph(path, model, "bf16")
    assert any(i.data_type == TensorProto.BFLOAT16 for i in b.graph.initializer)


def test_a_derived_engine_is_rebuilt_when_its_graph_would_differ(tmp_path):
    engine, profiles = tmp_path / "m.engine", [default_profile(SRCNN)]
    engine.write_bytes(b"x")
    sidecar_path(engine).write_text(json.dumps({**_sidecar(), "precision": "int8", "derivation": derivation("int8")}))
    assert plan_engine(engine, ENV, "b" * 64, profiles, precision="int8")[0] == "use"
    action, why = plan_engine(engine, ENV, "b" * 64, profiles, precision="bf16")
    assert action == "rebuild" and why.startswith("built from int8 Q/DQ recipe") and "wanted bf16 graph" in why
    want = f"built from {derivation('int8')}, wanted the file as it is"
    assert plan_engine(engine, ENV, "b" * 64, profiles)[1] == want
    sidecar_path(engine).write_text(json.dumps({**_sidecar(), "derivation": f"int8 Q/DQ recipe {RECIPE - 1}"}))
    assert plan_engine(engine, ENV, "b" * 64, profiles, precision="int8")[0] == "rebuild"  # an older recipe


def test_engine_cli_plans_bf16_and_int8_from_fp32_files(tmp_path):
    d = tmp_path / "onnx"
    d.mkdir()
    _onnx(d / "srcnn.custom.fp32.onnx", model="srcnn", ops="custom", precision="fp32")
    _onnx(d / "srcnn.custom.fp16.onnx", model="srcnn", ops="custom", precision="fp16")
    p = argparse.ArgumentParser()
    engine_cli.add_arguments(p)
    jobs = engine_cli._jobs(p.parse_args(["--all", "--onnx-dir", str(d), "--output-dir", str(tmp_path / "e"),
                                          "--precision", "int8"]))
    assert jobs == [(d / "srcnn.custom.fp32.onnx", tmp_path / "e" / "srcnn.custom.fp32-int8.engine", "int8")]
    jobs = engine_cli._jobs(p.parse_args(["--all", "--onnx-dir", str(d), "--output-dir", str(tmp_path / "e")]))
    assert [(j[0].name, j[2]) for j in jobs] == [("srcnn.custom.fp16.onnx", "fp16"), ("srcnn.custom.fp32.onnx", "fp32")]
    one = ["--onnx", str(d / "srcnn.custom.fp16.onnx"), "--output", str(tmp_path / "x.engine")]
    assert engine_cli._jobs(p.parse_args(one))[0][2] == "fp16"
    with pytest.raises(PipelineError, match="this one is an fp16 graph"):  # refused before TensorRT is looked for
        engine_cli._jobs(p.parse_args([*one, "--precision", "bf16"]))
    with pytest.raises(PipelineError, match="--precision all goes with --all"):
        engine_cli._jobs(p.parse_args([*one, "--precision", "all"]))


def _conv_macs(path) -> dict[str, int]:
    """Each Conv's multiply-accumulates on a 120x120 LR image (its output shape from ONNX Runtime, times its
    weight's Cin/group x kh x kw)."""
    from onnx import helper

    m = onnx.load(str(path))
    convs = [n for n in m.graph.node if n.op_type == "Conv"]
    weights = {i.name: i.dims for i in m.graph.initializer}
    m.graph.output.extend([helper.make_tensor_value_info(n.output[0], TensorProto.FLOAT, None) for n in convs])
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    outs = sess.run([n.output[0] for n in convs], {"input": np.zeros((1, 3, 120, 120), np.float32)})
    return {n.name: int(np.prod(y.shape) * np.prod(weights[n.input[1]][1:])) for n, y in zip(convs, outs, strict=True)}


def test_derived_engines_come_from_the_folded_graph_at_a_fixed_integer_scale(fp32_files):
    """bf16 and int8 engines of srcnn-x3 are made from its folded x3 graph (as OpenVINO runs it), and the sidecar
    says so; the int8 recipe then covers all of the MACs with Q/DQ (its border strips too), where on the model graph
    only the 1x1 conv2 (~10 %) was int8 (the recipe's float convs, pipeline.export.quantize.excluded with keep_float:
    nothing calibrated here). A
    run-time scale (srcnn) or a profile admitting inputs below the folded graph's smallest keeps the model graph."""
    from models.lookup import get_spec
    from pipeline.artifacts.onnx_file import folded_variants, onnx_metadata
    from pipeline.engine import Profile
    from pipeline.export.quantize import excluded, keep_float

    path = fp32_files["srcnn-x3"]
    folded = folded_variants(path)[3]
    profiles = [default_profile(get_spec("srcnn-x3"))]
    for precision in ("bf16", "int8"):
        assert engine_source(path, precision, profiles) == (folded, 3)
    assert graph_note(folded, 3) == f"folded x3 ({folded.name})" and graph_note(path, None).startswith("model graph")
    assert engine_source(path, "fp32", profiles) == (path, None) and engine_source(path, "int8") == (path, None)
    small = int(onnx_metadata(folded)["min_lr"]) - 1
    assert engine_source(path, "int8", [Profile(height=(small, 64, 128), scale=(3.0, 3.0, 3.0))]) == (path, None)
    assert engine_source(fp32_files["srcnn"], "int8", [default_profile(get_spec("srcnn"))])[1] is None
    coverage = {}
    for name, graph in (("model", path), ("folded", folded)):
        model = onnx.load(str(graph))
        macs, floats = _conv_macs(graph), set(excluded(model, keep_float(model)))
        coverage[name] = sum(v for k, v in macs.items() if k not in floats) / sum(macs.values())
    assert coverage["model"] < 0.15 and coverage["folded"] == 1.0, coverage
    b = engine_graph(path, onnx.load(str(path)), "bf16", profiles)
    onnx.checker.check_model(b, full_check=True)
    assert "DepthToSpace" in {n.op_type for n in b.graph.node}  # the folded graph's pixel shuffle
    assert any(i.data_type == TensorProto.BFLOAT16 for i in b.graph.initializer)
    x = np.random.default_rng(2).random((1, 3, 9, 8), dtype=np.float32)
    ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    got = ReferenceEvaluator(b).run(None, {"input": x})[0]
    assert got.shape == ref.shape == (1, 3, 27, 24) and 0 < np.abs(got - ref).max() < 0.03
