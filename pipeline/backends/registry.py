"""Every backend in one table: its class, what it is (its descriptor: device, expected-order ranks, each precision and
the artifact it runs from, its typed options); names -> classes; constructing one named backend with the options it
takes, checked against its descriptor's typed options."""
from __future__ import annotations

from dataclasses import fields

from pipeline.backends.base import Backend, check_run_precision
from pipeline.backends.decide import requested
from pipeline.backends.descriptor import (
    HOOKS,
    Descriptor,
    FileOptions,
    OpenVinoOptions,
    OrtOptions,
    Runs,
    SrKernelsOptions,
    StandInOptions,
    TorchOptions,
    TrtOptions,
)
from pipeline.backends.openvino_backend import OpenVinoBackend
from pipeline.backends.ort_backend import OrtBackend, OrtCpuBackend, OrtCudaBackend, OrtTrtBackend
from pipeline.backends.ort_folded_backend import OrtFoldedBackend
from pipeline.backends.ort_sr_kernels_backend import OrtSrKernelsBackend
from pipeline.backends.stand_in_backend import StandInBackend
from pipeline.backends.torch_backend import TorchBackend
from pipeline.backends.trt_backend import TrtBackend
from pipeline.errors import PipelineError, check_choice

D = Descriptor
GRAPHS = (Runs("fp32", "graph"), Runs("fp16", "graph"))  # what every ONNX Runtime provider runs
# (class, descriptor): registry order; ranks are places in `--backend auto`'s expected order (pipeline.backends.auto)
TABLE: tuple[tuple[type[Backend], Descriptor], ...] = (
    (TorchBackend, D("torch", "cpu or cuda", options=TorchOptions, cpu_rank=4, gpu_rank=3,
                     summary="PyTorch eager on the model's weights (no export needed); the GPU where there is one",
                     runs=(Runs("fp32", "weights"), Runs("fp16", "weights", "the net in half precision"),
                           # oneDNN's AMX/AVX512-BF16 convolutions on the CPU, tensor cores on a GPU
                           Runs("bf16", "weights", "torch.autocast over the net")))),
    (OrtBackend, D("ort", "cpu or cuda", options=OrtOptions, cpu_rank=2, runs=GRAPHS, triton="onnxruntime",
                   summary="ONNX Runtime with its best provider here (TensorRT, CUDA, else CPU)")),
    (OrtCpuBackend, D("ort-cpu", "cpu", options=OrtOptions, runs=GRAPHS, summary="ONNX Runtime's CPU provider",
                      alias_of="ort")),
    (OrtCudaBackend, D("ort-cuda", "cuda", options=OrtOptions, gpu_rank=2, runs=GRAPHS,
                       summary="ONNX Runtime's CUDA provider")),
    (OrtTrtBackend, D("ort-trt", "cuda", options=OrtOptions, gpu_rank=1, runs=GRAPHS,
                      summary="ONNX Runtime's TensorRT provider, with our plugins")),
    (OrtSrKernelsBackend, D("ort-sr-kernels", "cpu", options=SrKernelsOptions, cpu_rank=3, runs=GRAPHS,
                            summary="ONNX Runtime CPU with our C++ kernels for the sr ops")),
    (OrtFoldedBackend, D("ort-folded", "cpu", options=FileOptions, cpu_rank=0,
                         summary="ONNX Runtime CPU on SRCNN with bicubic folded into conv1 (exact; integer scales)",
                         runs=(Runs("fp32", "folded", "the fp32 export's folded siblings"),))),
    (TrtBackend, D("trt", "cuda", options=TrtOptions, gpu_rank=0, triton="tensorrt",
                   summary="TensorRT 11 engines with our IPluginV3 plugins (built on first use, cached)",
                   runs=(Runs("fp32", "engine", "from the fp32 graph"), Runs("fp16", "engine", "from the fp16 graph"),
                         Runs("bf16", "engine", "from the fp32 graph in BF16"),
                         Runs("int8", "engine", "from the Q/DQ file")))),
    (OpenVinoBackend, D("openvino", "cpu", options=OpenVinoOptions, cpu_rank=1,
                        summary="OpenVINO on the CPU: the exported file, SRCNN's folded siblings at integer scales",
                        runs=(Runs("fp32", "graph", "inference precision f32"),
                              Runs("bf16", "graph", "inference precision bf16 (CPUs with bf16 arithmetic)"),
                              Runs("int8", "qdq", "float parts bf16 where the CPU has it, else f32")))),
    (StandInBackend, D("stand-in", "cpu", options=StandInOptions, stand_in=True,
                       summary="a stand-in device for measuring the host side: nearest-neighbour, sleeps 0.4 ms/MPix",
                       runs=(Runs("fp32", "weights", "no model: the input's nearest-neighbour"),))),
)
for _cls, _desc in TABLE:  # each class reads its row as DESCRIPTOR (and its name from it): declared once, here
    _cls.DESCRIPTOR, _cls.name = _desc, _desc.name

# What users choose from (the CLI, `backends`, `auto`): every backend but the stand-ins, which bench and tests load
# through `stand_in`
CLASSES: dict[str, type[Backend]] = {desc.name: cls for cls, desc in TABLE if not desc.stand_in}
NAMES = tuple(CLASSES)
STAND_IN: type[Backend] = next(cls for cls, desc in TABLE if desc.stand_in)


def stand_in(model: str, ms_per_mpix: float | None = None) -> Backend:
    """The stand-in device (bench's host-side rows, tests), loaded: `model`'s spec, no model run."""
    opts = {} if ms_per_mpix is None else {"ms_per_mpix": ms_per_mpix}
    return STAND_IN(model, "fp32", **opts).load().selected("stand-in: measuring the host side", "stand-in")


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


def settled(backend: str, precision: str, opts: dict) -> dict[str, str]:
    """What a load of `backend` at `precision` with `opts` settles from this machine (ONNX Runtime's provider,
    OpenVINO int8's float parts), from availability alone: what its Choice names before anything loads."""
    cls = backend_class(backend)
    takes = cls.DESCRIPTOR.option_names()
    return {k: v for k, v in cls.settles(precision, opts).items() if k in takes}


def create_named(backend: str, model: str | None, precision: str = "fp32", *, options=None, **opts) -> Backend:
    """A loaded backend of this exact name (no 'auto'). Its options are its descriptor's typed options, given as
    one (`options=OrtOptions(threads=2)`) or as keywords (not both for one option, unless they agree): one it does
    not take is an error when set and dropped when None (callers pass their whole option set); a hook (log,
    progress, chatter) goes to the backends that take it."""
    given = checked_options(backend, precision, {**option_values(backend, options, opts), **opts})
    return backend_class(backend)(model, precision, **given).load().selected(*requested(backend))


def checked_options(backend: str, precision: str, opts: dict) -> dict:
    """The constructor's keywords of `backend` at `precision` among `opts` (hooks to the backends that take them),
    each checked; PipelineError (one line) for a precision it does not run or an option it does not take or refuses
    (one it does not take is dropped when None: callers pass their whole option set)."""
    desc = backend_class(backend).DESCRIPTOR
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
    return given
