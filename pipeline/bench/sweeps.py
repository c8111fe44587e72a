"""The sweeps of one model: the main point (outputs checked against the baseline), then input size, scale,
batch and CPU threads, every point timing the baseline and the backends round-robin."""
from __future__ import annotations

import math

import numpy as np

from models.spec import output_size
from pipeline.artifacts.identity import resolve
from pipeline.bench.results import result_row
from pipeline.bench.roofline import peak_precision
from pipeline.bench.timing import available_bytes, time_interleaved
from pipeline.bench.variants import (
    BASELINE,
    Variant,
    backend_variants,
    baseline_variant,
    thread_variants,
    torch_threads,
)
from pipeline.bench.verdicts import noise_mark
from pipeline.errors import PipelineError
from pipeline.precisions import LOWER


class ModelBench:
    """All sweeps for one model; `run()` returns the result rows, `note` receives what was not run and why."""

    def __init__(self, model: str, cfg: dict, peaks: dict[str, float], flops_px: float, *, weights=None, log=print,
                 note=print):
        import torch

        self.model, self.cfg, self.peaks, self.flops_px, self.weights = model, cfg, peaks, flops_px, weights
        self.log, self.note = log, note
        self.spec = resolve(model)
        self.scale0, self.size0 = self.spec.default_scale, cfg["main_size"]
        self.default_threads = torch.get_num_threads()
        self.rng = np.random.default_rng(0)
        self.results: list[dict] = []
        self.base = baseline_variant(model, weights)
        self.variants = backend_variants(model, weights=weights, only=cfg.get("backends"), note=note)
        # bf16 and int8 (each with its measured quality loss) at the main point only: the sweeps are about shapes
        self.lower = backend_variants(model, LOWER, weights=weights, only=cfg.get("backends"), note=note) \
            if cfg.get("lower_precisions") else []
        # The weights-run backend (torch) is about the baseline loop at batch 1: the size and scale sweeps leave it out.
        self.sweep_variants = [v for v in self.variants if not v.descriptor.runs_weights]
        self.base_ms_per_px: float | None = None  # baseline cost per output pixel (main point): sizes the big sweeps

    def run(self) -> list[dict]:
        self.point("main", self.variants + self.lower, self.size0, self.scale0, 1, check=True)
        for size in self.cfg["sizes"]:
            if size != self.size0:
                self.point("size", self.sweep_variants, size, self.scale0, 1)
        for scale in self._sweep_scales():
            self.point("scale", self.sweep_variants, self.size0, scale, 1)
        for batch in self.cfg["batches"]:
            self.point("batch", self.variants, self.cfg["batch_size"], self.scale0, batch)
        for n in self.cfg["threads"]:
            if n != self.default_threads:  # every other sweep already ran with the default thread count
                with torch_threads(n):
                    tv = thread_variants(self.variants, self.model, n, self.weights, self.note)
                    self.point("threads", tv, self.size0, self.scale0, 1, threads=n)
        return self.results

    def _sweep_scales(self) -> list[float]:
        if not self.spec.dynamic_scale:
            return []
        lo, hi = self.spec.scale_range
        return [s for s in self.cfg["scales"] if s != self.scale0 and lo <= s <= hi]

    def _timing_options(self, where: str, px: int, n_variants: int) -> dict | None:
        """Timing options for a point of `px` output pixels, or None (noted) when it is too big to run."""
        cfg = self.cfg
        kw = dict(warmup=cfg["warmup"], iters=cfg["iters"], time_budget=cfg["time_budget"], min_iters=cfg["min_iters"])
        if self.base_ms_per_px is not None:
            est = self.base_ms_per_px * px
            if est > cfg.get("max_call_s", math.inf) * 1e3:
                self.note(f"{where}: the baseline call would take ~{est / 1e3:.0f} s (> {cfg['max_call_s']:g} s "
                          "per call)")
                return None
            if est > cfg.get("heavy_call_s", math.inf) * 1e3:  # big inputs: 1 warm-up + 1 timed call
                kw = dict(warmup=1, iters=1, time_budget=0.0, min_iters=1)
        # Memory guard: ~3 live 64-channel fp32 HR feature maps per variant, and ORT keeps its arena per
        # session, so the variants add up. Over half of the available memory -> skip (a shared box OOMs).
        need, avail = px * 64 * 4 * 3 * n_variants, available_bytes()
        if need > avail / 2:
            self.note(f"{where}: needs ~{need / 2**30:.1f} GB for {n_variants} variants, {avail / 2**30:.1f} GB "
                      "available (large images: `pipeline sr` tiles them)")
            return None
        return kw

    def _runnable(self, vs: list[Variant], x: np.ndarray, scale: float, check: bool, where: str):
        """The baseline and the variants whose first call succeeds, with each one's max abs error against
        the baseline when `check`."""
        ref = self.base.infer(x[:1], scale) if check else None
        errs, ok = {BASELINE: 0.0 if check else None}, [self.base]
        for v in vs:
            try:
                y = v.infer(x[:1], scale)
            except PipelineError as e:
                self.note(f"{where} {v.name}: {e}")
                continue
            errs[v.name] = float(np.max(np.abs(y - ref))) if check else None
            ok.append(v)
        return ok, errs

    def point(self, sweep: str, vs: list[Variant], size: int, scale: float, batch: int, threads=None,
              check: bool = False) -> None:
        threads = threads or self.default_threads
        out_hw = output_size(size, size, scale)
        px = batch * math.prod(out_hw)
        where = f"{self.model} {sweep} {size}^2 x{scale:g} b{batch}" + (
            f" t{threads}" if threads != self.default_threads else "")
        kw = self._timing_options(where, px, 1 + len(vs))
        if kw is None:
            return
        x = self.rng.random((batch, 3, size, size), dtype=np.float32)
        ok, errs = self._runnable(vs, x, scale, check, where)
        timings = time_interleaved([(v.name, (lambda v=v: v.infer(x, scale))) for v in ok], **kw)
        base_ms = float(np.median(timings[BASELINE]["ms"]))
        if self.base_ms_per_px is None:
            self.base_ms_per_px = base_ms / px
        for v in ok:
            r = result_row(model=self.model, sweep=sweep, variant=v, size=size, scale=scale, batch=batch,
                           threads=threads, timing=timings[v.name], out_hw=out_hw, flops_px=self.flops_px,
                           peak=self.peaks[peak_precision(v.precision)], baseline_ms=base_ms,
                           err=errs[v.name])
            self.results.append(r)
            # no roofline share here: the peaks are final only after every row (results.apply_peak)
            self.log(f"  {where:<{len(self.model) + 24}} {v.name:<17} {r['latency_ms']['median']:9.1f} ms  "
                     f"x{r['speedup_vs_baseline']:.2f} vs baseline"  # padded: columns stay put across sweeps
                     + noise_mark(r["latencies_ms"]))
