"""Backend names -> classes (each declaring its descriptor); constructing one named backend with the options it
takes, checked against its descriptor's typed options."""
from __future__ import annotations

from dataclasses import fields

from pipeline.backends.base import Backend, check_run_precision
from pipeline.backends.descriptor import HOOKS, Descriptor
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


def backend_class(name: str) -> type[Backend]:
    return CLASSES[check_choice("backend", name, CLASSES)]


def descriptors() -> list[Descriptor]:
    """Every registered backend's descriptor, in registry order."""
    return [cls.DESCRIPTOR for cls in CLASSES.values()]


def precision_refusal(backend: str, precision: str) -> str:
    """`--backend NAME --precision P` where NAME does not run P (a precision some backend runs): say so, and name
    the backends that do."""
    others = [d.name for d in descriptors() if precision in d.precisions]
    return (f"--backend {backend} does not run {precision} (it runs "
            f"{', '.join(CLASSES[backend].DESCRIPTOR.precisions)}); {precision} runs on {', '.join(others)} "
            "(--backend auto picks the fastest available)")


def option_values(backend: str, options, keywords: dict | None = None) -> dict:
    """A backend's typed options value as keywords ({} for None); a value of another backend's type is an error, and
    so is a keyword in `keywords` that says otherwise than an option the value sets (neither silently wins)."""
    if options is None:
        return {}
    want = backend_class(backend).DESCRIPTOR.options
    if type(options) is not want:
        raise PipelineError(f"backend '{backend}' takes {want.__name__}, not {type(options).__name__}")
    values = {f.name: getattr(options, f.name) for f in fields(options)}
    for f in fields(options):
        given = (keywords or {}).get(f.name)
        if given is not None and values[f.name] != f.default and given != values[f.name]:
            raise PipelineError(f"option '{f.name}' given twice, as {f.name}={given!r} and in options= as "
                                f"{values[f.name]!r}: give it once")
    return values


def create_named(backend: str, model: str | None, precision: str = "fp32", *, options=None, **opts) -> Backend:
    """A loaded backend of this exact name (no 'auto'). Its options are its descriptor's typed options, given as
    one (`options=OrtOptions(threads=2)`) or as keywords (not both for one option, unless they agree): one it does
    not take is an error when set and dropped when None (callers pass their whole option set); a hook (log,
    progress, chatter) goes to the backends that take it."""
    cls = backend_class(backend)
    desc = cls.DESCRIPTOR
    opts = {**option_values(backend, options, opts), **opts}
    if precision not in desc.precisions:
        check_run_precision(precision)  # a precision no backend runs: "unknown precision"
        raise PipelineError(precision_refusal(backend, precision))
    takes = desc.option_names()
    for key, value in opts.items():
        if key not in takes and key not in HOOKS and value is not None:
            raise PipelineError(f"option '{key}' does not apply to backend '{backend}'")
    given = {k: v for k, v in opts.items() if k in takes}
    for key, value in given.items():
        if problem := desc.option_problem(key, value):
            raise PipelineError(problem)
    b = cls(model, precision, **given).load()
    return b.selected(f"requested: {backend}", "requested")
