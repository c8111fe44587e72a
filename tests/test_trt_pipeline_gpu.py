"""The real pipeline on TensorRT (gpu + TensorRT; skipped with the reason elsewhere): srcnn and deform-srcnn exported
with the sr ops, bodies stripped, parsed with `size` an INT64 network shape-tensor input, two optimisation profiles
with three shapes each (batch > 1), FP32 with TF32 off and FP16, run directly and by CUDA-graph replay, compared with
PyTorch FP32 at the compare stage's tolerances (FP32 max abs <= 1e-4, FP16 PSNR >= 50 dB)."""
from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

MODELS = ("srcnn", "deform-srcnn")
# Each shape (batch, height, width, scale) is admitted by its own profile only (profile_for_input takes the first).
PROFILES = [dict(batch=[1, 2, 3], height=[16, 32, 48], width=[16, 40, 48], scale=[2.0, 3.0, 4.0]),
            dict(batch=[2, 2, 4], height=[48, 64, 96], width=[48, 64, 96], scale=[2.0, 2.5, 3.0])]
SHAPES = [[(2, 16, 16, 2.0), (1, 32, 40, 3.0), (3, 48, 48, 4.0)],
          [(2, 48, 64, 2.0), (4, 64, 64, 2.5), (2, 96, 96, 3.0)]]


@pytest.fixture(scope="module", params=[(m, p) for m in MODELS for p in ("fp32", "fp16")], ids=lambda v: "-".join(v))
def engine(request, gpu_plugin_lib, tmp_path_factory):
    from models.registry import get_spec
    from pipeline.engine import Profile, build_engine, validate_profile
    from pipeline.export.core import export_model

    model, precision = request.param
    out = tmp_path_factory.mktemp(f"{model}-{precision}")
    onnx_file = out / f"{model}-{precision}.onnx"
    export_model(model, onnx_file, ops="custom", precision=precision)
    spec = get_spec(model)
    profiles = [validate_profile(Profile.from_dict(p), spec) for p in PROFILES]
    path = out / f"{model}-{precision}.engine"
    sidecar = build_engine(onnx_file, path, profiles, plugin_lib=gpu_plugin_lib, progress=False, tf32=False)
    return model, precision, path, sidecar


def _images(batch: int, h: int, w: int) -> np.ndarray:
    from pipeline.analysis.compare import compare_inputs

    crops = list(compare_inputs(96).values())
    return np.concatenate([crops[i % len(crops)][:, :, :h, :w] for i in range(batch)], axis=0)


def test_engine_has_size_shape_tensor_two_profiles_and_tf32_off(engine):
    import tensorrt as trt

    model, precision, path, sidecar = engine
    assert sidecar["tf32"] is False and sidecar["precision"] == precision and len(sidecar["profiles"]) == 2
    runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
    eng = runtime.deserialize_cuda_engine(path.read_bytes())
    assert eng.num_optimization_profiles == 2
    assert eng.get_tensor_dtype("size") == trt.DataType.INT64 and eng.is_shape_inference_io("size")


@pytest.mark.parametrize("cuda_graph", [False, True], ids=["direct", "cuda-graph"])
def test_engine_matches_pytorch_on_every_profile_shape(engine, cuda_graph):
    import torch

    from models.registry import get_spec, output_size, run
    from pipeline.analysis.compare import DEFAULT_PSNR_FP16, DEFAULT_TOL_FP32, error_stats, load_net, verdict
    from pipeline.backends.trt_backend import TrtBackend
    from pipeline.engine import profile_for_input

    model, precision, path, _ = engine
    spec = get_spec(model)
    net = load_net(model)
    backend = TrtBackend(model, precision, engine=path, cuda_graph=cuda_graph).load()
    assert "TF32 off" in backend.describe() or precision == "fp16"
    for profile_idx, shapes in enumerate(SHAPES):
        for n, h, w, scale in shapes:
            x = _images(n, h, w)
            out_h, out_w = output_size(h, w, scale)
            assert profile_for_input(backend.profiles, n, h, w, out_h, out_w) == profile_idx
            with torch.inference_mode():
                ref = run(net, spec, torch.from_numpy(x), scale).numpy()
            for _ in range(2 if cuda_graph else 1):  # the second call replays the captured graph
                got = backend.infer(x, scale)
                stats = error_stats(got, ref)
                ok, criterion = verdict(stats, precision, DEFAULT_TOL_FP32, DEFAULT_PSNR_FP16)
                assert ok, (f"{model} {precision} profile {profile_idx} {n}x{h}x{w} x{scale:g}: max abs "
                            f"{stats['max_abs']:.2e}, PSNR {stats['psnr_db']:.1f} dB, needs {criterion}")


@pytest.mark.parametrize("precision", ["bf16", "int8"])
def test_bf16_and_int8_engines_build_from_the_folded_graph_and_run(precision, gpu_plugin_lib, tmp_path):
    """`engine --precision bf16|int8` for real: srcnn-x3's engine built from its folded x3 graph (bf16 converted,
    int8 its Q/DQ file, calibrated here), loaded by the trt backend and run direct, by CUDA-graph replay and with
    pixel I/O, close to PyTorch fp32 (bf16: 8 mantissa bits; int8: the recipe's ~0.005 RMS)."""
    import torch

    pytest.importorskip("onnxscript", reason="the export needs onnxscript (export extra)")
    from models.registry import get_spec, run
    from pipeline.analysis.compare import error_stats, load_net
    from pipeline.backends.base import Backend
    from pipeline.backends.trt_backend import TrtBackend
    from pipeline.engine import Profile, build_engine, validate_profile
    from pipeline.export.core import export_model

    if precision == "bf16" and torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("bf16 engines need compute capability 8.0")
    model, spec = "srcnn-x3", get_spec("srcnn-x3")
    onnx_file = tmp_path / f"{model}.onnx"
    export_model(model, onnx_file, ops="custom", precision="fp32")  # and its folded x3 graph beside it
    profiles = [validate_profile(Profile(batch=(1, 1, 2), height=(16, 48, 96), width=(16, 48, 96),
                                         scale=(3.0, 3.0, 3.0)), spec)]
    path = tmp_path / f"{model}-{precision}.engine"
    sidecar = build_engine(onnx_file, path, profiles, precision=precision, plugin_lib=gpu_plugin_lib, progress=False)
    assert sidecar["precision"] == precision and sidecar["graph"].startswith("folded x3"), sidecar["graph"]
    x = _images(2, 48, 40)
    with torch.inference_mode():
        ref = run(load_net(model), spec, torch.from_numpy(x), 3.0).numpy()
    floor = {"bf16": 40.0, "int8": 30.0}[precision]
    for cuda_graph in (False, True):
        be = TrtBackend(model, precision, engine=path, cuda_graph=cuda_graph).load()
        assert f"{precision} from the folded x3" in be.describe()
        for _ in range(3):  # with cuda_graph: direct, captured, replayed
            stats = error_stats(be.infer(x, 3.0), ref)
            assert stats["finite"] and stats["psnr_db"] >= floor, (precision, cuda_graph, stats)
        pixels = np.random.default_rng(3).integers(0, 256, (1, 40, 32, 3)).astype(np.uint8)
        assert np.array_equal(be.infer_pixels(pixels, 3.0), Backend.infer_pixels(be, pixels, 3.0))
