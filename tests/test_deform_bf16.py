"""bf16 DeformConv2d: our CPU kernel (kernels_cpu.deform_conv2d_bf16) against the FP32 kernel, and OpenVINO running
sr::DeformConv2d on it at bf16 inference precision (pipeline.native.openvino_bf16), where its own
DeformableConvolution has only an FP32 kernel."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper
from onnx import numpy_helper as nh

from pipeline.errors import PipelineError
from pipeline.native import kernels_cpu

pytestmark = pytest.mark.usefixtures("cpu_kernels")
BF16_STEP = 2.0 ** -8  # bf16 keeps 8 significant bits: rounding moves a value by at most half of this, relatively


def _problem(seed, n=2, c=8, c_out=6, h=9, w=11, k=3, og=2, g=1, stride=1, pad=1, dil=1):
    """Inputs of either sign, weights, offsets with many taps outside the image, a mask and a bias."""
    rng = np.random.default_rng(seed)
    ho, wo = (h + 2 * pad - dil * (k - 1) - 1) // stride + 1, (w + 2 * pad - dil * (k - 1) - 1) // stride + 1
    return dict(x=rng.standard_normal((n, c, h, w)).astype(np.float32),
                weight=rng.standard_normal((c_out, c // g, k, k)).astype(np.float32),
                offset=(rng.standard_normal((n, 2 * og * k * k, ho, wo)) * 2.5).astype(np.float32),
                mask=rng.random((n, og * k * k, ho, wo)).astype(np.float32),
                bias=rng.standard_normal(c_out).astype(np.float32),
                attrs=dict(stride=stride, padding=pad, dilation=dil, groups=g, offset_groups=og))


def _bound(p):
    """How far bf16 may move an output from FP32's: the input, the sample taken from it, the column and the weight
    are each rounded to bf16 (relative error <= 2^-9 each), so <= 4 * 2^-9 of sum |w| |column| (FP32's own kernel on
    |x| and |w|, no bias), plus FP32 summation noise."""
    magnitude = kernels_cpu.deform_conv2d(np.abs(p["x"]), np.abs(p["weight"]), p["offset"], None, p["mask"],
                                          **p["attrs"])
    return 4 * BF16_STEP / 2 * magnitude + 1e-5


@pytest.mark.parametrize("case", [dict(), dict(g=2, og=1, stride=2, pad=0, dil=2), dict(c=40, c_out=20, og=4, k=1,
                                                                                         pad=0)])
def test_the_bf16_kernel_is_the_fp32_kernel_within_bf16_rounding(case):
    p = _problem(1, **case)
    got = kernels_cpu.deform_conv2d_bf16(p["x"], p["weight"], p["offset"], p["bias"], p["mask"], **p["attrs"])
    ref = kernels_cpu.deform_conv2d(p["x"], p["weight"], p["offset"], p["bias"], p["mask"], **p["attrs"])
    err = np.abs(got - ref)
    assert np.all(err <= _bound(p)), (err / _bound(p)).max()
    assert err.max() > 0  # it does round: a bf16 path, not the FP32 one
    portable = kernels_cpu.deform_conv2d_bf16(p["x"], p["weight"], p["offset"], p["bias"], p["mask"], portable=True,
                                              threads=3, **p["attrs"])
    assert portable.tobytes() == got.tobytes()  # AVX512-BF16 or plain loops, threads or not: the same bytes


def test_bf16_io_is_the_float32_io_of_bf16_values_with_the_output_rounded():
    p = _problem(5)
    x, offset, mask = (_to_bf16(p[k]) for k in ("x", "offset", "mask"))
    bits = [_bits(a) for a in (x, offset, mask)]
    got = kernels_cpu.deform_conv2d_bf16(bits[0], p["weight"], bits[1], p["bias"], bits[2], bf16_io=True,
                                         **p["attrs"])
    assert got.dtype == np.uint16
    ref = _to_bf16(kernels_cpu.deform_conv2d_bf16(x, p["weight"], offset, p["bias"], mask, **p["attrs"]))
    assert got.tobytes() == _bits(ref).tobytes()
    with pytest.raises(PipelineError, match="input must hold bf16 bit patterns"):
        kernels_cpu.deform_conv2d_bf16(x, p["weight"], bits[1], p["bias"], bits[2], bf16_io=True, **p["attrs"])


def test_bf16_values_make_the_bf16_kernel_exact_up_to_fp32_sums():
    """Inputs and weights already bf16, integer offsets and no mask: every column is an input value, so only the FP32
    sums (in another order than the FP32 kernel's) round."""
    p = _problem(2, og=1)
    rng = np.random.default_rng(2)
    p["x"] = _to_bf16(rng.standard_normal((2, 8, 9, 11)).astype(np.float32))
    p["weight"] = _to_bf16(rng.standard_normal((6, 8, 3, 3)).astype(np.float32))
    offset = np.rint(p["offset"]).astype(np.float32)
    got = kernels_cpu.deform_conv2d_bf16(p["x"], p["weight"], offset, p["bias"], None, **p["attrs"])
    ref = kernels_cpu.deform_conv2d(p["x"], p["weight"], offset, p["bias"], None, **p["attrs"])
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def _bits(a: np.ndarray) -> np.ndarray:
    """The bf16 bit patterns (uint16) of float32 values that are bf16 values."""
    return (np.ascontiguousarray(a, np.float32).view(np.uint32) >> 16).astype(np.uint16)


def _to_bf16(a: np.ndarray) -> np.ndarray:
    """float32 values rounded to bf16 (round to nearest even), as float32."""
    bits = a.view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16).astype(np.uint32).view(np.float32)


def test_bad_arguments_are_one_line():
    p = _problem(3)
    with pytest.raises(PipelineError, match="offset shape"):
        kernels_cpu.deform_conv2d_bf16(p["x"], p["weight"], p["offset"][:, :5], p["bias"], p["mask"], **p["attrs"])
    with pytest.raises(PipelineError, match="out must be a C-contiguous float32 array"):
        kernels_cpu.deform_conv2d_bf16(p["x"], p["weight"], p["offset"], p["bias"], p["mask"],
                                       out=np.empty((1, 2), np.float32), **p["attrs"])


def _deform_model(p):
    a = p["attrs"]
    node = helper.make_node("DeformConv2d", ["X", "W", "offset", "B", "mask"], ["Y"], domain="sr",
                            pads=[a["padding"]] * 4, strides=[a["stride"]] * 2, dilations=[a["dilation"]] * 2,
                            group=a["groups"], offset_group=a["offset_groups"],
                            kernel_shape=list(p["weight"].shape[2:]))
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(name, TP.FLOAT, list(p[key].shape))
                      for name, key in (("X", "x"), ("offset", "offset"), ("mask", "mask"))],
        [helper.make_tensor_value_info("Y", TP.FLOAT, None)],
        [nh.from_array(p["weight"], "W"), nh.from_array(p["bias"], "B")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19), helper.make_opsetid("sr", 1)])


@pytest.mark.parametrize("bf16", [True, False])
def test_openvino_runs_deform_conv_on_the_bf16_kernel_at_bf16_precision_only(tmp_path, bf16):
    """Converted for bf16 inference precision, sr::DeformConv2d is our bf16 kernel, byte for byte; else it stays
    OpenVINO's DeformableConvolution (FP32). (Compiled at f32 either way: a bf16 hint needs a bf16 CPU, and the
    kernel is the node's whatever OpenVINO runs around it.)"""
    ov = pytest.importorskip("openvino", reason="OpenVINO is not installed")
    from pipeline.native.openvino_bf16 import compile_config
    from pipeline.native.openvino_ops import extensions

    p = _problem(4, c=16, c_out=8)
    path = tmp_path / "dc.onnx"
    onnx.save(_deform_model(p), path)
    core = ov.Core()
    for ext in extensions(threads=2, bf16=bf16):
        core.add_extension(ext)
    model = core.read_model(str(path))
    # the kernel's worker threads must not inherit a pinned inference thread's single core
    assert compile_config(model) == ({"ENABLE_CPU_PINNING": False} if bf16 else {})
    compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32", **compile_config(model)})
    layers = {op.get_rt_info()["layerType"].astype(str) for op in compiled.get_runtime_model().get_ops()}
    got = compiled({"X": p["x"], "offset": p["offset"], "mask": p["mask"]})[0]
    if not bf16:
        assert "DeformableConvolution" in layers and "Reference" not in layers
        ref = kernels_cpu.deform_conv2d(p["x"], p["weight"], p["offset"], p["bias"], p["mask"], **p["attrs"])
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-5)
        return
    assert "Reference" in layers and "DeformableConvolution" not in layers
    # its X, offset and mask reach it in bf16, and its output leaves in bf16
    ref = _to_bf16(kernels_cpu.deform_conv2d_bf16(_to_bf16(p["x"]), p["weight"], _to_bf16(p["offset"]), p["bias"],
                                                  _to_bf16(p["mask"]), **p["attrs"]))
    assert got.tobytes() == ref.tobytes()


def test_openvino_feeds_the_kernel_the_offset_and_mask_logits_tensor_unsplit(tmp_path):
    """A torchvision model's offset/mask conv output T, split as offset = T[:, :2k] and mask = Sigmoid(T[:, 2k:]):
    the kernel reads T itself and takes the sigmoid, so OpenVINO runs no split and no Sigmoid."""
    ov = pytest.importorskip("openvino", reason="OpenVINO is not installed")
    from pipeline.native.openvino_ops import extensions

    p = _problem(6, n=1, c=16, c_out=8)
    k2 = p["offset"].shape[1]
    logits = np.random.default_rng(6).standard_normal(p["mask"].shape).astype(np.float32)
    model = _deform_model(p)
    consts = {"s0": [0], "s1": [k2], "s2": [k2 + k2 // 2], "ax": [1], "st": [1]}
    model.graph.initializer.extend(nh.from_array(np.array(v, np.int64), k) for k, v in consts.items())
    model.graph.input[1].CopyFrom(helper.make_tensor_value_info("T", TP.FLOAT, [1, k2 + k2 // 2, *p["mask"].shape[2:]]))
    del model.graph.input[2]
    model.graph.node.insert(0, helper.make_node("Slice", ["T", "s0", "s1", "ax", "st"], ["offset"]))
    model.graph.node.insert(1, helper.make_node("Slice", ["T", "s1", "s2", "ax", "st"], ["logits"]))
    model.graph.node.insert(2, helper.make_node("Sigmoid", ["logits"], ["mask"]))
    path = tmp_path / "split.onnx"
    onnx.save(model, path)
    core = ov.Core()
    for ext in extensions(threads=2, bf16=True):
        core.add_extension(ext)
    compiled = core.compile_model(core.read_model(str(path)), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    layers = {op.get_rt_info()["layerType"].astype(str) for op in compiled.get_runtime_model().get_ops()}
    assert "Reference" in layers and not layers & {"Sigmoid", "VariadicSplit", "StridedSlice", "Slice", "Split"}
    got = compiled({"X": p["x"], "T": np.concatenate([p["offset"], logits], axis=1)})[0]
    ref = kernels_cpu.deform_conv2d_bf16(_to_bf16(p["x"]), p["weight"], _to_bf16(p["offset"]), p["bias"],
                                         _to_bf16(logits), mask_logits=True, **p["attrs"])
    assert got.tobytes() == _to_bf16(ref).tobytes()
    sigmoid = kernels_cpu.deform_conv2d_bf16(_to_bf16(p["x"]), p["weight"], _to_bf16(p["offset"]), p["bias"],
                                             1 / (1 + np.exp(-_to_bf16(logits))), **p["attrs"])
    np.testing.assert_allclose(ref, sigmoid, rtol=0, atol=_bound(p).max())  # the same mask, up to bf16 rounding
