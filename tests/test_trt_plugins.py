"""TensorRT plugin library (plugins_trt/, libsr_trt_plugins.so).

Host-side (CI, no GPU): runs the C++ self-test that loads the library like TensorRT does and drives the creators and
the build-time plugin API; checks the exported entry points and that libnvinfer is not a dependency.
GPU (marker `gpu`): one-plugin networks through the TensorRT Python API and through the ONNX parser, compared with
PyTorch / torchvision in FP32 and FP16.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pipeline.errors import PipelineError

SELFTEST_NAME = "trt_plugin_selftest"
HARNESS_NAME = "trt_plugin_gpu_harness"


@pytest.fixture(scope="module")
def plugin_lib() -> Path:
    from pipeline.native import libraries as native

    try:
        return native.trt_plugin_library()
    except PipelineError as e:
        if _torch_cuda() and _tensorrt_imports():
            pytest.fail(f"TensorRT plugin library missing on a machine with a GPU and TensorRT: {e}")
        pytest.skip(f"TensorRT plugin library not built (TensorRT headers missing at build time?): {e}")


def _tensorrt_imports() -> bool:
    try:
        import tensorrt  # noqa: F401
    except Exception:  # the bindings wheel alone cannot import without the TensorRT libraries
        return False
    return True


def _torch_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} not installed")
    return path


# ---- host-side checks ------------------------------------------------------------------------------------------

def test_selftest_passes(plugin_lib: Path):
    selftest = plugin_lib.parent / SELFTEST_NAME
    if not selftest.is_file():
        pytest.skip(f"{selftest} not built (it is built with the plugin library by `make plugins`)")
    proc = subprocess.run([str(selftest), str(plugin_lib)], capture_output=True, text=True, timeout=120)
    report = proc.stdout + proc.stderr
    failed = [line for line in proc.stdout.splitlines() if line.startswith("FAIL")]
    assert proc.returncode == 0 and not failed, report
    summary = re.search(r"# (\d+) checks, (\d+) failed", proc.stdout)
    assert summary is not None and int(summary.group(2)) == 0, report
    # Both creators were exercised (not just the loader).
    assert "# DynamicResize" in proc.stdout and "# DeformConv2d" in proc.stdout, report


def test_exports_only_tensorrt_entry_points(plugin_lib: Path):
    nm = _tool("nm")
    out = subprocess.run([nm, "-D", "--defined-only", str(plugin_lib)], capture_output=True, text=True,
                         check=True).stdout
    functions = {parts[2] for parts in (line.split() for line in out.splitlines())
                 if len(parts) == 3 and parts[1] in ("T", "W")}
    assert {"getCreators", "setLoggerFinder"} <= functions, out
    # Hidden visibility + version script: nothing else (e.g. the CUDA launchers) leaks out of the library.
    assert functions == {"getCreators", "setLoggerFinder"}, out


def test_does_not_need_libnvinfer(plugin_lib: Path):
    readelf = _tool("readelf")
    dyn = subprocess.run([readelf, "-d", str(plugin_lib)], capture_output=True, text=True, check=True).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dyn)
    assert needed, dyn
    assert not [n for n in needed if "nvinfer" in n or "nvonnxparser" in n], needed
    nm = _tool("nm")
    undefined = subprocess.run([nm, "-D", "--undefined-only", str(plugin_lib)], capture_output=True, text=True,
                               check=True).stdout
    # No TensorRT library symbol (createInferRuntime_INTERNAL, getInferLibVersion, getPluginRegistry, ...).
    assert not re.search(r"nvinfer|InferLib|getPluginRegistry|createInfer", undefined), undefined
    ldd = shutil.which("ldd")
    if ldd is not None:
        deps = subprocess.run([ldd, str(plugin_lib)], capture_output=True, text=True).stdout
        assert "libnvinfer" not in deps, deps


def _run_built(program: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    from pipeline.native.cuda_runtime import subprocess_env

    if not program.is_file():
        pytest.skip(f"{program} not built (it is built with the plugin library by `make plugins`)")
    return subprocess.run([str(program), *args], capture_output=True, text=True, timeout=timeout,
                          env=subprocess_env())


def _no_fail_lines(proc: subprocess.CompletedProcess) -> str:
    failed = [line for line in proc.stdout.splitlines() if line.startswith("FAIL")]
    assert not failed, "\n".join(failed[:20])
    return proc.stdout


def test_harness_host_side_steps_pass(plugin_lib: Path):
    """The GPU harness's host half (parser fields, round trip, shapes, dynamic profiles, workspace = the CPU
    library's minimum, CPU references) runs anywhere."""
    harness = plugin_lib.parent / HARNESS_NAME
    assert harness.is_file(), f"{harness} must be built (compiled with -Werror) wherever the plugin library is"
    proc = _run_built(harness, "--host-only")
    out = _no_fail_lines(proc)
    assert proc.returncode == 0, out[-3000:]
    for section in ("DynamicResize FP32 (size as shape input only)", "DynamicResize FP16 (size counted as input 1)",
                    "DeformConv2d fused FP16 [deform-srcnn's layer", "DeformConv2d im2col FP16 [64 ch", "allow_tf32=1",
                    "DeformConv2d fused FP32 [tile edges: 40 -> 40 ch", "offsets far outside the image"):
        assert section in out, section
    assert re.search(r"# \d+ checks, 0 failed", out), out[-500:]


HARNESS_SOURCES = sorted((Path(__file__).resolve().parents[1] / "plugins_trt" / "tests").glob("*.cpp"))


def _calls(source: str, name: str) -> int:
    """How often C++ `source` calls CUDA function `name` (that exact name)."""
    return len(re.findall(rf"\b{name}\s*\(", source))


def test_harness_transfers_are_ordered_with_its_stream():
    """The harness's host-side rule for its transfers (what --host-only cannot run): no blocking cudaMemcpy or
    cudaMemset (a pageable upload may return before it lands; both run on the legacy default stream, which the
    non-blocking stream the plugins are enqueued on does not wait for: random FAIL lines under load), every copy
    on a stream through streamCopy/streamFill, which wait for it."""
    assert HARNESS_SOURCES
    for path in HARNESS_SOURCES:
        text = path.read_text()
        for blocking in ("cudaMemcpy", "cudaMemset", "cudaMemcpy2D", "cudaMemcpyToSymbol", "cudaMemcpyFromSymbol"):
            assert not _calls(text, blocking), f"{path.name}: {blocking}(...) is not ordered with the harness stream"
        copies = _calls(text, "cudaMemcpyAsync")
        if copies:  # the one copy there is: streamCopy's, followed by the wait
            body = text[text.index("cudaError_t streamCopy("):text.index("cudaError_t streamFill(")]
            assert copies == 1 and "cudaMemcpyAsync" in body and "cudaStreamSynchronize(stream)" in body


@pytest.mark.gpu
def test_gpu_harness_copies_at_once_agree(plugin_lib: Path):
    """Four harness copies at once (GPU work beside each one): every check passes in each, which failed at random
    while the harness uploaded with cudaMemcpy from pageable memory (10 of 12 runs of 6 copies on an H200)."""
    if not _torch_cuda():
        pytest.skip("no CUDA device")
    from pipeline.native.cuda_runtime import subprocess_env

    harness = plugin_lib.parent / HARNESS_NAME
    procs = [subprocess.Popen([str(harness)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=subprocess_env()) for _ in range(4)]
    outs = [p.communicate(timeout=900)[0] for p in procs]
    failed = [line for out in outs for line in out.splitlines() if line.startswith("FAIL")]
    assert not failed, "\n".join(failed[:20])
    assert [p.returncode for p in procs] == [0] * 4, outs[0][-2000:]


def test_harness_exits_3_without_a_gpu(plugin_lib: Path):
    if _torch_cuda():
        pytest.skip("a CUDA GPU is present: test_gpu_harness covers this machine")
    proc = _run_built(plugin_lib.parent / HARNESS_NAME)
    assert proc.returncode == 3, proc.stdout[-2000:] + proc.stderr
    assert "no CUDA device" in proc.stdout


@pytest.mark.gpu
def test_gpu_harness(plugin_lib: Path):
    """Each plugin's whole IPluginV3 life on the GPU without TensorRT: direct and CUDA-graph enqueue, canaried
    workspace, every output against libsr_kernels_cpu."""
    if not _torch_cuda():
        pytest.skip("no CUDA device")
    proc = _run_built(plugin_lib.parent / HARNESS_NAME, timeout=900)
    out = _no_fail_lines(proc)
    assert proc.returncode == 0, out[-3000:]
    assert "CUDA graph replay matches libsr_kernels_cpu" in out


def test_libraries_carry_no_build_machine_path(plugin_lib: Path):
    readelf = _tool("readelf")
    libs = sorted(plugin_lib.parent.glob("libsr_*.so"))
    assert plugin_lib in libs and len(libs) >= 2, libs
    for lib in libs:
        dyn = subprocess.run([readelf, "-d", str(lib)], capture_output=True, text=True, check=True).stdout
        paths = [p for m in re.findall(r"\((?:RUNPATH|RPATH)\)\s+Library r(?:un)?path: \[([^\]]*)\]", dyn)
                 for p in m.split(":")]
        assert paths == ["$ORIGIN"], f"{lib.name}: {paths}"


def test_cuda_libraries_load_through_load_time_discovery(plugin_lib: Path):
    """With no build-time path, a fresh Python (torch not imported) still loads our CUDA libraries: pipeline.native
    preloads cudart/cuBLAS from the wheels or the toolkit first."""
    code = ("import sys; from pathlib import Path; from pipeline.native.libraries import load_cuda_library; "
            "[load_cuda_library(Path(p)) for p in sys.argv[1:]]; print('loaded')")
    libs = [str(plugin_lib), str(plugin_lib.parent / "libsr_kernels_cuda.so")]
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    proc = subprocess.run([sys.executable, "-c", code, *libs], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[1], env=env)
    assert proc.returncode == 0 and "loaded" in proc.stdout, proc.stderr


def test_plugin_library_says_which_headers_it_was_built_against(plugin_lib: Path):
    from pipeline.native.libraries import plugin_build_info

    info = plugin_build_info(plugin_lib)
    cache = (plugin_lib.parent / "CMakeCache.txt").read_text()
    include = re.search(r"^SR_TENSORRT_INCLUDE_DIR:PATH=(.*)$", cache, re.M).group(1)
    header = (Path(include) / "NvInferVersion.h").read_text()
    version = ".".join(re.search(rf"#define TRT_{p}_ENTERPRISE (\d+)", header).group(1)
                       for p in ("MAJOR", "MINOR", "PATCH"))
    assert info.get("tensorrt_headers") == version, info
    assert info.get("plugins") == "DynamicResize/1/sr,DeformConv2d/1/sr", info


# ---- GPU: real TensorRT engines --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def trt_env(gpu_plugin_lib):
    import tensorrt as trt

    from pipeline.native.cuda_runtime import preload

    plugin_lib = gpu_plugin_lib
    logger = trt.Logger(trt.Logger.WARNING)
    registry = trt.get_plugin_registry()
    if registry.get_creator("DynamicResize", "1", "sr") is None:
        preload()  # the library's RUNPATH is $ORIGIN alone
        assert registry.load_library(str(plugin_lib)) is not None, f"load_library({plugin_lib}) failed"
    for name in ("DynamicResize", "DeformConv2d"):
        assert registry.get_creator(name, "1", "sr") is not None, f"creator {name}/1/sr not registered"
    return trt, logger, registry


def _network(trt, builder):
    flags = 0
    strongly_typed = getattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED", None)
    if strongly_typed is not None:  # TensorRT 11 networks are strongly typed anyway
        flags |= 1 << int(strongly_typed)
    return builder.create_network(flags)


def _run_engine(trt, logger, serialized, inputs: dict, outputs: dict):
    import torch

    assert serialized is not None, "engine build failed (see TensorRT log)"
    engine = trt.Runtime(logger).deserialize_cuda_engine(serialized)
    context = engine.create_execution_context()
    for name, tensor in {**inputs, **outputs}.items():
        assert context.set_tensor_address(name, tensor.data_ptr()), name
    stream = torch.cuda.current_stream()
    assert context.execute_async_v3(stream.cuda_stream)
    stream.synchronize()


def _tolerance(dtype):
    import torch

    return dict(atol=1e-4, rtol=1e-4) if dtype == torch.float32 else dict(atol=2e-2, rtol=1e-2)


def _plugin_fields(trt, attrs: dict):
    return trt.PluginFieldCollection([trt.PluginField(k, np.asarray(v, dtype=np.int32), trt.PluginFieldType.INT32)
                                      for k, v in attrs.items()])


DEFORM_ATTRS = dict(strides=[2, 1], pads=[1, 2, 1, 2], dilations=[1, 2], group=[2], offset_group=[2],
                    kernel_shape=[3, 3])


def _deform_case(torch, dtype, with_bias: bool, with_mask: bool):
    g = torch.Generator().manual_seed(0)
    n, c, h, w, c_out, k, og = 2, 4, 9, 10, 6, 3, 2
    ho = (h + 2 - (k - 1) - 1) // 2 + 1
    wo = (w + 4 - 2 * (k - 1) - 1) // 1 + 1
    t = {
        "X": torch.rand(n, c, h, w, generator=g),
        "W": torch.randn(c_out, c // 2, k, k, generator=g) * 0.3,
        "offset": torch.randn(n, 2 * og * k * k, ho, wo, generator=g) * 2.0,  # some samples far outside
    }
    if with_bias or with_mask:
        t["B"] = torch.randn(c_out, generator=g) if with_bias else torch.zeros(c_out)
    if with_mask:
        t["mask"] = torch.rand(n, og * k * k, ho, wo, generator=g)
    t = {k_: v.to("cuda", dtype) for k_, v in t.items()}
    return t, (n, c_out, ho, wo)


def _deform_reference(torch, t):
    from torchvision.ops import deform_conv2d

    f = {k: v.float() for k, v in t.items()}
    return deform_conv2d(f["X"], f["offset"], f["W"], f.get("B"), stride=(2, 1), padding=(1, 2), dilation=(1, 2),
                         mask=f.get("mask"))


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_gpu_dynamic_resize_network_api(trt_env, precision):
    import torch
    import torch.nn.functional as F

    trt, logger, registry = trt_env
    dtype = torch.float32 if precision == "fp32" else torch.float16
    trt_dtype = trt.float32 if precision == "fp32" else trt.float16
    builder = trt.Builder(logger)
    network = _network(trt, builder)
    x = network.add_input("x", trt_dtype, (2, 3, 17, 23))
    size = network.add_constant((2,), trt.Weights(np.array([40, 31], dtype=np.int64))).get_output(0)
    plugin = registry.get_creator("DynamicResize", "1", "sr").create_plugin(
        "resize", trt.PluginFieldCollection([]), trt.TensorRTPhase.BUILD)
    layer = network.add_plugin_v3([x], [size], plugin)
    layer.get_output(0).name = "y"
    network.mark_output(layer.get_output(0))
    serialized = builder.build_serialized_network(network, builder.create_builder_config())

    xt = torch.rand(2, 3, 17, 23, device="cuda", dtype=dtype)
    yt = torch.empty(2, 3, 40, 31, device="cuda", dtype=dtype)
    _run_engine(trt, logger, serialized, {"x": xt}, {"y": yt})
    ref = F.interpolate(xt.float(), size=(40, 31), mode="bicubic", align_corners=False)
    torch.testing.assert_close(yt.float(), ref, **_tolerance(dtype))


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("with_bias,with_mask", [(False, False), (True, False), (True, True)])
def test_gpu_deform_conv2d_network_api(trt_env, precision, with_bias, with_mask):
    import torch

    trt, logger, registry = trt_env
    dtype = torch.float32 if precision == "fp32" else torch.float16
    trt_dtype = trt.float32 if precision == "fp32" else trt.float16
    t, out_shape = _deform_case(torch, dtype, with_bias, with_mask)
    builder = trt.Builder(logger)
    network = _network(trt, builder)
    inputs = [network.add_input(name, trt_dtype, tuple(v.shape)) for name, v in t.items()]
    plugin = registry.get_creator("DeformConv2d", "1", "sr").create_plugin(
        "dcn", _plugin_fields(trt, DEFORM_ATTRS), trt.TensorRTPhase.BUILD)
    assert plugin is not None
    layer = network.add_plugin_v3(inputs, [], plugin)
    layer.get_output(0).name = "y"
    network.mark_output(layer.get_output(0))
    serialized = builder.build_serialized_network(network, builder.create_builder_config())

    yt = torch.empty(out_shape, device="cuda", dtype=dtype)
    _run_engine(trt, logger, serialized, t, {"y": yt})
    torch.testing.assert_close(yt.float(), _deform_reference(torch, t), **_tolerance(dtype))


def _onnx_model(node, inputs, outputs, initializers):
    import onnx
    from onnx import helper

    graph = helper.make_graph([node], "one_plugin", inputs, outputs, initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19), helper.make_opsetid("sr", 1)])
    model.ir_version = 10
    return onnx.ModelProto.SerializeToString(model)


def _parse_and_build(trt, logger, onnx_bytes):
    builder = trt.Builder(logger)
    network = _network(trt, builder)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(onnx_bytes):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        pytest.fail(f"ONNX parser rejected the plugin node: {errors}")
    return builder.build_serialized_network(network, builder.create_builder_config())


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_gpu_dynamic_resize_onnx_parser(trt_env, precision):
    """The exported form: sr::DynamicResize with plugin_namespace and the size input declared as a shape input."""
    import torch
    import torch.nn.functional as F
    from onnx import TensorProto, helper, numpy_helper

    trt, logger, _ = trt_env
    dtype = torch.float32 if precision == "fp32" else torch.float16
    elem = TensorProto.FLOAT if precision == "fp32" else TensorProto.FLOAT16
    node = helper.make_node("DynamicResize", ["input", "size"], ["output"], domain="sr", plugin_namespace="sr",
                            tensorrt_plugin_shape_input_indices=[1])
    onnx_bytes = _onnx_model(
        node, [helper.make_tensor_value_info("input", elem, [1, 3, 20, 24])],
        [helper.make_tensor_value_info("output", elem, [1, 3, 50, 37])],
        [numpy_helper.from_array(np.array([50, 37], dtype=np.int64), "size")])
    serialized = _parse_and_build(trt, logger, onnx_bytes)
    xt = torch.rand(1, 3, 20, 24, device="cuda", dtype=dtype)
    yt = torch.empty(1, 3, 50, 37, device="cuda", dtype=dtype)
    _run_engine(trt, logger, serialized, {"input": xt}, {"output": yt})
    ref = F.interpolate(xt.float(), size=(50, 37), mode="bicubic", align_corners=False)
    torch.testing.assert_close(yt.float(), ref, **_tolerance(dtype))


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_gpu_deform_conv2d_onnx_parser(trt_env, precision):
    import torch
    from onnx import TensorProto, helper, numpy_helper

    trt, logger, _ = trt_env
    dtype = torch.float32 if precision == "fp32" else torch.float16
    elem = TensorProto.FLOAT if precision == "fp32" else TensorProto.FLOAT16
    t, out_shape = _deform_case(torch, dtype, with_bias=True, with_mask=True)
    # As exported: group / offset_group are INT attributes, the others INTS.
    attrs = {k: (v[0] if k in ("group", "offset_group") else v) for k, v in DEFORM_ATTRS.items()}
    node = helper.make_node("DeformConv2d", list(t), ["Y"], domain="sr", plugin_namespace="sr", **attrs)
    # As exported: W and B are initializers (constants for TensorRT), the rest are graph tensors.
    consts = ("W", "B")
    onnx_bytes = _onnx_model(
        node, [helper.make_tensor_value_info(k, elem, list(v.shape)) for k, v in t.items() if k not in consts],
        [helper.make_tensor_value_info("Y", elem, list(out_shape))],
        [numpy_helper.from_array(t[k].cpu().numpy(), k) for k in consts])
    serialized = _parse_and_build(trt, logger, onnx_bytes)
    yt = torch.empty(out_shape, device="cuda", dtype=dtype)
    _run_engine(trt, logger, serialized, {k: v for k, v in t.items() if k not in consts}, {"Y": yt})
    torch.testing.assert_close(yt.float(), _deform_reference(torch, t), **_tolerance(dtype))
