"""Timing primitives: latency statistics, peak-RSS sampling and the (round-robin) timed-call loop."""
from __future__ import annotations

import sys
import threading
import time

import numpy as np
import psutil

from pipeline.native.cuda_driver import torch_gpu_visible


def latency_stats(ms: list[float]) -> dict:
    """n, mean, median, p90, p99, min, max of latencies in ms (percentiles: linear interpolation)."""
    if not ms:
        raise ValueError("no latencies")
    a = np.asarray(ms, dtype=np.float64)
    return {"n": int(a.size), "mean": float(a.mean()), "median": float(np.median(a)),
            "p90": float(np.percentile(a, 90)), "p99": float(np.percentile(a, 99)),
            "min": float(a.min()), "max": float(a.max())}


def available_bytes() -> int:
    return int(psutil.virtual_memory().available)


class RssSampler:
    """Peak resident set size of this process, sampled every `interval` s while active; samples taken
    while `label` is set are also attributed to that label (`peaks`)."""

    def __init__(self, interval: float = 0.005):
        self.proc, self.interval, self.peak = psutil.Process(), interval, 0
        self.label: str | None = None
        self.peaks: dict[str, int] = {}
        self._stop = threading.Event()

    def sample(self) -> None:
        rss = self.proc.memory_info().rss
        self.peak = max(self.peak, rss)
        if self.label is not None:
            self.peaks[self.label] = max(self.peaks.get(self.label, 0), rss)

    def _loop(self):
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def __enter__(self):
        self.peak = self.proc.memory_info().rss
        self._t = threading.Thread(target=self._loop, daemon=True)
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()
        self.sample()


def cuda_torch():
    """torch, when it is already imported and sees a GPU. Not imported here: a process that never loaded
    torch has no torch CUDA work to wait for, and the deploy runtime runs without it."""
    torch = sys.modules.get("torch")
    return torch if torch is not None and torch_gpu_visible()[0] else None


def _sync() -> None:
    torch = cuda_torch()
    if torch is not None:
        torch.cuda.synchronize()


def cuda_times_ms(fn, iters: int, warmup: int = 2) -> list[float]:
    """Device ms of each of `iters` calls of fn (work it queues on torch's current CUDA stream), between two CUDA
    events, after `warmup` calls; what the device spends, not the host's launch time."""
    import torch  # only called where torch's CUDA is in use

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(float(start.elapsed_time(end)))
    return times


def warm_up(fn, *, min_calls: int = 3, max_calls: int = 6, settle: float = 0.15) -> int:
    """Call fn until it runs warm: at least `min_calls` (ONNX Runtime's first *two* calls at a new input size are
    slow, so the third is the first that can be warm), then until a call is no more than `settle` faster than the
    one before (at most `max_calls`). Returns the calls made."""
    last = None
    for n in range(1, max_calls + 1):
        t0 = time.perf_counter()
        fn()
        took = time.perf_counter() - t0
        if n >= min_calls and last is not None and took >= last * (1 - settle):
            return n
        last = took
    return max_calls


def time_interleaved(fns: list, *, warmup: int = 1, iters: int = 20, time_budget: float = 4.0,
                     min_iters: int = 2) -> dict:
    """Time several (name, fn) in round-robin: each round times every fn once, so a load change on a
    shared machine hits all of them alike. Rounds stop at `iters`, or once `time_budget` s per fn were
    spent and `min_iters` rounds ran; the device is synchronised around each call.
    Returns name -> {ms: [latencies], peak_rss_mb, peak_device_mb}."""
    for _, fn in fns:
        for _ in range(warmup):
            fn()
    _sync()
    torch = cuda_torch()
    if torch is not None:
        torch.cuda.reset_peak_memory_stats()
    ms: dict[str, list[float]] = {name: [] for name, _ in fns}
    rounds = 0
    with RssSampler() as rss:
        start = time.perf_counter()
        while rounds < iters and (rounds < min_iters or time.perf_counter() - start < time_budget * len(fns)):
            for name, fn in fns:
                rss.label = name
                _sync()
                t0 = time.perf_counter()
                fn()
                _sync()
                ms[name].append((time.perf_counter() - t0) * 1e3)
                rss.sample()  # a call shorter than the sampling interval still gets one sample
                rss.label = None
            rounds += 1
    device_mb = torch.cuda.max_memory_allocated() / 2**20 if torch is not None else None
    return {name: {"ms": ms[name], "peak_rss_mb": rss.peaks.get(name, rss.peak) / 2**20, "peak_device_mb": device_mb}
            for name, _ in fns}


def time_calls(fn, *, warmup: int = 1, iters: int = 20, time_budget: float = 4.0, min_iters: int = 2) -> dict:
    """Warm-up calls, then up to `iters` timed calls (stop once `time_budget` s are spent and at least
    `min_iters` ran). Returns the latency list (ms) and peak RSS (MB)."""
    return time_interleaved([("fn", fn)], warmup=warmup, iters=iters, time_budget=time_budget,
                            min_iters=min_iters)["fn"]
