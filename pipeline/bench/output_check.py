"""What checking every output for NaN / inf costs (pipeline.sr.runner.finite; issue 48's goal: <= 2 % of inference on
the CPU): the host path's check (pipeline.backends.pixels.nonfinite_pixels on the float output) timed against the
inference call that made that output, on one loaded backend, alternating, medians of the runs. On a CUDA device
the check runs inside the device conversion (pixels.torch_to_samples); the GPU bench times it there."""
from __future__ import annotations

import statistics
import time

import numpy as np

from pipeline import backends
from pipeline.artifacts.identity import resolve
from pipeline.backends import pixels as px
from pipeline.bench.timing import cuda_times_ms
from pipeline.bench.verdicts import goal_mark

GOAL_PCT = 2.0  # the check's cost, % of the inference call it checks


def _timed(call, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return times


def output_check_cost(model: str, size: int = 256, repeats: int = 5, backend="auto", weights=None,
                      log=print) -> dict:
    """Median ms of one inference call on a size x size image and of the check of its output; their ratio."""
    scale = resolve(model).default_scale
    be = backends.create(backend, model, "fp32", weights=weights) if isinstance(backend, str) else backend
    x = np.random.default_rng(0).random((1, 3, size, size), dtype=np.float32)
    y = be.infer(x, scale)  # warm-up, and the output the check reads
    check_one, where = _check_call(y, be)
    infer, check = [], []
    for _ in range(max(1, repeats)):  # alternating: a noisy shared machine slows both alike
        infer += _timed(lambda: be.infer(x, scale), 1)
        check += check_one()
    infer_ms, check_ms = 1e3 * statistics.median(infer), 1e3 * statistics.median(check)
    pct = 100.0 * check_ms / infer_ms
    judged = goal_mark(f"<= {GOAL_PCT:g} %", pct <= GOAL_PCT)
    log(f"  output check (NaN/inf): {check_ms:.2f} ms per {y.shape[-1]}x{y.shape[-2]} output vs {infer_ms:.1f} ms "
        f"inference ({be.describe()}, {where}, median of {len(infer)}): {pct:.2f} % ({judged})")
    return {"model": model, "backend": be.name, "backend_description": be.describe(), "size": size, "scale": scale,
            "out_pixels": int(y.shape[-1] * y.shape[-2]), "inference_ms": infer_ms, "check_ms": check_ms,
            "check_pct": pct, "check_path": where, "goal_pct": GOAL_PCT, "meets_goal": pct <= GOAL_PCT,
            "repeats": len(infer)}


def _check_call(y: np.ndarray, be):
    """(a call giving the seconds of 5 checks of output `y`, which path it times): on a CUDA device backend with
    torch's CUDA, the device check on a device copy of y (CUDA events); elsewhere numpy's on y."""
    if be.on_gpu:
        try:
            import torch  # optional (the export extra); the device path needs it
        except ImportError:
            torch = None
        if torch is not None and torch.cuda.is_available():
            dev = torch.from_numpy(np.ascontiguousarray(y)).to(str(be.device))  # on_gpu: a "cuda..." device
            return (lambda: [ms / 1e3 for ms in cuda_times_ms(lambda: px.torch_nonfinite(dev), 5, warmup=1)],
                    "device check (CUDA events)")
    return (lambda: _timed(lambda: px.nonfinite_pixels(y), 5)), "host check (numpy)"
