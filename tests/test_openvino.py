"""The openvino backend: our sr ops through OpenVINO's ONNX frontend (conversion extensions, no standard-ops
re-export) against our C++ reference kernels, real exported files, bf16 and its fallback."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper
from onnx import numpy_helper as nh

from pipeline.backends import available, create_named
from pipeline.native import cpu, kernels_cpu

ov = pytest.importorskip("openvino", reason="OpenVINO is not installed")
pytestmark = pytest.mark.usefixtures("cpu_kernels")


def _compile(model: onnx.ModelProto, tmp_path):
    from pipeline.native.openvino_ops import extensions

    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    core = ov.Core()
    for ext in extensions():
        core.add_extension(ext)
    return core.compile_model(core.read_model(str(path)), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})


def _model(node, inputs, inits=()):
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("Y", TP.FLOAT, None)], list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19), helper.make_opsetid("sr", 1)])


@pytest.mark.parametrize("h,w,ho,wo,exact", [(9, 11, 27, 33, True), (37, 50, 111, 150, True), (10, 7, 20, 14, False),
                                             (10, 10, 25, 25, False), (16, 16, 5, 7, False)])
def test_dynamic_resize_extension_is_our_kernel(tmp_path, h, w, ho, wo, exact):
    m = _model(helper.make_node("DynamicResize", ["X", "size"], ["Y"], domain="sr"),
               [helper.make_tensor_value_info("X", TP.FLOAT, ["n", 3, "h", "w"]),
                helper.make_tensor_value_info("size", TP.INT64, [2])])
    x = np.random.default_rng(h).random((2, 3, h, w), dtype=np.float32)
    got = _compile(m, tmp_path)({"X": x, "size": np.array([ho, wo], np.int64)})[0]
    ref = kernels_cpu.dynamic_resize(x, (ho, wo))
    assert got.shape == ref.shape
    if exact:  # x3: bit for bit
        assert got.tobytes() == ref.tobytes()
    # elsewhere OpenVINO fuses some multiply-adds by shape: at most a few float32 ulps of values in [0, 1]
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-6)


@pytest.mark.parametrize("k,stride,pad,dil,og,g,bias,mask", [(3, 1, 1, 1, 2, 1, True, True),
                                                              (3, 1, 1, 1, 1, 1, False, False),
                                                              (3, 2, 0, 2, 2, 2, True, False)])
def test_deform_conv_extension_is_our_kernel(tmp_path, k, stride, pad, dil, og, g, bias, mask):
    rng = np.random.default_rng(1)
    n, c, c_out, h, w = 2, 4, 6, 11, 13
    ho, wo = (h + 2 * pad - dil * (k - 1) - 1) // stride + 1, (w + 2 * pad - dil * (k - 1) - 1) // stride + 1
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    weight = rng.standard_normal((c_out, c // g, k, k)).astype(np.float32)
    offset = (rng.standard_normal((n, 2 * og * k * k, ho, wo)) * 3).astype(np.float32)  # many taps outside
    b = rng.standard_normal(c_out).astype(np.float32) if bias else np.zeros(c_out, np.float32)
    m_in = rng.random((n, og * k * k, ho, wo)).astype(np.float32)
    names = ["X", "W", "offset", "B"] + (["mask"] if mask else [])
    node = helper.make_node("DeformConv2d", names, ["Y"], domain="sr", strides=[stride] * 2, pads=[pad] * 4,
                            dilations=[dil] * 2, group=g, offset_group=og, kernel_shape=[k, k])
    inputs = [helper.make_tensor_value_info("X", TP.FLOAT, list(x.shape)),
              helper.make_tensor_value_info("offset", TP.FLOAT, list(offset.shape))]
    if mask:
        inputs.append(helper.make_tensor_value_info("mask", TP.FLOAT, list(m_in.shape)))
    feeds = {"X": x, "offset": offset, **({"mask": m_in} if mask else {})}
    got = _compile(_model(node, inputs, [nh.from_array(weight, "W"), nh.from_array(b, "B")]), tmp_path)(feeds)[0]
    ref = kernels_cpu.deform_conv2d(x, weight, offset, b, m_in if mask else None, stride=stride, padding=pad,
                                    dilation=dil, groups=g, offset_groups=og)
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-5)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The deform-srcnn and srcnn exports, as users run them (custom sr ops with function bodies)."""
    from pipeline.export.cached import onnx_for

    cache = tmp_path_factory.mktemp("ov-cache")
    return {m: onnx_for(m, cache=cache) for m in ("srcnn", "deform-srcnn")}


@pytest.mark.parametrize("model,scale", [("deform-srcnn", 2.5), ("srcnn", 2.5), ("srcnn", 3.0)])
def test_exported_files_run_as_they_are_and_match_ort(exported, model, scale):
    x = np.random.default_rng(0).random((1, 3, 23, 31), dtype=np.float32)
    ovb = create_named("openvino", None, onnx=exported[model], threads=1)
    ref = create_named("ort", None, onnx=exported[model], threads=1).infer(x, scale)
    got = ovb.infer(x, scale)
    np.testing.assert_allclose(got, ref, rtol=0, atol=2e-5)
    assert ovb.last_path == ("folded x3" if (model, scale) == ("srcnn", 3.0) else "model graph")


@pytest.mark.parametrize("model,scale", [("srcnn", 3.0), ("deform-srcnn", 2.5)])
def test_tiles_on_openvino_equal_the_whole_image(exported, tmp_path, model, scale):
    """Bit for bit at integer scales; at other scales OpenVINO's shape-dependent fusion of the resize's
    multiply-adds moves a rare sample by one level (measured: 1e-5 to 1e-4 of them)."""
    import cv2

    from pipeline.sr import upscale

    img = (np.random.default_rng(2).random((60, 70, 3)) * 255).astype(np.uint8)
    cv2.imwrite(str(tmp_path / "a.png"), img)
    backend = create_named("openvino", None, onnx=exported[model], threads=1)
    out = {}
    for tile in (0, 24):
        upscale(tmp_path / "a.png", tmp_path / f"{tile}.png", backend=backend, scale=scale, tile=tile,
                progress=False, log=lambda _m: None)
        out[tile] = cv2.imread(str(tmp_path / f"{tile}.png")).astype(int)
    diff = np.abs(out[0] - out[24])
    if scale == int(scale):
        assert diff.max() == 0
    assert diff.max() <= 1 and (diff > 0).mean() < 1e-3


def test_bf16_runs_where_the_cpu_has_it_and_says_why_not_elsewhere(exported, monkeypatch):
    x = np.random.default_rng(0).random((1, 3, 32, 32), dtype=np.float32)
    statuses = {s.name: s for s in available(None, "bf16", onnx=exported["srcnn"])}
    assert not statuses["ort"].available and statuses["ort"].reason == "runs fp32, fp16, not bf16"
    if cpu.bf16_problem() is None:
        assert statuses["openvino"].available
        fp32 = create_named("openvino", None, "fp32", onnx=exported["srcnn"], threads=1).infer(x, 3.0)
        bf16 = create_named("openvino", None, "bf16", onnx=exported["srcnn"], threads=1).infer(x, 3.0)
        err = np.abs(bf16 - fp32).max()
        assert 0 < err < 0.05  # bf16 arithmetic: close, not identical (it really ran in bf16)
    monkeypatch.setenv(cpu.BF16_ENV, "0")  # a CPU without bf16 (forced)
    status = {s.name: s for s in available(None, "bf16", onnx=exported["srcnn"])}["openvino"]
    assert not status.available and cpu.BF16_ENV in status.reason
    from pipeline.errors import PipelineError

    with pytest.raises(PipelineError, match="bf16 is switched off"):
        create_named("openvino", None, "bf16", onnx=exported["srcnn"])


def test_int8_runs_its_float_parts_in_bf16_where_the_cpu_has_it_and_f32_elsewhere(monkeypatch):
    from pipeline.backends.openvino_backend import OpenVinoBackend, inference_hint

    assert inference_hint("fp32") == "f32"
    assert inference_hint("int8") == ("bf16" if cpu.bf16_problem() is None else "f32")
    monkeypatch.setenv(cpu.BF16_ENV, "0")  # a CPU without bf16 (forced): int8 still runs, its float parts in f32
    assert inference_hint("int8") == "f32" and inference_hint("bf16") == "f32"
    assert "int8, float parts f32" in OpenVinoBackend("srcnn-x3", "int8").describe()


def test_streams_run_submissions_side_by_side_with_the_one_call_output(exported):
    """run_streams: submissions start at once on OpenVINO's CPU streams (more in flight than streams, too) and give
    the one-call path's samples; 1 sets the one-call path back."""
    be = create_named("openvino", None, onnx=exported["srcnn"], threads=2)
    rng = np.random.default_rng(5)
    # the folded x3 graph, the model's graph at x2.5, and an image under the folded graph's smallest side
    work = [(rng.integers(0, 256, (1, 40, 44, 3), dtype=np.uint8), 3.0),
            (rng.integers(0, 256, (1, 30, 26, 3), dtype=np.uint8), 2.5),
            (rng.integers(0, 256, (1, 8, 9, 3), dtype=np.uint8), 3.0)]
    one = [be.infer_pixels(x, s) for x, s in work]
    assert be.run_streams(2) == 2
    pending = [be.submit_pixels(x, s) for x, s in work]  # three in flight on two streams
    outs = [np.zeros_like(o) for o in one]
    views = [[out[0]] for out in outs]  # an image's output buffer, as the sr stage passes it
    for p, view, out, ref in zip(pending, views, outs, one, strict=True):
        assert p.result(view) is view and out.tobytes() == ref.tobytes()
    assert {k for k, _ in be.streamed} == {0, 3}  # both graphs ran on streams
    assert be.run_streams(1) == 1
    assert be.submit_pixels(*work[0]).result().tobytes() == one[0].tobytes()
    assert create_named("openvino", None, onnx=exported["srcnn"], threads=1).run_streams(2) == 1  # one core: none


def test_a_folder_runs_on_streams_and_hands_the_backend_back(exported, tmp_path):
    """A folder of whole images keeps two in flight on two streams, a tiled image runs its tiles one call at a
    time (its last tile would run alone on one stream); both write what one image at a time writes and leave the
    given backend on its one-call path."""
    import cv2

    from pipeline.sr import upscale

    rng = np.random.default_rng(7)
    (tmp_path / "in").mkdir()
    for i, shape in enumerate([(40, 44, 3), (40, 44, 3), (52, 60, 3)]):
        cv2.imwrite(str(tmp_path / "in" / f"{i}.png"), rng.integers(0, 256, shape, dtype=np.uint8))
    be = create_named("openvino", None, onnx=exported["srcnn"], threads=2)
    for tile in (0, 20):
        upscale(tmp_path / "in", tmp_path / f"folder{tile}", backend=be, scale=3.0, tile=tile, progress=False,
                log=lambda _m: None)
        assert be.streams == 1 and bool(be.streamed) == (tile == 0)
        for i in range(3):
            upscale(tmp_path / "in" / f"{i}.png", tmp_path / f"one{tile}-{i}.png", backend=be, scale=3.0, tile=tile,
                    progress=False, log=lambda _m: None)
            a = cv2.imread(str(tmp_path / f"folder{tile}" / f"{i}.png"))
            assert a.tobytes() == cv2.imread(str(tmp_path / f"one{tile}-{i}.png")).tobytes()
        be.streamed.clear()
