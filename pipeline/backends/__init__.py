"""Backends: one inference interface (base.Backend) over PyTorch, ONNX Runtime and TensorRT.

    create(backend, model, precision="fp32", **opts) -> loaded Backend   ("auto" = pick_auto)
    available(model, precision="fp32") -> [BackendStatus(name, available, reason)]
    pick_auto(model, precision="fp32") -> AutoPick(name, reason)

Nothing falls back silently: a backend that cannot run raises PipelineError saying why, `available`
says why for each, and a backend made by "auto" carries `selection_reason`.
"""
from __future__ import annotations

import importlib.util
import inspect
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import NamedTuple

from ..errors import PipelineError
from .base import Backend

# name -> (module, class, fixed constructor options)
_REGISTRY = {
    "torch": ("torch_backend", "TorchBackend", {}),
    "ort": ("ort_backend", "OrtBackend", {}),
    "ort-cpu": ("ort_backend", "OrtBackend", {"provider": "cpu"}),
    "ort-cuda": ("ort_backend", "OrtBackend", {"provider": "cuda"}),
    "ort-trt": ("ort_backend", "OrtBackend", {"provider": "tensorrt"}),
    "ort-sr-kernels": ("ort_sr_kernels_backend", "OrtSrKernelsBackend", {}),
    "ort-folded": ("ort_folded_backend", "OrtFoldedBackend", {}),
    "trt": ("trt_backend", "TrtBackend", {}),
}
NAMES = tuple(_REGISTRY)
# Expected order, fastest first, when nothing was measured on this machine. On the 2-core Xeon CPU box
# (SRCNN x3, 256x256 -> 768x768, same run): ort-folded ~3x, ort ~2x faster than torch eager (README "backends").
GPU_ORDER = ("trt", "ort-trt", "ort-cuda", "torch")
CPU_ORDER = ("ort-folded", "ort", "ort-sr-kernels", "torch")


class BackendStatus(NamedTuple):
    name: str
    available: bool
    reason: str


class AutoPick(NamedTuple):
    name: str
    reason: str


# -- construction -------------------------------------------------------------------------------------
def backend_class(name: str):
    if name not in _REGISTRY:
        raise PipelineError(f"unknown backend '{name}' (choose from: auto, {', '.join(NAMES)})")
    module, cls, _ = _REGISTRY[name]
    return getattr(importlib.import_module(f"{__name__}.{module}"), cls)


def _constructor_opts(cls, name: str, opts: dict) -> dict:
    params = inspect.signature(cls.__init__).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    if takes_any:  # forwards to a base class: check against that one
        params = {**inspect.signature(cls.__mro__[1].__init__).parameters, **params}
    out = {}
    for key, value in opts.items():
        if key in params:
            out[key] = value
        elif value is not None:
            raise PipelineError(f"option '{key}' does not apply to backend '{name}'")
    return out


def create(backend: str, model: str, precision: str = "fp32", **opts) -> Backend:
    """A loaded backend. 'auto' picks the fastest available one and records why in `selection_reason`."""
    if backend == "auto":
        if opts.get("engine") is not None:  # an engine file only runs on TensorRT
            pick = AutoPick("trt", "an engine file was given")
        elif opts.get("onnx") is not None:  # an ONNX file: ONNX Runtime with its best provider
            pick = AutoPick("ort", "an ONNX file was given")
        else:
            pick = pick_auto(model, precision, weights=opts.get("weights"))
        b = create(pick.name, model, precision, **opts)
        b.selection_reason = f"auto: {pick.reason}"
        return b
    cls = backend_class(backend)
    fixed = _REGISTRY[backend][2]
    kwargs = _constructor_opts(cls, backend, {k: v for k, v in opts.items() if k not in fixed})
    b = cls(model, precision, **fixed, **kwargs).load()
    if backend != b.name:  # aliases (ort-cpu, ...) keep their own name so reports tell providers apart
        b.name = backend
    b.selection_reason = f"requested: {backend}"
    return b


# -- availability -------------------------------------------------------------------------------------
def _module_exists(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _gpu() -> tuple[bool, str]:
    try:
        import torch
    except ImportError:
        return False, "PyTorch is not installed"
    if torch.cuda.is_available():
        return True, torch.cuda.get_device_name(0)
    return False, "no CUDA GPU visible (torch.cuda.is_available() is False)"


def _weights_problem(model: str, weights=None) -> str | None:
    from ..artifacts import weights_path

    try:
        weights_path(model, weights)
    except PipelineError as e:
        return str(e)
    return None


def _onnx_problem() -> str | None:
    if not _module_exists("onnxruntime"):
        return "onnxruntime is not installed (pip install onnxruntime)"
    if not _module_exists("pipeline.export"):
        return "pipeline.export (the ONNX exporter) is missing, so no ONNX file can be made"
    return None


def _status_torch(model: str, precision: str, gpu: tuple[bool, str]) -> BackendStatus:
    import torch

    if gpu[0]:
        return BackendStatus("torch", True, f"PyTorch {torch.__version__} on cuda ({gpu[1]})")
    if precision == "fp16":
        return BackendStatus("torch", False, "fp16 needs a CUDA GPU; " + gpu[1])
    return BackendStatus("torch", True, f"PyTorch {torch.__version__} on cpu ({gpu[1]})")


def _status_ort(name: str, provider: str, precision: str, gpu: tuple[bool, str]) -> BackendStatus:
    problem = _onnx_problem()
    if problem:
        return BackendStatus(name, False, problem)
    from .ort_backend import PROVIDERS, available_providers, pick_provider

    import onnxruntime as ort

    have = available_providers()
    if provider == "auto":
        provider = pick_provider()
        extra = "" if provider != "cpu" else "; no GPU provider (onnxruntime-gpu not installed or no GPU)"
        return BackendStatus(name, True, f"ONNX Runtime {ort.__version__}, {PROVIDERS[provider]}{extra}")
    wanted = PROVIDERS[provider]
    if wanted not in have:
        return BackendStatus(name, False, f"{wanted} is not in this onnxruntime build (have: {', '.join(have)}); "
                                          "install onnxruntime-gpu on a machine with an NVIDIA GPU")
    if provider != "cpu" and not gpu[0]:
        return BackendStatus(name, False, f"{wanted} needs a GPU: {gpu[1]}")
    if provider == "tensorrt":
        lib = _plugin_lib_problem()
        if lib:
            return BackendStatus(name, False, lib)
    return BackendStatus(name, True, f"ONNX Runtime {ort.__version__}, {wanted}")


def _plugin_lib_problem() -> str | None:
    try:
        from ..native import trt_plugin_library

        trt_plugin_library()
    except ImportError:
        return "pipeline.native (plugin library locator) is missing"
    except PipelineError as e:
        return str(e)
    return None


def _status_sr_kernels(precision: str) -> BackendStatus:
    name = "ort-sr-kernels"
    problem = _onnx_problem()
    if problem:
        return BackendStatus(name, False, problem)
    if not _module_exists("onnxruntime_extensions"):
        return BackendStatus(name, False, "onnxruntime-extensions is not installed (pip install onnxruntime-extensions)")
    if not _module_exists("pipeline.ort_sr_ops"):
        return BackendStatus(name, False, "pipeline.ort_sr_ops (custom-op registration) is missing")
    try:
        from ..native import cpu_kernels_library

        lib = cpu_kernels_library()
    except ImportError:
        return BackendStatus(name, False, "pipeline.native (kernel library locator) is missing")
    except PipelineError as e:
        return BackendStatus(name, False, str(e))
    return BackendStatus(name, True, f"ONNX Runtime CPU + our sr kernels ({Path(lib).name})")


def _status_folded(model: str, precision: str) -> BackendStatus:
    from .ort_folded_backend import FOLDABLE

    name = "ort-folded"
    if model not in FOLDABLE:
        return BackendStatus(name, False, f"bicubic folding applies to SRCNN only ({', '.join(FOLDABLE)})")
    if precision != "fp32":
        return BackendStatus(name, False, "fp32 only")
    problem = _onnx_problem()
    if problem:
        return BackendStatus(name, False, problem)
    if not _module_exists("pipeline.optimize"):
        return BackendStatus(name, False, "pipeline.optimize (the folding) is missing")
    return BackendStatus(name, True, "ONNX Runtime CPU on SRCNN with bicubic folded into conv1 (exact; integer "
                                     "scales, others run the plain graph)")


def _status_trt(precision: str) -> BackendStatus:
    from ..engine import tensorrt_problem

    problem = tensorrt_problem()
    if problem:
        return BackendStatus("trt", False, problem)
    lib = _plugin_lib_problem()
    if lib:
        return BackendStatus("trt", False, lib)
    import tensorrt as trt

    return BackendStatus("trt", True, f"TensorRT {trt.__version__} with our sr plugins")


def available(model: str, precision: str = "fp32", weights=None) -> list[BackendStatus]:
    """Every backend, whether it can run `model` at `precision` on this machine, and why (not)."""
    from .common import model_spec

    model_spec(model)  # unknown model -> PipelineError
    weights_problem = _weights_problem(model, weights)
    gpu = _gpu()
    out = []
    for name in NAMES:
        if name == "torch":
            s = _status_torch(model, precision, gpu)
        elif name == "ort-folded":
            s = _status_folded(model, precision)
        elif name.startswith("ort") and name != "ort-sr-kernels":
            s = _status_ort(name, {"ort": "auto", "ort-cpu": "cpu", "ort-cuda": "cuda", "ort-trt": "tensorrt"}[name],
                            precision, gpu)
        elif name == "ort-sr-kernels":
            s = _status_sr_kernels(precision)
            if s.available and not model_spec(model).dynamic_scale:
                s = BackendStatus(name, True, s.reason + f"; {model} has no sr ops, so this is the plain ort graph")
        else:
            s = _status_trt(precision)
        if s.available and weights_problem:
            s = BackendStatus(name, False, weights_problem)
        out.append(s)
    return out


# -- auto selection -----------------------------------------------------------------------------------
def machine_fingerprint() -> str:
    import onnxruntime
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    gpu = _gpu()
    return json.dumps({"cpu": cpu, "cores": os.cpu_count(), "gpu": gpu[1] if gpu[0] else None,
                       "torch": torch.__version__, "ort": onnxruntime.__version__}, sort_keys=True)


def _measure_file(model: str, precision: str) -> Path:
    import hashlib

    from ..artifacts import cache_dir

    key = hashlib.sha256(machine_fingerprint().encode()).hexdigest()[:12]
    return cache_dir() / "auto" / f"{model}-{precision}-{key}.json"


def time_backend(backend: Backend, size: int = 256, scale: float | None = None, repeats: int = 5,
                 warmup: int = 1) -> float:
    """Median latency (ms) of one size x size image through a loaded backend."""
    import numpy as np

    scale = backend.spec.default_scale if scale is None else scale
    x = np.random.default_rng(0).random((1, 3, size, size), dtype=np.float32)
    for _ in range(warmup):
        backend.infer(x, scale)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        backend.infer(x, scale)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def measure(model: str, precision: str = "fp32", names: list[str] | None = None, size: int = 256,
            repeats: int = 5, log=print, weights=None) -> dict[str, float]:
    """Time each available backend on this machine and remember the result for pick_auto."""
    from ..atomic import atomic_write

    names = names or [s.name for s in available(model, precision, weights) if s.available and s.name != "ort-cpu"]
    ms = {}
    for name in names:
        try:
            b = create(name, model, precision, weights=weights)
        except PipelineError as e:
            log(f"  {name}: cannot run ({e})")
            continue
        ms[name] = time_backend(b, size, repeats=repeats)
        log(f"  {name}: {ms[name]:.1f} ms median ({size}x{size}, scale {b.spec.default_scale:g}, {repeats} runs)")
    record = {"model": model, "precision": precision, "size": size, "repeats": repeats, "ms": ms,
              "machine": json.loads(machine_fingerprint()), "when": time.strftime("%Y-%m-%d %H:%M:%S")}
    atomic_write(_measure_file(model, precision), json.dumps(record, indent=2).encode())
    return ms


def measured(model: str, precision: str = "fp32") -> dict | None:
    path = _measure_file(model, precision)
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def pick_auto(model: str, precision: str = "fp32", statuses: list[BackendStatus] | None = None,
              weights=None) -> AutoPick:
    """Fastest available backend: a measurement of this machine if one was made (`backends --measure`),
    otherwise the expected order (GPU: trt > ort-trt > ort-cuda > torch; CPU: ort > ort-sr-kernels > torch)."""
    statuses = statuses if statuses is not None else available(model, precision, weights)
    ok = {s.name for s in statuses if s.available}
    if not ok:
        why = "; ".join(f"{s.name}: {s.reason}" for s in statuses)
        raise PipelineError(f"no backend can run {model} ({precision}): {why}")
    record = measured(model, precision)
    if record:
        timed = {n: t for n, t in record["ms"].items() if n in ok}
        if timed:
            best = min(timed, key=timed.get)
            parts = ", ".join(f"{n} {t:.0f} ms" for n, t in sorted(timed.items(), key=lambda kv: kv[1]))
            return AutoPick(best, f"{best} is fastest measured on this machine ({record['size']}x{record['size']}: {parts})")
    gpu = _gpu()[0]
    order = GPU_ORDER if gpu else CPU_ORDER
    for name in order:
        if name in ok:
            skipped = [n for n in order[:order.index(name)] if n not in ok]
            where = "on this GPU machine" if gpu else "on a CPU-only machine (no CUDA GPU, so no trt/ort-cuda/ort-trt)"
            note = f"; faster-ranked but unavailable: {', '.join(skipped)}" if skipped else ""
            return AutoPick(name, f"{name} is the expected fastest available {where}{note} "
                                  f"(`python -m pipeline backends --model {model} --measure` times them here)")
    name = sorted(ok)[0]
    return AutoPick(name, f"{name} is the only kind available")
