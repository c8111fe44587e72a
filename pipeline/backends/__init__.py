"""Backends: one inference interface (base.Backend) over PyTorch, ONNX Runtime and TensorRT.

    choose(BackendRequest(backend, precision, onnx=..., threads=...), model, scale) -> Choice   (frozen: backend,
        precision, the files it runs with their SHA-256, the quality record it stands on, why; either may be "auto")
    load(choice) -> loaded Backend        the one loader: here, on a Ray actor (which gets the Choice and its files)
    create(backend, model, precision="fp32", **opts) -> loaded Backend   the shortcut: load(choose(...))
    decide(Facts(candidates)) -> Candidate | None   the fastest within budget, from measured facts (loads nothing)
    available(model, precision="fp32", weights=None, onnx=None, engine=None) -> [BackendStatus(name, available, reason)]
    pick_auto(model, precision="fp32") -> AutoPick(name, reason)
    descriptors() -> [Descriptor]     what each backend is, as data (name, device, ranks, precisions, options)
    stand_in(model) -> loaded Backend  a stand-in device (no runtime) for measuring the host side; never offered

Nothing falls back silently: a backend that cannot run raises PipelineError saying why, `available`
says why for each, and a backend made by "auto" carries `selection_reason`. With `onnx=FILE` (or
`engine=FILE`) the model comes from the file's metadata (pipeline.artifacts.identity.resolve, the one
answer to which model) and nothing here imports PyTorch.

    descriptor    what a backend is, as data, and the typed options its constructor takes
    base          the Backend interface: everything callers read, declared (DESCRIPTOR, status, load, infer,
                  describe, selected/selection_reason, profiles, max_input_size, onnx_file, fp32_twin)
    checks        input validation every backend runs
    pixels        integer pixels <-> model tensors: the one rounding rule, in numpy, torch and ONNX
    registry      the one table of backends (class, descriptor), names -> classes, create_named
    availability  what can run here, and why not
    choice        BackendRequest in, Choice out: choose(request, model, scale), load(choice), create; what every
                  caller uses
    auto          `--backend auto`: its facts (what runs here, the expected order from the descriptors) and --measure
    select        `pick` (the loader choose decides with) and `--precision auto`: its stored pick, measure_candidates
    decide        from facts alone (loads nothing): the fastest within budget (auto's timings, preview's samples),
                  `--backend auto`'s pick (backend_pick), and every line saying why
    *_backend     one module per runtime
"""
from pipeline.backends.auto import (
    expected_order,
    measure,
    measured,
    pick_auto,
    time_backend,
)
from pipeline.backends.availability import NEEDS_GPU, available, no_gpu_line
from pipeline.backends.base import Backend, BackendStatus
from pipeline.backends.choice import BackendRequest, Choice, choose, create, given, load
from pipeline.backends.decide import AutoPick, Candidate, Facts, decide, triton_pick
from pipeline.backends.descriptor import Descriptor
from pipeline.backends.registry import NAMES, backend_class, create_named, descriptors, stand_in
from pipeline.backends.select import auto_line, candidates, faster_line, pick_precision

__all__ = ["NAMES", "NEEDS_GPU", "AutoPick", "Backend", "BackendRequest", "BackendStatus", "Candidate", "Choice",
           "Descriptor", "Facts", "decide", "triton_pick",
           "choose", "given", "load", "auto_line", "available", "backend_class", "candidates",
           "create", "create_named", "descriptors", "expected_order", "faster_line", "measure", "measured",
           "no_gpu_line", "pick_auto", "pick_precision", "stand_in", "time_backend"]
