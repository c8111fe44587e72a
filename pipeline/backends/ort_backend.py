"""ONNX Runtime runner: CPU provider (tuned session options), CUDA provider with onnxruntime-gpu, TensorRT
provider with our plugin library. The provider that actually runs is checked after session creation, so
a missing GPU provider is an error, never a silent fallback to the CPU."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from pipeline.artifacts.onnx_file import check_onnx_matches
from pipeline.backends.base import Backend
from pipeline.backends.checks import check_batch, model_spec
from pipeline.contract import DOMAIN
from pipeline.errors import PipelineError

PROVIDERS = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "tensorrt": "TensorrtExecutionProvider",
}
# ORT's TensorRT provider registers the plugin creators of trt_extra_plugin_lib_paths under this domain.
TRT_EP_PLUGIN_DOMAIN = "trt.plugins"


def physical_cores() -> int:
    try:
        import psutil

        n = psutil.cpu_count(logical=False)
    except Exception:  # psutil missing or cannot read the topology
        n = None
    return max(1, n or os.cpu_count() or 1)


def cpu_session_options(threads: int | None = None):
    """Session options for the CPU provider (each choice measured on SRCNN x3, see README 'backends')."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL   # a chain of convs: no branch parallelism to win
    so.intra_op_num_threads = int(threads or physical_cores())  # hyper-threads only add contention in GEMMs
    so.inter_op_num_threads = 1
    so.enable_cpu_mem_arena = True
    so.enable_mem_pattern = True    # same shapes call after call: reuse the planned buffers
    so.add_session_config_entry("session.set_denormal_as_zero", "1")
    # idle intra-op threads sleep instead of spinning, which starved the sr stage's encode/decode threads
    # (2 cores: folder run 75 % -> 87 % of pure inference throughput; inference itself within noise)
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.log_severity_level = 3
    return so


def available_providers() -> list[str]:
    try:
        import onnxruntime as ort
    except ImportError:
        return []
    return list(ort.get_available_providers())


def pick_provider() -> str:
    """Best provider this onnxruntime build offers: TensorRT > CUDA > CPU (GPU ones need a visible GPU)."""
    have = available_providers()
    for key in ("tensorrt", "cuda"):
        if PROVIDERS[key] in have and _gpu_visible():
            return key
    return "cpu"


def _gpu_visible() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def rewrite_for_trt_ep(model):
    """Stripped sr graph -> graph whose custom nodes live in ORT's TensorRT-plugin domain, so ORT accepts
    them and hands them to the TensorRT parser, which finds our plugins by op type + plugin_namespace."""
    import onnx

    from pipeline.export import strip_sr_functions

    stripped = strip_sr_functions(model)
    for node in stripped.graph.node:
        if node.domain == DOMAIN:
            node.domain = TRT_EP_PLUGIN_DOMAIN
    kept = [op for op in stripped.opset_import if op.domain != DOMAIN]
    del stripped.opset_import[:]
    stripped.opset_import.extend(kept + [onnx.helper.make_opsetid(TRT_EP_PLUGIN_DOMAIN, 1)])
    return stripped


class OrtBackend(Backend):
    name = "ort"

    def __init__(self, model: str, precision: str = "fp32", *, provider: str = "auto", onnx: str | Path | None = None,
                 weights=None, threads: int | None = None, exporter: str = "dynamo", ops: str = "custom",
                 io_dtype: str = "fp32", log=None):
        if precision not in ("fp32", "fp16"):
            raise PipelineError(f"unknown precision '{precision}' (choose from: fp32, fp16)")
        if provider not in ("auto", *PROVIDERS):
            raise PipelineError(f"unknown ONNX Runtime provider '{provider}' (choose from: auto, {', '.join(PROVIDERS)})")
        self.model_name = model
        self.spec = model_spec(model)
        self.precision = precision
        self.provider = provider
        self.onnx_path = Path(onnx) if onnx is not None else None
        self.weights = weights
        self.threads = threads
        self.exporter = exporter
        self.ops = ops
        self.io_dtype = io_dtype
        self.log = log
        self.device = "cpu"
        self.session = None

    # -- loading ---------------------------------------------------------------------------------------
    def _onnx_file(self) -> Path:
        if self.onnx_path is not None:
            if not self.onnx_path.is_file():
                raise PipelineError(f"ONNX file not found: {self.onnx_path}")
            check_onnx_matches(self.onnx_path, self.model_name, self.precision)
            return self.onnx_path
        from pipeline.artifacts.cache import onnx_for

        return onnx_for(self.model_name, self.precision, self.ops, exporter=self.exporter, io_dtype=self.io_dtype,
                        weights=self.weights, log=self.log)

    def _providers(self, provider: str) -> list:
        if provider == "cpu":
            return ["CPUExecutionProvider"]
        if provider == "cuda":
            return [("CUDAExecutionProvider", {"cudnn_conv_algo_search": "EXHAUSTIVE"}), "CPUExecutionProvider"]
        from pipeline.artifacts.cache import cache_dir
        from pipeline.native.cuda_runtime import preload
        from pipeline.native.libraries import trt_plugin_library

        preload()  # the plugin library's RUNPATH is $ORIGIN alone: cudart/cuBLAS loaded before the EP dlopens it
        trt_cache = cache_dir() / "ort-trt"
        trt_cache.mkdir(parents=True, exist_ok=True)
        opts = {
            "trt_extra_plugin_lib_paths": str(trt_plugin_library()),
            "trt_engine_cache_enable": True,
            "trt_engine_cache_path": str(trt_cache),
            "trt_timing_cache_enable": True,
            "trt_timing_cache_path": str(trt_cache),
        }
        return [("TensorrtExecutionProvider", opts), "CUDAExecutionProvider", "CPUExecutionProvider"]

    def _session_bytes(self, path: Path, provider: str) -> bytes | str:
        if provider != "tensorrt":
            return str(path)
        import onnx

        return rewrite_for_trt_ep(onnx.load(str(path))).SerializeToString()

    def load(self) -> OrtBackend:
        try:
            import onnxruntime as ort
        except ImportError:
            raise PipelineError("onnxruntime is not installed (pip install onnxruntime)") from None
        provider = pick_provider() if self.provider == "auto" else self.provider
        wanted = PROVIDERS[provider]
        if wanted not in ort.get_available_providers():
            hint = {"cuda": "install onnxruntime-gpu on a machine with an NVIDIA GPU",
                    "tensorrt": "install onnxruntime-gpu and TensorRT on a machine with an NVIDIA GPU"}.get(provider, "")
            raise PipelineError(f"ONNX Runtime provider {wanted} is not available in this onnxruntime build "
                                f"(have: {', '.join(ort.get_available_providers())}); {hint}")
        path = self._onnx_file()
        so = cpu_session_options(self.threads)
        try:
            sess = ort.InferenceSession(self._session_bytes(path, provider), sess_options=so,
                                        providers=self._providers(provider))
        except Exception as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise PipelineError(f"ONNX Runtime cannot load {path.name} with {wanted}: {first}") from None
        got = sess.get_providers()[0]
        if got != wanted:  # ORT quietly drops providers that fail to initialise: say so instead.
            raise PipelineError(f"ONNX Runtime fell back to {got}; {wanted} failed to initialise")
        self.session = sess
        self.provider = provider
        self.device = "cpu" if provider == "cpu" else "cuda:0"
        self.onnx_file = path
        self._inputs = {i.name: i for i in sess.get_inputs()}
        if "input" not in self._inputs:
            raise PipelineError(f"{path.name} has no input named 'input' (inputs: {', '.join(self._inputs)})")
        self._in_dtype = np.float16 if self._inputs["input"].type == "tensor(float16)" else np.float32
        self._out_name = sess.get_outputs()[0].name
        if self.spec.dynamic_scale and "size" not in self._inputs:
            raise PipelineError(f"{path.name} has no 'size' input but model {self.model_name} takes its scale at run time")
        return self

    # -- inference -------------------------------------------------------------------------------------
    def feeds(self, batch: np.ndarray, scale: float) -> tuple[dict, tuple[int, int]]:
        shape = check_batch(batch, self.spec, scale, self.name)
        x = np.ascontiguousarray(batch, dtype=self._in_dtype)
        feeds = {"input": x}
        if "size" in self._inputs:
            feeds["size"] = np.array([shape.out_h, shape.out_w], dtype=np.int64)
        return feeds, (shape.out_h, shape.out_w)

    def infer(self, batch: np.ndarray, scale: float) -> np.ndarray:
        if self.session is None:
            raise PipelineError(f"{self.name} backend used before load()")
        feeds, out_hw = self.feeds(batch, scale)
        (y,) = self.session.run([self._out_name], feeds)
        if tuple(y.shape[-2:]) != out_hw:
            raise PipelineError(f"{self.name}: output {y.shape} does not match the expected {out_hw[0]}x{out_hw[1]}")
        return y.astype(np.float32, copy=False)

    def describe(self) -> str:
        threads = f", {self.threads or physical_cores()} threads" if self.provider == "cpu" else ""
        return f"{self.name} ({PROVIDERS.get(self.provider, self.provider)}, {self.precision}{threads})"
