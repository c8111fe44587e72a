"""ONNX Runtime runner: CPU provider (tuned session options), CUDA provider with onnxruntime-gpu, TensorRT
provider with our plugin library. The provider that actually runs is checked after session creation, so
a missing GPU provider is an error, never a silent fallback to the CPU.

`ort` picks the best provider present; `ort-cpu`, `ort-cuda`, `ort-trt` pin one (subclasses below)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from models.spec import ModelSpec, output_size
from pipeline.artifacts.cache import cache_dir, cached_onnx
from pipeline.artifacts.identity import check_weights, resolve
from pipeline.artifacts.onnx_file import check_onnx_precision
from pipeline.backends import pixels as px
from pipeline.backends.base import Backend, BackendStatus, check_precision, installed
from pipeline.backends.checks import check_batch, check_scale
from pipeline.contract import DOMAIN
from pipeline.errors import PipelineError, check_choice, first_line, install_command
from pipeline.export.cached import onnx_for
from pipeline.export.sr_ops import strip_sr_functions
from pipeline.native.cuda_driver import gpu_visible
from pipeline.native.cuda_runtime import preload
from pipeline.native.libraries import trt_plugin_library
from pipeline.native.ort_session import cpu_session_options, physical_cores

PROVIDERS = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "tensorrt": "TensorrtExecutionProvider",
}
# ORT's TensorRT provider registers the plugin creators of trt_extra_plugin_lib_paths under this domain.
TRT_EP_PLUGIN_DOMAIN = "trt.plugins"


def available_providers() -> list[str]:
    return list(ort.get_available_providers())


def pick_provider() -> str:
    """Best provider this onnxruntime build offers: TensorRT > CUDA > CPU (GPU ones need a visible GPU)."""
    have = available_providers()
    for key in ("tensorrt", "cuda"):
        if PROVIDERS[key] in have and gpu_visible()[0]:
            return key
    return "cpu"


PROVIDER_HINT = {"cuda": "install onnxruntime-gpu on a machine with an NVIDIA GPU",
                 "tensorrt": "install onnxruntime-gpu and TensorRT on a machine with an NVIDIA GPU"}


def provider_problem(provider: str) -> str | None:
    """Why ONNX Runtime cannot run on `provider` ('cpu', 'cuda', 'tensorrt') here, or None: the one check
    `status` and `load` both make."""
    wanted, have = PROVIDERS[provider], available_providers()
    if wanted not in have:
        return (f"ONNX Runtime provider {wanted} is not in this onnxruntime build (have: {', '.join(have)}); "
                f"{PROVIDER_HINT.get(provider, 'reinstall onnxruntime')}")
    gpu = gpu_visible()
    if provider != "cpu" and not gpu[0]:
        return f"{wanted} needs a GPU: {gpu[1]}"
    if provider == "tensorrt":
        try:
            trt_plugin_library()
        except PipelineError as e:
            return str(e)
    return None


def onnx_source_problem(spec: ModelSpec, precision: str, onnx_path: Path | None, weights=None) -> str | None:
    """Why no ONNX file can be had for `spec` (given, cached, or exportable here), or None."""
    if onnx_path is not None:
        try:
            check_onnx_precision(onnx_path, precision)
        except PipelineError as e:
            return str(e)
        return None
    try:
        if cached_onnx(spec.name, precision, weights=weights).is_file():
            return None
    except PipelineError as e:
        return str(e)
    if not installed("torch"):
        return ("no cached ONNX file and exporting one needs PyTorch: pass --onnx FILE or install the export "
                f"extra ({install_command('export')})")
    return None


def rewrite_for_trt_ep(model):
    """Stripped sr graph -> graph whose custom nodes live in ORT's TensorRT-plugin domain, so ORT accepts
    them and hands them to the TensorRT parser, which finds our plugins by op type + plugin_namespace."""
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
    PROVIDER = "auto"  # the provider this class runs on; "auto" = the best one present
    OPTIONS = frozenset({"onnx", "weights", "threads", "exporter", "ops", "io_dtype", "log"})

    def __init__(self, model: str | None, precision: str = "fp32", *, onnx: str | Path | None = None,
                 weights=None, threads: int | None = None, exporter: str = "dynamo", ops: str = "custom",
                 io_dtype: str = "fp32", log=None, provider: str | None = None):
        self.provider = check_choice("ONNX Runtime provider", provider or self.PROVIDER, ("auto", *PROVIDERS))
        self.precision = check_precision(precision)
        self.spec = resolve(model, onnx)
        self.model_name = self.spec.name
        self.onnx_path = Path(onnx) if onnx is not None else None
        self.weights = weights
        self.threads = threads
        self.exporter = exporter
        self.ops = ops
        self.io_dtype = io_dtype
        self.log = log
        self.device = "cpu"
        self.session = None
        self._pixel_sessions: dict = {}  # sample dtype -> session of the graph with pixel I/O (device providers)

    # -- availability ----------------------------------------------------------------------------------
    @classmethod
    def status(cls, spec: ModelSpec, precision: str, *, onnx=None, engine=None, weights=None) -> BackendStatus:
        if engine is not None:
            return cls.no("an engine file runs on TensorRT only")
        provider = pick_provider() if cls.PROVIDER == "auto" else cls.PROVIDER
        wanted = PROVIDERS[provider]
        problem = provider_problem(provider) or onnx_source_problem(spec, precision, onnx, weights)
        if problem:
            return cls.no(problem)
        extra = "; no GPU provider (onnxruntime-gpu not installed or no GPU)" if (
            cls.PROVIDER == "auto" and provider == "cpu") else ""
        return cls.ok(f"ONNX Runtime {ort.__version__}, {wanted}{extra}")

    # -- loading ---------------------------------------------------------------------------------------
    def resolve_onnx(self) -> Path:
        """The ONNX file to run: the given one (checked against model and precision) or the cached export."""
        if self.onnx_path is not None:  # the model it holds was checked when self.spec was resolved
            check_onnx_precision(self.onnx_path, self.precision)
            return self.onnx_path
        check_weights(self.spec, self.weights)
        return onnx_for(self.model_name, self.precision, self.ops, exporter=self.exporter, io_dtype=self.io_dtype,
                        weights=self.weights, log=self.log)

    def _providers(self, provider: str) -> list:
        if provider == "cpu":
            return ["CPUExecutionProvider"]
        if provider == "cuda":
            return [("CUDAExecutionProvider", {"cudnn_conv_algo_search": "EXHAUSTIVE"}), "CPUExecutionProvider"]
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
        return rewrite_for_trt_ep(onnx.load(str(path))).SerializeToString()

    def load(self) -> OrtBackend:
        provider = pick_provider() if self.provider == "auto" else self.provider
        wanted = PROVIDERS[provider]
        problem = provider_problem(provider)
        if problem:
            raise PipelineError(problem)
        path = self.resolve_onnx()
        try:
            sess = ort.InferenceSession(self._session_bytes(path, provider), sess_options=cpu_session_options(
                self.threads), providers=self._providers(provider))
        except Exception as e:  # ORT raises its own exception types
            raise PipelineError(f"ONNX Runtime cannot load {path.name} with {wanted}: {first_line(e)}") from None
        got = sess.get_providers()[0]
        if got != wanted:  # ORT quietly drops providers that fail to initialise: say so instead.
            raise PipelineError(f"ONNX Runtime fell back to {got}; {wanted} failed to initialise")
        self.provider = provider
        self.device = "cpu" if provider == "cpu" else "cuda:0"
        self._attach(sess, path)
        return self

    def _attach(self, sess, path: Path) -> None:
        """Adopt a created session: its I/O names and types, checked against the model."""
        self.session = sess
        self.onnx_file = path
        self._inputs = {i.name: i for i in sess.get_inputs()}
        if "input" not in self._inputs:
            raise PipelineError(f"{path.name} has no input named 'input' (inputs: {', '.join(self._inputs)})")
        self._in_dtype = np.float16 if self._inputs["input"].type == "tensor(float16)" else np.float32
        self._out_name = sess.get_outputs()[0].name
        if self.spec.dynamic_scale and "size" not in self._inputs:
            raise PipelineError(f"{path.name} has no 'size' input but model {self.model_name} takes its scale at "
                                "run time")

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
        y = self._run(feeds)
        if tuple(y.shape[-2:]) != out_hw:
            raise PipelineError(f"{self.name}: output {y.shape} does not match the expected {out_hw[0]}x{out_hw[1]}")
        return y.astype(np.float32, copy=False)

    def _run(self, feeds: dict) -> np.ndarray:
        return self.session.run([self._out_name], feeds)[0]

    # -- integer pixels: the conversion inside the graph, run by the provider on its device ------------------
    def _pixel_session(self, dtype):
        """A session of this model wrapped by pixels.onnx_pixel_io for `dtype`, made on first use."""
        key = np.dtype(dtype)
        if key not in self._pixel_sessions:
            model = px.onnx_pixel_io(onnx.load(str(self.onnx_file)), key)
            if self.provider == "tensorrt":
                model = rewrite_for_trt_ep(model)
            try:
                self._pixel_sessions[key] = ort.InferenceSession(
                    model.SerializeToString(), sess_options=cpu_session_options(self.threads),
                    providers=self._providers(self.provider))
            except Exception as e:  # ORT raises its own exception types
                raise PipelineError(f"ONNX Runtime cannot load {self.onnx_file.name} with pixel I/O: "
                                    f"{first_line(e)}") from None
        return self._pixel_sessions[key]

    def infer_pixels_in_graph(self, pixels: np.ndarray, scale: float) -> np.ndarray:
        """Integers in and out of the provider: the rule runs inside the graph (pixels.onnx_pixel_io), inputs
        are bound from host memory and the output is bound on the provider's device (I/O binding), so nothing
        inside a batch goes back to the host. Device providers use it for `infer_pixels`; on the CPU it is
        how its bytes are tested against the numpy path."""
        if self.session is None:
            raise PipelineError(f"{self.name} backend used before load()")
        px.check_pixels(pixels, self.name)
        n, h, w, _ = pixels.shape
        out_hw = output_size(h, w, check_scale(self.spec, scale))
        sess = self._pixel_session(pixels.dtype)
        binding = sess.io_binding()
        binding.bind_cpu_input(px.PIXELS_IN, px.swap_rb(pixels))
        binding.bind_cpu_input(px.PIXEL_MAX, np.array(px.max_value(pixels.dtype), dtype=np.float32))
        if "size" in self._inputs:
            binding.bind_cpu_input("size", np.array(out_hw, dtype=np.int64))
        binding.bind_output(px.PIXELS_OUT, "cpu" if self.provider == "cpu" else "cuda")
        sess.run_with_iobinding(binding)
        y = binding.copy_outputs_to_cpu()[0]
        if y.shape != (n, *out_hw, 3):
            raise PipelineError(f"{self.name}: output {y.shape} does not match the expected {(n, *out_hw, 3)}")
        return px.swap_rb(y, y)

    def infer_pixels(self, pixels: np.ndarray, scale: float) -> np.ndarray:
        if self.provider == "cpu":  # the host path: numpy conversions around infer (Backend)
            return super().infer_pixels(pixels, scale)
        return self.infer_pixels_in_graph(pixels, scale)

    def describe(self) -> str:
        threads = f", {self.threads or physical_cores()} threads" if self.provider == "cpu" else ""
        return f"{self.name} ({PROVIDERS.get(self.provider, self.provider)}, {self.precision}{threads})"


class OrtCpuBackend(OrtBackend):
    name = "ort-cpu"
    PROVIDER = "cpu"


class OrtCudaBackend(OrtBackend):
    name = "ort-cuda"
    PROVIDER = "cuda"


class OrtTrtBackend(OrtBackend):
    name = "ort-trt"
    PROVIDER = "tensorrt"
