"""Which backends can run a model here, and why the others cannot (one line each)."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import NamedTuple

from pipeline.backends.registry import NAMES
from pipeline.errors import PipelineError


class BackendStatus(NamedTuple):
    name: str
    available: bool
    reason: str


def _module_exists(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def gpu_visible() -> tuple[bool, str]:
    try:
        import torch
    except ImportError:
        return False, "PyTorch is not installed"
    if torch.cuda.is_available():
        return True, torch.cuda.get_device_name(0)
    return False, "no CUDA GPU visible (torch.cuda.is_available() is False)"


def _weights_problem(model: str, weights=None) -> str | None:
    from pipeline.artifacts.cache import weights_path

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
    import onnxruntime as ort

    from pipeline.backends.ort_backend import (
        PROVIDERS,
        available_providers,
        pick_provider,
    )

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
        from pipeline.native.libraries import trt_plugin_library

        trt_plugin_library()
    except ImportError:
        return "pipeline.native.libraries (plugin library locator) is missing"
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
    if not _module_exists("pipeline.native.ort_ops"):
        return BackendStatus(name, False, "pipeline.native.ort_ops (custom-op registration) is missing")
    try:
        from pipeline.native.libraries import cpu_kernels_library

        lib = cpu_kernels_library()
    except ImportError:
        return BackendStatus(name, False, "pipeline.native.libraries (kernel library locator) is missing")
    except PipelineError as e:
        return BackendStatus(name, False, str(e))
    return BackendStatus(name, True, f"ONNX Runtime CPU + our sr kernels ({Path(lib).name})")


def _status_folded(model: str, precision: str) -> BackendStatus:
    from pipeline.backends.ort_folded_backend import FOLDABLE

    name = "ort-folded"
    if model not in FOLDABLE:
        return BackendStatus(name, False, f"bicubic folding applies to SRCNN only ({', '.join(FOLDABLE)})")
    if precision != "fp32":
        return BackendStatus(name, False, "fp32 only")
    problem = _onnx_problem()
    if problem:
        return BackendStatus(name, False, problem)
    if not _module_exists("pipeline.export.fold"):
        return BackendStatus(name, False, "pipeline.export.fold (the folding) is missing")
    return BackendStatus(name, True, "ONNX Runtime CPU on SRCNN with bicubic folded into conv1 (exact; integer "
                                     "scales, others run the plain graph)")


def _status_trt(precision: str) -> BackendStatus:
    from pipeline.engine import tensorrt_problem

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
    from pipeline.backends.checks import model_spec

    model_spec(model)  # unknown model -> PipelineError
    weights_problem = _weights_problem(model, weights)
    gpu = gpu_visible()
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

