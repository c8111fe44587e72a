"""Which backends can run a model here, and why the others cannot (one line each): each backend class says."""
from __future__ import annotations

from pathlib import Path

from pipeline.artifacts.identity import check_weights, resolve
from pipeline.backends.base import BackendStatus
from pipeline.backends.registry import CLASSES
from pipeline.errors import install_command
from pipeline.native.cuda_driver import gpu_visible

__all__ = ["NEEDS_GPU", "BackendStatus", "available", "no_gpu_line"]
NEEDS_GPU = "needs a CUDA GPU"  # a GPU-only backend's whole reason on a machine without one (no_gpu_line says why)


def available(model: str | None, precision: str = "fp32", weights=None, *, onnx: str | Path | None = None,
              engine: str | Path | None = None) -> list[BackendStatus]:
    """Every backend, whether it can run `model` at `precision` on this machine, and why (not). From `onnx` or
    `engine` when given (the model then comes from the file); otherwise from the registered model's weights,
    checked once here (a bad weights file is one PipelineError line, not one reason per backend)."""
    spec = resolve(model, onnx, engine)
    if onnx is None and engine is None:
        check_weights(spec, weights)
    gpu = gpu_visible()[0]
    return [_status(cls, spec, precision, gpu, onnx, engine, weights) for cls in CLASSES.values()]


def _status(cls, spec, precision: str, gpu: bool, onnx, engine, weights) -> BackendStatus:
    runs = cls.DESCRIPTOR.precisions
    if cls.DESCRIPTOR.gpu_only and not gpu:
        return cls.no(NEEDS_GPU)
    if precision not in runs:
        return cls.no(f"runs {', '.join(runs)}, not {precision}")
    return cls.status(spec, precision, onnx=onnx, engine=engine, weights=weights)


def no_gpu_line() -> str | None:
    """On a machine without a CUDA GPU, the one line saying so and which backends it rules out; None with one."""
    gpu, why = gpu_visible()
    if gpu:
        return None
    names = [name for name, cls in CLASSES.items() if cls.DESCRIPTOR.gpu_only]
    return (f"{why}: {', '.join(names[:-1])} and {names[-1]} {NEEDS_GPU.replace('needs', 'need')} (on a machine with "
            f"one: `{install_command('gpu')}`)")
