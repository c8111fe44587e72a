"""ONNX Runtime runner: CPU provider (tuned session options), CUDA provider with onnxruntime-gpu, TensorRT
provider with our plugin library. The provider that actually runs is checked after session creation, so
a missing GPU provider is an error, never a silent fallback to the CPU.

`ort` picks the best provider that loads here; `ort-cpu`, `ort-cuda`, `ort-trt` pin one (subclasses below). On a
device the CUDA provider picks cuDNN's algorithms by heuristics (not a benchmark per new tile shape) with TF32 off
unless `tf32=True`; the TensorRT provider gets the profile's min/opt/max shapes (one engine for every tile shape);
the pixel sessions are built at load, and `device_memory` sizes tiles from the device's free memory."""
from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import io
import math
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from models.spec import ModelSpec, output_size
from pipeline.artifacts.cache import cache_dir, cached_onnx
from pipeline.artifacts.identity import check_weights, resolve
from pipeline.artifacts.onnx_file import check_onnx_precision, path_or_file
from pipeline.backends import pixels as px
from pipeline.backends.base import (
    ENGINE_BYTES_PER_OUTPUT_PIXEL,
    Backend,
    BackendStatus,
    DeviceMemory,
    check_precision,
    installed,
)
from pipeline.backends.checks import check_batch, check_scale
from pipeline.contract import DOMAIN
from pipeline.engine import Profile, default_profile, validate_profile
from pipeline.errors import PipelineError, check_choice, first_line, install_command
from pipeline.export.cached import cached_problem, onnx_for
from pipeline.export.sr_ops import strip_sr_functions
from pipeline.native.cuda_driver import gpu_visible
from pipeline.native.cuda_runtime import device_free_bytes, dlopen_problem, preload
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


def pick_provider(problem=None) -> str:
    """Best provider that runs here: TensorRT > CUDA > CPU. `problem(provider)` says why one cannot (default
    `provider_problem`: ORT lists every provider it was built with, loadable or not, so a box without TensorRT
    gets CUDA, not an unavailable `ort`)."""
    problem = problem or provider_problem
    for key in ("tensorrt", "cuda"):
        if problem(key) is None:
            return key
    return "cpu"


PROVIDER_HINT = {"cuda": "install the gpu extra on a machine with an NVIDIA GPU (onnxruntime-gpu in place of "
                         f"onnxruntime: `{install_command('gpu')}`)",
                 "tensorrt": "install the gpu extra (onnxruntime-gpu in place of onnxruntime, and TensorRT) on a "
                             f"machine with an NVIDIA GPU: `{install_command('gpu')}`"}


# ORT's shared library for each GPU provider; listed by get_available_providers whether or not it loads.
PROVIDER_LIBRARIES = {"cuda": "libonnxruntime_providers_cuda.so", "tensorrt": "libonnxruntime_providers_tensorrt.so"}


@functools.cache
def provider_library_problem(provider: str) -> str | None:
    """Why ORT's library for a GPU provider does not load here (the TensorRT one needs libnvinfer, the CUDA one
    cuDNN and cuBLAS), after loading what ORT itself would load first; or None. Asked once per process."""
    path = Path(ort.__file__).parent / "capi" / PROVIDER_LIBRARIES[provider]
    if not path.is_file():
        return f"{path.name} is not in this onnxruntime build"
    # ORT >= 1.21: cuDNN/cuBLAS/cudart from the nvidia-* wheels, if any (its notes go to stdout: kept off it)
    with contextlib.suppress(Exception), contextlib.redirect_stdout(io.StringIO()):
        ort.preload_dlls(msvc=False)
    if provider == "tensorrt":
        preload()
        with contextlib.suppress(Exception):  # the tensorrt wheel's import loads libnvinfer
            import tensorrt  # noqa: F401
    problem = dlopen_problem(path)
    return problem and f"{problem}{build_mismatch(problem, ort_build(), tensorrt_version())}"


def ort_build() -> str:
    """'onnxruntime-gpu 1.31.1, a CUDA 13.0 build' (what the installed wheel says of itself)."""
    try:
        from onnxruntime.capi import build_and_package_info as info
    except ImportError:
        return f"onnxruntime {ort.__version__}"
    cuda = getattr(info, "cuda_version", "")
    return f"{getattr(info, 'package_name', 'onnxruntime')} {ort.__version__}" + (f", a CUDA {cuda} build" if cuda
                                                                                  else "")


def tensorrt_version() -> str | None:
    """The installed TensorRT's version (its Python bindings' distribution), without importing it."""
    for dist in importlib.metadata.packages_distributions().get("tensorrt", []):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            return importlib.metadata.version(dist)
    return None


def build_mismatch(problem: str, build: str, trt: str | None) -> str:
    """What a provider library's missing dependency says about this stack: PyPI's onnxruntime-gpu 1.31 wheels are
    CUDA 13 builds whose TensorRT provider links TensorRT 10 (libnvinfer.so.10), so with TensorRT 11 installed it
    cannot load; a missing CUDA library of another major version is another CUDA build."""
    found = re.search(r"lib(nvinfer|cudart|cublas|cudnn)\.so\.(\d+)", problem)
    if not found:
        return ""
    lib, major = found.groups()
    if lib == "nvinfer":
        have = f"TensorRT {trt} is installed" if trt else "TensorRT is not installed"
        return (f" ({build}: its TensorRT provider needs TensorRT {major} and {have}; the `trt` backend runs our "
                "own engines on the installed TensorRT)")
    return f" ({build}: it needs lib{lib}.so.{major}, which this machine's CUDA libraries do not provide)"


def provider_problem(provider: str) -> str | None:
    """Why ONNX Runtime cannot run on `provider` ('cpu', 'cuda', 'tensorrt') here, or None: the one check
    `status`, `load` and `pick_provider` make."""
    wanted, have = PROVIDERS[provider], available_providers()
    if wanted not in have:
        return (f"ONNX Runtime provider {wanted} is not in this onnxruntime build (have: {', '.join(have)}); "
                f"{PROVIDER_HINT.get(provider, 'reinstall onnxruntime')}")
    gpu = gpu_visible()
    if provider != "cpu" and not gpu[0]:
        return f"{wanted} needs a GPU: {gpu[1]}"
    if provider != "cpu":
        problem = provider_library_problem(provider)
        if problem:
            return f"{wanted} cannot load: {problem}; {PROVIDER_HINT[provider]}"
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


TF32_OVERRIDE = "NVIDIA_TF32_OVERRIDE"  # "0": no TF32 in TensorRT's builds, cuBLAS or cuDNN (NVIDIA's switch)


def trt_tf32_setting(tf32: bool) -> str:
    """TF32 for ORT's TensorRT provider, which has no option for it (TensorRT's kTF32 is on by default): with tf32
    off, NVIDIA_TF32_OVERRIDE=0 in this process before its engines are built (TensorRT reads it at build time;
    it turns TF32 off process-wide, which is every other backend's default too). Returns the engine-cache folder
    name, so an engine built with TF32 is never reused without it."""
    if not tf32:
        os.environ[TF32_OVERRIDE] = "0"
    return "tf32" if tf32 else "ieee"


def cuda_options(tf32: bool = False) -> dict:
    """The CUDA provider's options: cuDNN's heuristics pick each convolution's algorithm (EXHAUSTIVE benchmarks
    every new input shape, and a tiled image has ~9); TF32 only when asked (fp32 stays fp32, as the engines
    are built); the arena grows by what is asked, so a measured growth is the model's working memory."""
    return {"cudnn_conv_algo_search": "HEURISTIC", "use_tf32": int(bool(tf32)),
            "arena_extend_strategy": "kSameAsRequested"}


def trt_profile_options(profile: Profile, dynamic_scale: bool, pixels: bool) -> dict:
    """The TensorRT provider's explicit profile: min/opt/max of the graph's input (NCHW 'input', or NHWC
    'pixels' for the pixel graph) and of the `size` shape tensor's values, so one engine serves every tile
    shape instead of a rebuild for each new shape."""
    opts = {}
    for i, key in enumerate(("trt_profile_min_shapes", "trt_profile_opt_shapes", "trt_profile_max_shapes")):
        n, h, w = profile.batch[i], profile.height[i], profile.width[i]
        shapes = [f"{px.PIXELS_IN}:{n}x{h}x{w}x3" if pixels else f"input:{n}x3x{h}x{w}"]
        if dynamic_scale:
            oh, ow = profile.size_values()[i]
            shapes.append(f"size:{oh}x{ow}")  # a shape tensor: its profile gives its values
        opts[key] = ",".join(shapes)
    return opts


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




def cached_source(model: str, precision: str, options: dict) -> Path | None:
    """The ONNX file a backend runs at `precision` when it needs nothing made: the given one (`options['onnx']`, its
    precision checked) or the cached export of that key, verified; None: a file to make, or a file that does not
    check (loading says why)."""
    try:
        if options.get("onnx") is not None:
            check_onnx_precision(path_or_file(options["onnx"]), precision)
            return Path(os.fspath(options["onnx"]))
        path = cached_onnx(model, precision, options.get("ops") or "custom", exporter=options.get("exporter") or
                           "dynamo", io_dtype=options.get("io_dtype") or "fp32", weights=options.get("weights"))
    except PipelineError:
        return None
    return path if cached_problem(path) is None else None


def fp32_source(model: str, options: dict) -> Path | None:
    """cached_source of the plain fp32 graph, from the options that name it (onnx, weights, exporter): the file a
    backend running ONNX Runtime's fp32 export runs (OpenVINO, ort-folded)."""
    return cached_source(model, "fp32", {k: options[k] for k in ("onnx", "weights", "exporter")
                                         if options.get(k) is not None})


class OrtBackend(Backend):
    PROVIDER = "auto"  # the provider this class runs on; "auto" = the best one present

    def __init__(self, model: str | None, precision: str = "fp32", *, onnx: str | Path | None = None,
                 weights=None, threads: int | None = None, exporter: str = "dynamo", ops: str = "custom",
                 io_dtype: str = "fp32", log=None, provider: str | None = None, profile: dict | None = None,
                 tf32: bool = False, shrink_arena: bool = False):
        self.provider = check_choice("ONNX Runtime provider", provider or self.PROVIDER, ("auto", *PROVIDERS))
        self.precision = check_precision(precision)
        self.spec = resolve(model, onnx)
        self.model_name = self.spec.name
        self.onnx_path = path_or_file(onnx)  # an opened file keeps its parsed metadata
        self.weights = weights
        self.threads = threads
        self.exporter = exporter
        self.ops = ops
        self.io_dtype = io_dtype
        self.log = log
        self.profile = profile  # the TensorRT provider's shapes (engine.Profile fields); default_profile when None
        self.tf32 = bool(tf32)  # fp32 convolutions in TF32 on the CUDA provider: only when asked
        self.device = "cpu"
        self.session: Any = None  # onnxruntime.InferenceSession, once loaded
        # shrink_arena: the CPU arena gives back what a run grew it by (a server idles between requests; without
        # it one 1 MP x3 request left 1.1 GB held)
        self._run_options = None
        if shrink_arena:
            self._run_options = ort.RunOptions()
            self._run_options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
        self._pixel_sessions: dict = {}  # sample dtype -> session of the graph with pixel I/O (device providers)
        self._bytes_per_px: float | None = None  # device working memory per output pixel (device providers)

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
        extra = ""
        if cls.PROVIDER == "auto" and provider == "cpu" and gpu_visible()[0]:  # without a GPU: said once, not here
            extra = f"; no GPU provider ({provider_problem('cuda')})"
        elif cls.PROVIDER == "auto" and provider == "cuda" and PROVIDERS["tensorrt"] in available_providers():
            extra = f"; not TensorRT: {provider_problem('tensorrt')}"  # in this build, but it cannot run here
        return cls.ok(f"ONNX Runtime {ort.__version__}, {wanted}{extra}")

    def model_options(self) -> dict:
        """The options that load the same model at another precision: the user's file, else the model's own export
        of that precision (an fp16 run's fp32 twin runs the fp32 export, not the fp16 file)."""
        return {"onnx": self.onnx_path, "weights": self.weights, "threads": self.threads, "exporter": self.exporter}

    # -- loading ---------------------------------------------------------------------------------------
    def resolve_onnx(self) -> Path:
        """The ONNX file to run: the given one (checked against model and precision) or the cached export."""
        if self.onnx_path is not None:  # the model it holds was checked when self.spec was resolved
            check_onnx_precision(self.onnx_path, self.precision)
            return self.onnx_path
        check_weights(self.spec, self.weights)
        return onnx_for(self.model_name, self.precision, self.ops, exporter=self.exporter, io_dtype=self.io_dtype,
                        weights=self.weights, log=self.log)

    def _providers(self, provider: str, pixels: bool = False) -> list:
        if provider == "cpu":
            return ["CPUExecutionProvider"]
        cuda = ("CUDAExecutionProvider", cuda_options(self.tf32))
        if provider == "cuda":
            return [cuda, "CPUExecutionProvider"]
        preload()  # the plugin library's RUNPATH is $ORIGIN alone: cudart/cuBLAS loaded before the EP dlopens it
        trt_cache = cache_dir() / "ort-trt" / trt_tf32_setting(self.tf32 or self.precision != "fp32")
        trt_cache.mkdir(parents=True, exist_ok=True)
        opts = {
            "trt_extra_plugin_lib_paths": str(trt_plugin_library()),
            "trt_engine_cache_enable": True,
            "trt_engine_cache_path": str(trt_cache),
            "trt_timing_cache_enable": True,
            "trt_timing_cache_path": str(trt_cache),
            **trt_profile_options(self.profiles[0], self.spec.dynamic_scale, pixels),
        }
        return [("TensorrtExecutionProvider", opts), cuda, "CPUExecutionProvider"]

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
        if provider == "tensorrt":  # the engine's shapes; the sr stage tiles to them (Backend.max_input_size)
            profile = Profile.from_dict(self.profile) if self.profile else default_profile(self.spec)
            self.profiles = [validate_profile(profile, self.spec)]
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
        if provider != "cpu":  # built and run now, not mid-run (a TensorRT engine build takes minutes)
            self._bytes_per_px = self._warm_up()
        return self

    def _warm_up(self) -> float:
        """Run both pixel sessions once (the TensorRT provider builds its engines then) and return the device
        memory per output pixel: what the CUDA provider's arena grows by over a 128x128 uint8 run at the model's
        own scale; the TensorRT provider allocates its activations for the profile's largest shape with its
        engine, so only its I/O grows (as for `trt`); it runs the profile's opt shape."""
        h = w = 128
        scale = float(self.spec.default_scale)
        if self.profiles:
            h, w, scale = self.profiles[0].height[1], self.profiles[0].width[1], self.profiles[0].scale[1]
        before = device_free_bytes()
        self.infer_pixels_in_graph(np.zeros((1, h, w, 3), np.uint8), scale)
        after = device_free_bytes()
        self.infer_pixels_in_graph(np.zeros((1, h, w, 3), np.uint16), scale)
        if self.provider == "tensorrt" or before is None or after is None:
            return ENGINE_BYTES_PER_OUTPUT_PIXEL
        return max(before - after, 1) / math.prod(output_size(h, w, scale))

    def device_memory(self) -> DeviceMemory | None:
        """On a GPU provider: the device's free memory now and the measured cost per output pixel."""
        if self.provider == "cpu" or self._bytes_per_px is None:
            return None
        free = device_free_bytes()
        return None if free is None else DeviceMemory(free, self._bytes_per_px)

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
        return self.session.run([self._out_name], feeds, self._run_options)[0]

    # -- integer pixels: the conversion inside the graph, run by the provider on its device ------------------
    def _pixel_session(self, dtype):
        """A session of this model wrapped by pixels.onnx_pixel_io for `dtype`, made on first use."""
        key = np.dtype(dtype)
        if key not in self._pixel_sessions:
            trt = self.provider == "tensorrt"
            model = px.onnx_pixel_io(onnx.load(str(self.onnx_file)), key, tensorrt=trt)
            if trt:
                model = rewrite_for_trt_ep(model)
            try:
                self._pixel_sessions[key] = ort.InferenceSession(
                    model.SerializeToString(), sess_options=cpu_session_options(self.threads),
                    providers=self._providers(self.provider, pixels=True))
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
        io_dtype = px.onnx_pixel_dtype(pixels.dtype, self.provider == "tensorrt")
        binding = sess.io_binding()
        binding.bind_cpu_input(px.PIXELS_IN, px.swap_rb(pixels).astype(io_dtype, copy=False))
        binding.bind_cpu_input(px.PIXEL_MAX, np.array(px.max_value(pixels.dtype), dtype=np.float32))
        if "size" in self._inputs:
            binding.bind_cpu_input("size", np.array(out_hw, dtype=np.int64))
        binding.bind_output(px.PIXELS_OUT, "cpu" if self.provider == "cpu" else "cuda")
        binding.bind_output(px.PIXELS_NONFINITE, "cpu")  # N numbers: the check ran on the device
        sess.run_with_iobinding(binding)
        y, bad = binding.copy_outputs_to_cpu()
        y = y.astype(pixels.dtype, copy=False)  # int32 -> uint16 for TensorRT
        if y.shape != (n, *out_hw, 3):
            raise PipelineError(f"{self.name}: output {y.shape} does not match the expected {(n, *out_hw, 3)}")
        y = px.swap_rb(y, y)
        if np.any(bad):
            raise px.NonFiniteOutput(bad, y)
        return y

    def infer_pixels(self, pixels: np.ndarray, scale: float) -> np.ndarray:
        if self.provider == "cpu":  # the host path: numpy conversions around infer (Backend)
            return super().infer_pixels(pixels, scale)
        return self.infer_pixels_in_graph(pixels, scale)

    def decided(self) -> dict[str, str]:
        return {"provider": self.provider}  # after load: the one pick_provider took for "auto"

    @classmethod
    def planned_files(cls, model: str, precision: str, scale: float, options: dict) -> list[Path] | None:
        """The given file (its precision checked) or the cached export, verified (cached_problem): resolve_onnx's."""
        return [path] if (path := cached_source(model, precision, options)) is not None else None

    @classmethod
    def settles(cls, precision: str, options: dict) -> dict[str, str]:
        """The provider: the one asked for (or this class's), "auto" the best one that runs here (pick_provider)."""
        asked = options.get("provider") or cls.PROVIDER
        return {"provider": pick_provider() if asked == "auto" else asked}

    def describe(self) -> str:
        threads = f", {self.threads or physical_cores()} threads" if self.provider == "cpu" else ""
        return f"{self.name} ({PROVIDERS.get(self.provider, self.provider)}, {self.precision}{threads})"


class OrtCpuBackend(OrtBackend):
    # not ranked: `ort` runs on the CPU where no GPU provider can
    PROVIDER = "cpu"


class OrtCudaBackend(OrtBackend):
    PROVIDER = "cuda"


class OrtTrtBackend(OrtBackend):
    PROVIDER = "tensorrt"
