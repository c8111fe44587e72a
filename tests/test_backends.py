"""Backends: ORT runners vs PyTorch on real images, input errors, availability and auto selection."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from models.registry import get_spec, output_size
from pipeline import backends
from pipeline.backends import AutoPick, BackendStatus, available, create, pick_auto
from pipeline.errors import PipelineError


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    """Seeded random weights for every model (shipped weights may not exist yet; values do not matter here)."""
    folder = tmp_path_factory.mktemp("weights")
    out = {}
    for i, name in enumerate(("srcnn", "srcnn-x3", "deform-srcnn")):
        torch.manual_seed(i)
        net = get_spec(name).build()
        if name == "deform-srcnn":  # non-zero offsets so the deformable sampling is really exercised
            torch.nn.init.normal_(net.offset_conv.weight, std=0.05)
        out[name] = folder / f"{name}.pt"
        torch.save(net.state_dict(), out[name])
    return out


@pytest.fixture(autouse=True)
def cache(tmp_path_factory, monkeypatch):
    # One cache per test module: exports happen once, never in the user's ~/.cache.
    root = tmp_path_factory.getbasetemp() / "srdeploy-cache"
    monkeypatch.setenv("SRDEPLOY_CACHE", str(root))
    return root


@pytest.fixture(scope="module")
def image():
    """A real photo crop (skimage astronaut), NCHW float32 in [0, 1]."""
    from skimage import data

    img = data.astronaut()[100:136, 180:220]  # 36x40: odd-ish sizes catch off-by-one resizes
    return np.ascontiguousarray(img.transpose(2, 0, 1)[None].astype(np.float32) / 255.0)


def _torch_ref(model, weights, x, scale):
    b = create("torch", model, weights=weights[model], device="cpu")
    return b.infer(x, scale)


# -- torch -------------------------------------------------------------------------------------------
def test_torch_backend_output_size_and_model_equivalence(weights, image):
    from models.registry import load_model, run

    b = create("torch", "srcnn", weights=weights["srcnn"], device="cpu")
    assert b.name == "torch" and b.device == "cpu" and b.precision == "fp32"
    y = b.infer(image, 2.5)
    assert y.dtype == np.float32 and y.shape == (1, 3, *output_size(36, 40, 2.5)) == (1, 3, 90, 100)
    net = load_model("srcnn", weights["srcnn"])
    with torch.no_grad():
        ref = run(net, get_spec("srcnn"), torch.from_numpy(image), 2.5).numpy()
    np.testing.assert_allclose(y, ref, atol=1e-5)
    # channels_last is a layout choice only: same numbers
    y_cl = create("torch", "srcnn", weights=weights["srcnn"], device="cpu", channels_last=True).infer(image, 2.5)
    np.testing.assert_allclose(y_cl, ref, atol=1e-4)


def test_torch_fp16_on_cpu_is_refused(weights):
    if torch.cuda.is_available():
        pytest.skip("CUDA present: fp16 is allowed there")
    with pytest.raises(PipelineError, match="fp16 needs a CUDA GPU"):
        create("torch", "srcnn", "fp16", weights=weights["srcnn"])


# -- ORT ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("model,scales", [("srcnn-x3", [3.0]), ("srcnn", [2.0, 2.5, 3.0]), ("deform-srcnn", [2.0])])
def test_ort_cpu_matches_torch(model, scales, weights, image):
    from pipeline.backends.ort_backend import PROVIDERS, pick_provider

    b: Any = create("ort", model, weights=weights[model])  # the best provider: CPU on CI, CUDA/TensorRT on a GPU box
    assert b.provider == pick_provider() and PROVIDERS[b.provider] in b.describe()
    assert b.session.get_providers()[0] == PROVIDERS[b.provider]
    for s in scales:
        y = b.infer(image, s)
        ref = _torch_ref(model, weights, image, s)
        assert y.shape == ref.shape == (1, 3, *output_size(36, 40, s))
        assert np.abs(y - ref).max() <= 1e-4, (model, s, np.abs(y - ref).max())


def test_ort_batch_and_cache_reuse(weights, image, cache):
    b = create("ort-cpu", "srcnn", weights=weights["srcnn"])
    assert b.name == "ort-cpu"
    onnx_file = b.onnx_file
    assert onnx_file.parent.parent == cache and onnx_file.is_file()
    mtime = onnx_file.stat().st_mtime_ns
    batch = np.concatenate([image, image[:, :, ::-1, ::-1].copy()])
    y = b.infer(batch, 3.0)
    ref = _torch_ref("srcnn", weights, batch, 3.0)
    assert y.shape == (2, 3, 108, 120) and np.abs(y - ref).max() <= 1e-4
    again = create("ort", "srcnn", weights=weights["srcnn"])
    assert again.onnx_file == onnx_file and onnx_file.stat().st_mtime_ns == mtime  # served from the cache


def test_ort_fp16_graph_close_to_fp32(weights, image):
    b = create("ort", "srcnn", "fp16", weights=weights["srcnn"])
    y = b.infer(image, 2.0)
    ref = _torch_ref("srcnn", weights, image, 2.0)
    assert y.dtype == np.float32
    mse = float(np.mean((y - ref) ** 2))
    assert 10 * np.log10(1.0 / max(mse, 1e-20)) >= 50


def test_ort_onnx_override_wrong_model_refused(weights, image):
    b = create("ort", "srcnn", weights=weights["srcnn"])
    with pytest.raises(PipelineError, match="exported for model 'srcnn'"):
        create("ort", "srcnn-x3", onnx=b.onnx_file)


@pytest.mark.skipif(importlib.util.find_spec("pipeline.native.ort_ops") is None,
                    reason="pipeline.native.ort_ops (kernels worker) not present yet")
@pytest.mark.parametrize("model", ["srcnn", "deform-srcnn"])
def test_ort_sr_kernels_match_torch(model, weights, image):
    st = {s.name: s for s in available(model, weights=weights[model])}["ort-sr-kernels"]
    if not st.available:
        pytest.skip(f"ort-sr-kernels unavailable here: {st.reason}")
    b: Any = create("ort-sr-kernels", model, weights=weights[model])
    assert b.sr_nodes >= 1  # our kernels, not an inlined standard-op body, ran the sr nodes
    for s in (2.0, 3.0):
        y = b.infer(image, s)
        ref = _torch_ref(model, weights, image, s)
        assert np.abs(y - ref).max() <= 1e-4


def test_ort_folded_exact_and_says_which_path_ran(weights, image):
    b: Any = create("ort-folded", "srcnn", weights=weights["srcnn"])
    for s, path in ((2.0, "folded x2"), (3.0, "folded x3"), (2.5, "plain graph")):
        y = b.infer(image, s)
        assert b.last_path == path
        assert np.abs(y - _torch_ref("srcnn", weights, image, s)).max() <= 1e-4, s
    tiny = image[:, :, :4, :5].copy()  # smaller than the folded border strips
    y = b.infer(tiny, 3.0)
    assert b.last_path == "plain graph" and y.shape == (1, 3, 12, 15)
    assert np.abs(y - _torch_ref("srcnn", weights, tiny, 3.0)).max() <= 1e-4
    x3 = create("ort-folded", "srcnn-x3", weights=weights["srcnn-x3"])
    assert np.abs(x3.infer(image, 3.0) - _torch_ref("srcnn-x3", weights, image, 3.0)).max() <= 1e-4
    with pytest.raises(PipelineError, match="SRCNN"):
        create("ort-folded", "deform-srcnn", weights=weights["deform-srcnn"])


def test_trt_ep_graph_rewrite(weights):
    """ORT's TensorRT provider gets the stripped graph with our nodes in its plugin domain."""
    import onnx

    from pipeline.backends.ort_backend import TRT_EP_PLUGIN_DOMAIN, rewrite_for_trt_ep

    b = create("ort", "deform-srcnn", weights=weights["deform-srcnn"])
    m = rewrite_for_trt_ep(onnx.load(str(b.onnx_file)))
    custom = [n for n in m.graph.node if n.domain == TRT_EP_PLUGIN_DOMAIN]
    assert sorted(n.op_type for n in custom) == ["DeformConv2d", "DynamicResize"]
    assert not any(n.domain == "sr" for n in m.graph.node) and not any(f.domain == "sr" for f in m.functions)
    for n in custom:
        attrs = {a.name: a for a in n.attribute}
        assert attrs["plugin_namespace"].s == b"sr"
    domains = {o.domain for o in m.opset_import}
    assert domains >= {"", TRT_EP_PLUGIN_DOMAIN} and "sr" not in domains


# -- bad input ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["torch", "ort", "ort-folded"])
def test_bad_input_is_one_clear_error(name, weights, image):
    b = create(name, "srcnn", weights=weights["srcnn"])
    cases = [
        (image[0], "rank 4"),
        (np.concatenate([image, image[:, :1]], axis=1), "expected 3 channels"),
        (image.astype(np.float64), "dtype mismatch"),
        (image.astype(np.uint8), "dtype mismatch"),
        (image[:, :, :0], "empty batch"),
        ([[1.0]], "numpy NCHW"),
    ]
    for bad, msg in cases:
        with pytest.raises(PipelineError, match=msg):
            b.infer(bad, 2.0)
    for bad_scale in (0.5, 1.0, 9.0, float("nan")):
        with pytest.raises(PipelineError, match="out of range"):
            b.infer(image, bad_scale)


def test_static_model_accepts_only_its_factor(weights, image):
    b = create("ort", "srcnn-x3", weights=weights["srcnn-x3"])
    with pytest.raises(PipelineError, match=r"exactly 3"):
        b.infer(image, 2.0)


def test_create_errors():
    with pytest.raises(PipelineError, match="unknown backend 'tensorflow'"):
        create("tensorflow", "srcnn")
    with pytest.raises(PipelineError, match="unknown model"):
        create("torch", "resnet")
    with pytest.raises(PipelineError, match="option 'engine' does not apply to backend 'torch'"):
        create("torch", "srcnn", engine="x.engine")
    with pytest.raises(PipelineError, match="unknown precision 'fp8'"):
        create("torch", "srcnn", "fp8")
    with pytest.raises(PipelineError, match="--backend torch does not run int8 .* int8 runs on trt, openvino"):
        create("torch", "srcnn", "int8")  # issue 42: int8 is known, torch does not run it


def test_missing_weights_named(tmp_path):
    with pytest.raises(PipelineError, match="weights file not found"):
        create("ort", "srcnn", weights=tmp_path / "nope.pt")


def test_gpu_backends_refused_with_reason_here(weights):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(PipelineError, match="CUDAExecutionProvider"):
        create("ort-cuda", "srcnn", weights=weights["srcnn"])
    with pytest.raises(PipelineError, match="CUDA GPU"):
        create("trt", "srcnn", weights=weights["srcnn"])


def test_ort_picks_a_gpu_provider_only_when_its_library_loads(tmp_path):
    """ORT lists every provider it was built with; `ort` takes TensorRT only when it loads, else CUDA, else CPU."""
    from pipeline.backends.ort_backend import pick_provider, provider_library_problem, provider_problem
    from pipeline.native.cuda_runtime import dlopen_problem

    no_trt = {"tensorrt": "libonnxruntime_providers_tensorrt.so does not load: libnvinfer.so.10: cannot open",
              "cuda": None}
    assert pick_provider(no_trt.get) == "cuda"
    assert pick_provider({"tensorrt": "no", "cuda": "no"}.get) == "cpu"
    assert pick_provider({"tensorrt": None, "cuda": None}.get) == "tensorrt"
    bad = tmp_path / "libnot_elf.so"
    bad.write_text("not a shared library")
    assert dlopen_problem(bad).startswith("libnot_elf.so does not load: ")
    import onnxruntime as ort

    assert dlopen_problem(next((Path(ort.__file__).parent / "capi").glob("libonnxruntime_providers_shared.so"))) is None
    if "CUDAExecutionProvider" not in ort.get_available_providers():  # this CPU build: neither library, said so
        assert "not in this onnxruntime build" in provider_library_problem("tensorrt")
        assert pick_provider() == "cpu" and provider_problem("cuda")


def test_a_provider_built_for_another_tensorrt_says_so(tmp_path):
    """PyPI's onnxruntime-gpu 1.31 TensorRT provider links libnvinfer.so.10 (TensorRT 10); with TensorRT 11 it
    cannot load, and the reason names both versions instead of a bare loader message (a real library linked
    against a stub libnvinfer.so.10 that is then removed, as on such a machine)."""
    import shutil
    import subprocess

    from pipeline.backends.ort_backend import build_mismatch, ort_build
    from pipeline.native.cuda_runtime import dlopen_problem

    if shutil.which("cc") is None:
        pytest.skip("no C compiler to build the stand-in provider library")
    (tmp_path / "stub.c").write_text("int stub(void) { return 0; }\n")
    (tmp_path / "provider.c").write_text("int stub(void);\nint provider(void) { return stub(); }\n")
    cc = ["cc", "-shared", "-fPIC"]
    subprocess.run([*cc, "-Wl,-soname,libnvinfer.so.10", "-o", tmp_path / "libnvinfer.so", tmp_path / "stub.c"],
                   check=True)
    lib = tmp_path / "libonnxruntime_providers_tensorrt.so"
    subprocess.run([*cc, "-o", lib, tmp_path / "provider.c", "-L", tmp_path, "-lnvinfer"], check=True)
    (tmp_path / "libnvinfer.so").unlink()
    problem = dlopen_problem(lib)
    assert problem and "libnvinfer.so.10" in problem
    said = build_mismatch(problem, "onnxruntime-gpu 1.31.1, a CUDA 13.0 build", "11.4.0.106")
    assert "needs TensorRT 10 and TensorRT 11.4.0.106 is installed" in said and "`trt` backend" in said
    assert "TensorRT is not installed" in build_mismatch(problem, "x", None)
    assert "libcudart.so.12" in build_mismatch("libcudart.so.12: cannot open shared object file", "x", None)
    assert build_mismatch("bad ELF header", "x", None) == "" and ort_build().startswith("onnxruntime")


def test_ort_trt_fp32_builds_without_tf32(monkeypatch):
    """ORT's TensorRT provider has no TF32 option and TensorRT's kTF32 is on by default: fp32 without tf32=True
    sets NVIDIA_TF32_OVERRIDE=0 before its engines are built, and its engines are cached apart from TF32 ones."""
    import os

    from pipeline.backends.ort_backend import TF32_OVERRIDE, trt_tf32_setting

    monkeypatch.delenv(TF32_OVERRIDE, raising=False)
    assert trt_tf32_setting(True) == "tf32" and TF32_OVERRIDE not in os.environ
    assert trt_tf32_setting(False) == "ieee" and os.environ[TF32_OVERRIDE] == "0"


def test_ort_device_session_options():
    """CUDA: cuDNN heuristics, not a benchmark per new tile shape; TF32 off unless asked. TensorRT provider: the
    profile's min/opt/max shapes (input or pixels, and the size shape tensor's values), so one engine serves
    every tile shape."""
    from pipeline.backends.ort_backend import OrtBackend, cuda_options, trt_profile_options
    from pipeline.engine import default_profile

    assert cuda_options()["cudnn_conv_algo_search"] in ("HEURISTIC", "DEFAULT") and cuda_options()["use_tf32"] == 0
    (name, opts), cpu = OrtBackend("srcnn", provider="cuda", tf32=True)._providers("cuda")
    assert name == "CUDAExecutionProvider" and opts["use_tf32"] == 1 and cpu == "CPUExecutionProvider"
    profile = default_profile(get_spec("srcnn"))
    floats = trt_profile_options(profile, True, pixels=False)
    assert floats["trt_profile_min_shapes"] == "input:1x3x8x8,size:16x16"
    assert floats["trt_profile_max_shapes"] == "input:4x3x512x512,size:2048x2048"
    pixels = trt_profile_options(default_profile(get_spec("srcnn-x3")), False, pixels=True)
    assert pixels["trt_profile_opt_shapes"] == "pixels:1x256x256x3"


# -- availability and auto ---------------------------------------------------------------------------
def test_available_lists_every_backend_with_reason(weights):
    st = available("srcnn", weights=weights["srcnn"])
    assert [s.name for s in st] == list(backends.NAMES)
    assert all(isinstance(s, BackendStatus) and s.reason for s in st)
    by = {s.name: s for s in st}
    assert by["torch"].available and by["ort"].available and by["ort-cpu"].available and by["ort-folded"].available
    deform = {s.name: s for s in available("deform-srcnn", weights=weights["deform-srcnn"])}
    assert not deform["ort-folded"].available and "SRCNN only" in deform["ort-folded"].reason
    onnx = create("ort", "srcnn", weights=weights["srcnn"]).onnx_file
    from_file = {s.name: s for s in available(None, onnx=onnx)}  # the model comes from the file; no weights needed
    assert from_file["ort"].available and from_file["ort-folded"].available and not from_file["torch"].available
    if not torch.cuda.is_available():
        assert not by["trt"].available and "GPU" in by["trt"].reason
        assert not by["ort-cuda"].available


def test_available_without_weights_says_so_once(tmp_path):
    # Once, not once per backend (that was a ~1,500-character line repeating the reason five times).
    with pytest.raises(PipelineError) as e:
        available("srcnn", weights=tmp_path / "missing.pt")
    msg = str(e.value)
    assert msg.count("weights file not found") == 1 and len(msg) < 200 and "\n" not in msg


def _st(**ok):
    return [BackendStatus(n, ok.get(n.replace("-", "_"), False), "r") for n in backends.NAMES]


def test_pick_auto_order_on_cpu(cache):
    if torch.cuda.is_available():
        pytest.skip("GPU machine: the GPU order applies")
    assert pick_auto("srcnn", statuses=_st(torch=True, ort=True, ort_cpu=True)).name == "ort"
    assert pick_auto("srcnn", statuses=_st(torch=True, ort=True, ort_folded=True)).name == "ort-folded"
    assert pick_auto("srcnn", statuses=_st(torch=True, ort_sr_kernels=True)).name == "ort-sr-kernels"
    assert pick_auto("srcnn", statuses=_st(torch=True)).name == "torch"
    p = pick_auto("srcnn", statuses=_st(torch=True, ort=True))
    assert isinstance(p, AutoPick) and "ort" in p.reason
    with pytest.raises(PipelineError, match="no backend can run"):
        pick_auto("srcnn", statuses=_st())


def test_pick_auto_prefers_a_measurement_of_this_machine(cache):
    path = backends.auto._measure_file("srcnn", "fp32")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"size": 256, "ms": {"torch": 100.0, "ort": 300.0}}))
    try:
        p = pick_auto("srcnn", statuses=_st(torch=True, ort=True))
        assert p.name == "torch" and "measured" in p.reason and "100 ms" in p.reason
        # a measured backend that is not available now is never picked
        assert pick_auto("srcnn", statuses=_st(ort=True)).name == "ort"
    finally:
        path.unlink()


def test_create_auto_records_why(weights):
    b = create("auto", "srcnn", weights=weights["srcnn"])
    assert b.selection_reason.startswith("auto: ") and b.name in backends.NAMES
    if not torch.cuda.is_available():
        assert b.name == "ort-folded"
    # An ONNX file: the ORT family only (torch runs registered weights), the folded variants it carries first.
    o = create("auto", "srcnn", onnx=create("ort", "srcnn", weights=weights["srcnn"]).onnx_file)
    if not torch.cuda.is_available():
        assert o.name == "ort-folded" and o.selection_reason.startswith("auto: ")
    d = create("auto", None, onnx=create("ort", "deform-srcnn", weights=weights["deform-srcnn"]).onnx_file)
    assert d.model_name == "deform-srcnn" and d.name != "torch"


def test_backends_cli_table(weights, capsys):
    import argparse

    from pipeline.cli import backends as cli

    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    assert cli.run(p.parse_args(["--model", "srcnn", "--weights", str(weights["srcnn"])])) == 0
    out = capsys.readouterr().out
    for name in backends.NAMES:
        assert f"\n{name} " in out
    assert "--backend auto -> " in out


@pytest.mark.gpu
def test_trt_backend_matches_torch(weights, image):
    from pipeline.engine import tensorrt_problem

    problem = tensorrt_problem()
    if problem:
        pytest.skip(problem)
    for model, s in (("srcnn", 2.5), ("deform-srcnn", 2.0), ("srcnn-x3", 3.0)):
        b = create("trt", model, weights=weights[model])
        ref = _torch_ref(model, weights, image, s)
        assert np.abs(b.infer(image, s) - ref).max() <= 1e-4
        g = create("trt", model, weights=weights[model], cuda_graph=True)
        assert np.abs(g.infer(image, s) - ref).max() <= 1e-4
        assert np.abs(g.infer(image, s) - ref).max() <= 1e-4  # graph replay
        with pytest.raises(PipelineError, match="outside the engine's profiles"):
            b.infer(np.zeros((1, 3, 1024, 1024), np.float32), s)


def test_trt_engine_losses_are_kept_per_engine_file(tmp_path, weights):
    """`--precision auto --backend trt`: a bf16/int8 engine's held-out loss is looked up and kept per engine file
    (TrtBackend.model_file), never skipped as 'runs no ONNX file'; a rebuilt engine has its own record, and a
    stored loss over budget keeps the engine out of auto. (Loading needs a GPU: the loaded state is set here.)"""
    from pipeline import quality
    from pipeline.backends.trt_backend import TrtBackend
    from pipeline.quality import loss

    be = TrtBackend("srcnn", "int8", weights=weights["srcnn"])
    assert be.model_file() is None and be.model_options()["weights"] == weights["srcnn"]
    be.engine_file = tmp_path / "srcnn.int8.engine"  # what load() sets
    be.engine_file.write_bytes(b"engine one")
    first = loss._store(quality.identity(be, 3.0))
    be.engine_file.write_bytes(b"engine two")  # rebuilt
    store = loss._store(quality.identity(be, 3.0))
    assert store != first and quality.stored(be) is None
    record = {**quality.identity(be, 3.0), "psnr_loss_db": 0.4, "ssim_loss": 0.01, "psnr": 30.0, "psnr_fp32": 30.4,
              "ssim": 0.9, "ssim_fp32": 0.91, "psnr_bicubic": 29.4, "ssim_bicubic": 0.88, "images": 4,
              "fidelity_db": [40.0, 41.0, 42.0, 43.0], "fidelity_mean_db": 41.5, "fidelity_worst_db": 40.0,
              "fidelity_ssim": [0.99, 0.99, 0.99, 0.99], "fidelity_ssim_worst": 0.99}
    assert quality.record_problem(record, quality.identity(be, 3.0)) is None  # a whole record: read, not measured
    store.parent.mkdir(parents=True, exist_ok=True)
    store.write_text(json.dumps(record))
    assert quality.precision_loss(be) == record and not quality.within_budget(record)


@pytest.mark.gpu
def test_ort_trt_fp32_is_ieee_fp32(weights, image):
    """ORT's TensorRT provider at fp32 (tf32 not asked): its engine built with TF32 off, so within the compare
    stage's fp32 tolerance of PyTorch fp32 on the CPU (TF32's 10-bit mantissa is ~1e-3 off)."""
    import os

    from pipeline.backends.ort_backend import TF32_OVERRIDE

    status = backends.backend_class("ort-trt").status(get_spec("srcnn"), "fp32", weights=weights["srcnn"])
    if not status.available:
        pytest.skip(status.reason)
    b = create("ort-trt", "srcnn", weights=weights["srcnn"])
    assert os.environ.get(TF32_OVERRIDE) == "0"
    assert np.abs(b.infer(image, 3.0) - _torch_ref("srcnn", weights, image, 3.0)).max() <= 1e-4


def test_one_onnxruntime_build_per_install():
    """onnxruntime and onnxruntime-gpu install the same package and cannot coexist: the core needs neither, the
    `cpu` and `gpu` extras each name one, and no other extra pulls one in (so `pip install '.[test,gpu]'` holds the
    GPU build alone)."""
    import re
    tomllib = pytest.importorskip("tomllib", reason="Python >= 3.11 reads pyproject.toml")

    project = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())["project"]

    def ort_builds(reqs):
        return {m.group(0) for r in reqs if (m := re.match(r"onnxruntime(-gpu)?(?![-\w])", r))}

    assert ort_builds(project["dependencies"]) == set()
    extras = project["optional-dependencies"]
    assert ort_builds(extras["cpu"]) == {"onnxruntime"} and ort_builds(extras["gpu"]) == {"onnxruntime-gpu"}
    for name, reqs in extras.items():
        assert name in ("cpu", "gpu") or not ort_builds(reqs) and not any("[cpu]" in r for r in reqs), name
    from pipeline.serve import triton_env  # the Triton model's env: one build too

    assert ort_builds(triton_env.requirements()) == {"onnxruntime"}
    assert ort_builds(triton_env.requirements(gpu=True)) == {"onnxruntime-gpu"}


def test_missing_onnxruntime_is_one_install_line():
    import subprocess
    import sys

    code = ("import sys\nsys.modules['onnxruntime'] = None\nfrom pipeline.cli import main\n"
            "sys.exit(main(['backends', '--model', 'srcnn']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "error: ONNX Runtime is not installed: pip install 'srdeploy[cpu]', or 'srdeploy[gpu]' on a machine with an "
        "NVIDIA GPU (one of the two, never both)"]
