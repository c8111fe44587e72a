"""Backend names -> classes; constructing one named backend with the options it takes."""
from __future__ import annotations

from pipeline.backends.base import Backend, check_run_precision
from pipeline.backends.openvino_backend import OpenVinoBackend
from pipeline.backends.ort_backend import OrtBackend, OrtCpuBackend, OrtCudaBackend, OrtTrtBackend
from pipeline.backends.ort_folded_backend import OrtFoldedBackend
from pipeline.backends.ort_sr_kernels_backend import OrtSrKernelsBackend
from pipeline.backends.torch_backend import TorchBackend
from pipeline.backends.trt_backend import TrtBackend
from pipeline.errors import PipelineError, check_choice

CLASSES: dict[str, type[Backend]] = {cls.name: cls for cls in (
    TorchBackend, OrtBackend, OrtCpuBackend, OrtCudaBackend, OrtTrtBackend, OrtSrKernelsBackend, OrtFoldedBackend,
    TrtBackend, OpenVinoBackend)}
NAMES = tuple(CLASSES)
# Options that choose nothing (where progress lines, bars and libraries' talk go): given to the backends that take
# them, dropped for the others, so a caller can pass them whichever backend `auto` picks.
HOOKS = frozenset({"log", "progress", "chatter"})


def backend_class(name: str) -> type[Backend]:
    return CLASSES[check_choice("backend", name, CLASSES)]


def precision_refusal(backend: str, precision: str) -> str:
    """`--backend NAME --precision P` where NAME does not run P (a precision some backend runs): say so, and name
    the backends that do."""
    others = [n for n, c in CLASSES.items() if precision in c.PRECISIONS]
    return (f"--backend {backend} does not run {precision} (it runs {', '.join(CLASSES[backend].PRECISIONS)}); "
            f"{precision} runs on {', '.join(others)} (--backend auto picks the fastest available)")


def create_named(backend: str, model: str | None, precision: str = "fp32", **opts) -> Backend:
    """A loaded backend of this exact name (no 'auto'). An option the backend does not take is an error when
    set, and dropped when None (callers pass their whole option set)."""
    cls = backend_class(backend)
    if precision not in cls.PRECISIONS:
        check_run_precision(precision)  # a precision no backend runs: "unknown precision"
        raise PipelineError(precision_refusal(backend, precision))
    for key, value in opts.items():
        if key not in cls.OPTIONS and key not in HOOKS and value is not None:
            raise PipelineError(f"option '{key}' does not apply to backend '{backend}'")
    b = cls(model, precision, **{k: v for k, v in opts.items() if k in cls.OPTIONS}).load()
    return b.selected(f"requested: {backend}", "requested")
