"""`--backend auto`: the fastest available backend, measured on this machine or by the expected order."""
from __future__ import annotations

import hashlib
import json
import shlex
import statistics
import time
from pathlib import Path

import numpy as np

from pipeline.artifacts.atomic import atomic_write
from pipeline.artifacts.cache import cache_dir
from pipeline.artifacts.confine import file_token
from pipeline.artifacts.identity import resolve
from pipeline.backends.availability import BackendStatus, available
from pipeline.backends.base import Backend
from pipeline.backends.decide import ENGINE_GIVEN, AutoPick, auto_reason, backend_pick
from pipeline.backends.registry import CLASSES, create_named, descriptors
from pipeline.errors import PipelineError, printable
from pipeline.native.cuda_driver import gpu_visible
from pipeline.native.machine import fingerprint

# The expected order, when nothing was measured on this machine, is the descriptors' ranks (cpu_rank, gpu_rank): the
# GPU backends (where one can run) before the CPU ones, each list of the backends that run the precision. What the
# CPU ranks rest on: fp32 (2-core Ice Lake Xeon, SRCNN x3, 256x256 -> 768x768, one run, medians of 7): ort-folded 219
# ms, openvino 299 ms, ort 518 ms, torch 740 ms; deform-srcnn on the 2-core AMX Xeon: openvino 670 ms, ort 1452 ms.
# bf16 (2-core AMX Xeon, one bench): openvino 13.1 ms, torch 19.9 ms. int8: openvino alone on a CPU.


def expected_order(precision: str, gpu: bool) -> tuple[str, ...]:
    """The backends `auto` ranks at `precision` when nothing was measured here, fastest first (each once)."""
    runs = [d for d in descriptors() if precision in d.precisions]
    gpu_ranked = sorted((d for d in runs if d.gpu_rank is not None), key=lambda d: d.gpu_rank) if gpu else []
    cpu_ranked = sorted((d for d in runs if d.cpu_rank is not None), key=lambda d: d.cpu_rank)
    return tuple(dict.fromkeys(d.name for d in [*gpu_ranked, *cpu_ranked]))


def create_fixed(backend: str, model: str | None, precision: str = "fp32", **opts) -> Backend:
    """A loaded backend at one precision: 'auto' picks the fastest available one and records why in
    `selection_reason`. `model` may be None when `onnx`/`engine` names a file: the model then comes from it."""
    if backend == "auto":
        if opts.get("engine") is not None:  # an engine file only runs on TensorRT
            pick = ENGINE_GIVEN
        else:
            pick = pick_auto(model, precision, weights=opts.get("weights"), onnx=opts.get("onnx"))
        return create_named(pick.name, model, precision, **opts).selected(*auto_reason(pick))
    return create_named(backend, model, precision, **opts)


def _measure_file(model: str, precision: str) -> Path:
    key = hashlib.sha256(fingerprint().encode()).hexdigest()[:12]
    # a model name may come from a file's metadata: never a path, only a file-name-safe token of it
    return cache_dir() / "auto" / f"{file_token(model)}-{precision}-{key}.json"


def time_backend(backend: Backend, size: int = 256, scale: float | None = None, repeats: int = 5,
                 warmup: int = 1) -> float:
    """Median latency (ms) of one size x size image through a loaded backend."""
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
            repeats: int = 5, log=print, weights=None, onnx=None) -> dict[str, float]:
    """Time each available backend on this machine (on `onnx` when given) and remember the result for pick_auto."""
    names = names or [s.name for s in available(model, precision, weights, onnx=onnx)
                      if s.available and not _alias(s.name)]
    ms = {}
    for name in names:
        try:
            b = create_named(name, model, precision, weights=weights, onnx=onnx)
        except PipelineError as e:
            log(f"  {name}: cannot run ({e})")
            continue
        ms[name] = time_backend(b, size, repeats=repeats)
        log(f"  {name}: {ms[name]:.1f} ms median ({size}x{size}, scale {b.spec.default_scale:g}, {repeats} runs)")
    record = {"model": model, "precision": precision, "size": size, "repeats": repeats, "ms": ms,
              "machine": json.loads(fingerprint()), "when": time.strftime("%Y-%m-%d %H:%M:%S")}
    atomic_write(_measure_file(model, precision), json.dumps(record, indent=2).encode())
    return ms


def _alias(name: str) -> bool:
    return name in CLASSES and CLASSES[name].DESCRIPTOR.alias_of is not None


def measured(model: str, precision: str = "fp32") -> dict | None:
    path = _measure_file(model, precision)
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def pick_auto(model: str | None, precision: str = "fp32", statuses: list[BackendStatus] | None = None,
              weights=None, onnx=None) -> AutoPick:
    """Fastest available backend: the latest measurement of this machine if one was made (`backends --measure`),
    unless the expected pick was within noise of the fastest there; otherwise the expected order of `precision`
    (expected_order)."""
    statuses = statuses if statuses is not None else available(model, precision, weights, onnx=onnx)
    model = model if model is not None else resolve(None, onnx).name
    ok = {s.name for s in statuses if s.available}
    if not ok:
        raise PipelineError(f"no backend can run {model} ({precision}): {unavailable_reasons(statuses, precision)}")
    gpu = gpu_visible()[0]
    return backend_pick(precision, expected_order(precision, gpu), ok, gpu, measured(model, precision),
                        measure_command(model, precision, onnx))


def measure_command(model: str, precision: str, onnx=None) -> str:
    """The command that times the backends for this run: of the file where one is given (`--model` there would time
    the registered model, which a torch-free install cannot build)."""
    target = f"--onnx {shlex.quote(printable(str(onnx)))}" if onnx is not None else f"--model {model}"
    return f"python -m pipeline backends {target}{'' if precision == 'fp32' else f' --precision {precision}'} --measure"


def unavailable_reasons(statuses: list[BackendStatus], precision: str) -> str:
    """Why nothing runs `precision`: the reasons of the backends that run it (each distinct reason once, with the
    backends it applies to), or, when none runs it at all, that."""
    runs = [s for s in statuses if s.name not in CLASSES or precision in CLASSES[s.name].DESCRIPTOR.precisions]
    if not runs:
        return f"no backend runs {precision}"
    by_reason: dict[str, list[str]] = {}
    for s in runs:
        by_reason.setdefault(s.reason, []).append(s.name)
    return "; ".join(f"{', '.join(names)}: {reason}" for reason, names in by_reason.items())
