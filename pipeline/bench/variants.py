"""What a bench point times: the tutorial's plain PyTorch loop (the baseline) and every backend that can run."""
from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pipeline import backends as B
from pipeline import quality
from pipeline.analysis.candidates import candidate_statuses
from pipeline.analysis.reference import load_net
from pipeline.artifacts.identity import resolve
from pipeline.errors import PipelineError

BASELINE = "torch-eager-loop"


@dataclass
class Variant:
    """One thing to time: `infer(batch, scale)` plus a label."""

    name: str
    infer: Callable | None
    describe: str = ""
    precision: str = "fp32"
    quality: dict | None = None  # bf16/int8: the measured held-out loss (pipeline.quality)
    descriptor: B.Descriptor | None = None  # a backend's (None: the baseline loop)


def variant_label(backend: str, precision: str) -> str:
    """A timed backend's name in the bench: its own at fp32, `openvino-int8` at a lower precision."""
    return backend if precision == "fp32" else f"{backend}-{precision}"


def baseline_variant(model_name: str, weights=None) -> Variant:
    """The tutorial's plain loop: PyTorch eager, one image at a time, numpy in and out."""
    import torch

    from models.registry import run  # the registry imports PyTorch, like the line above

    spec = resolve(model_name)
    net = load_net(model_name, weights)

    def infer(batch, scale):
        with torch.no_grad():
            return np.concatenate([run(net, spec, torch.from_numpy(img[None]), scale).numpy() for img in batch])

    return Variant(BASELINE, infer, "PyTorch eager, for-loop over images, torch.no_grad")


def backend_variants(model_name: str, precisions=("fp32",), weights=None, only=None, note=print) -> list[Variant]:
    """Every available backend (or those in `only`) loaded; each one that cannot run is `note`d with why."""
    out = []
    for precision in precisions:
        for st in candidate_statuses(model_name, precision, only, weights):
            label = variant_label(st.name, precision)
            if precision not in B.backend_class(st.name).DESCRIPTOR.precisions:
                continue  # runs nowhere (torch int8): not something this machine missed, so not under "Not run"
            if not st.available:
                note(f"{model_name} {label}: {st.reason}")
                continue
            try:
                be = B.create(st.name, model_name, precision, weights=weights)
                loss = quality.precision_loss(be)  # bf16/int8: measured once per file and machine, then stored
            except PipelineError as e:
                note(f"{model_name} {label}: {e}")
                continue
            out.append(Variant(label, be.infer, be.describe(), precision, loss, be.DESCRIPTOR))
    return out


def thread_variants(variants: list[Variant], model_name: str, threads: int, weights=None, note=print) -> list[Variant]:
    """The variants a CPU-threads sweep can pin: torch (through torch_threads) and the CPU sessions made with a
    thread count (their descriptors say), re-created with `threads` intra-op threads."""
    out = [v for v in variants if v.descriptor is not None and v.descriptor.runs_weights]
    for v in variants:
        if v.descriptor is None or not v.descriptor.pins_threads:
            continue
        try:
            be = B.create(v.name, model_name, "fp32", weights=weights, threads=threads)
        except PipelineError as e:
            note(f"{model_name} threads={threads} {v.name}: {e}")
            continue
        out.append(Variant(v.name, be.infer, be.describe(), descriptor=v.descriptor))
    return out


@contextlib.contextmanager
def torch_threads(n: int | None):
    import torch

    old = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)
