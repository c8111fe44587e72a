"""Every model output checked before it is written (the sr stage's one place for it: local folders, videos, Ray
actors and Triton's sr model all infer through pipeline.sr.runner.worker, which goes through here).

The conversions out of the model (pipeline.backends.pixels) count each sample's pixels with a NaN or infinite value
and raise NonFiniteOutput; the float path is counted here. Then:
  - at a lower precision (fp16, bf16, int8) the affected samples (tiles, whole images, frames) run again through
    the backend's fp32 twin (Backend.fp32_twin, loaded on first need) and that output is written; the caller
    counts them (Planned.rerun) for the record, the summary and the report;
  - at fp32 (or when no fp32 twin loads, or it is not finite either) NonFiniteOutput goes up to the caller: the
    image or clip fails with one line naming the output and where, and nothing is written for it.
"""
from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np

from pipeline.backends import pixels as px
from pipeline.backends.base import Backend
from pipeline.errors import PipelineError, first_line
from pipeline.precisions import DEFAULT


class OutputCheck:
    """One backend's outputs checked; re-runs at fp32 what a lower precision did not make finite."""

    def __init__(self, backend: Backend):
        self.backend = backend
        self._twin: Backend | None = None
        self._twin_problem = ""
        self._lock = threading.Lock()

    @property
    def source(self) -> str:
        return f"{self.backend.name} {self.backend.precision}"

    @property
    def reason(self) -> str:
        """Why a sample was re-run (the records' and the summary's words)."""
        return f"non-finite {self.backend.precision} output"

    def twin(self) -> Backend | None:
        """The fp32 twin, loaded once (None, with why, when it cannot be: e.g. a user's fp16-only file)."""
        with self._lock:
            if self._twin is None and not self._twin_problem:
                try:
                    self._twin = self.backend.fp32_twin()
                except (PipelineError, OSError) as e:
                    self._twin_problem = first_line(e)
            return self._twin

    def _unrepairable(self, e: px.NonFiniteOutput) -> px.NonFiniteOutput:
        e.source = self.source
        if self.backend.precision != DEFAULT:
            e.note = f"no fp32 twin to re-run it ({self._twin_problem})"
        return e

    def submit(self, batch: np.ndarray, scale: float) -> Callable[[list | None], tuple[np.ndarray, list[int]]]:
        """`submit_pixels`, checked: the returned `collect(out)` gives the samples (in `out` when given) and which
        were re-run at fp32; raises NonFiniteOutput for those that cannot be."""
        pending = self.backend.submit_pixels(batch, scale)

        def collect(out=None):
            try:
                return pending.result(out), []
            except px.NonFiniteOutput as e:
                samples = e.samples
                return samples, self._repair(e, lambda i: self._twin_pixels(batch[i:i + 1], scale, samples[i]))

        return collect

    def floats(self, batch: np.ndarray, scale: float) -> tuple[np.ndarray, list[int]]:
        """`infer` (NCHW float in and out), checked: (output, samples re-run at fp32)."""
        y = self.backend.infer(batch, scale)
        counts = px.nonfinite_pixels(y)
        if counts is None:
            return y, []

        def rerun(i: int) -> None:
            yi = self._twin.infer(batch[i:i + 1], scale)
            px.check_finite(yi)
            y[i] = yi[0]

        return y, self._repair(px.NonFiniteOutput(counts, y), rerun)

    def _repair(self, e: px.NonFiniteOutput, rerun: Callable[[int], None]) -> list[int]:
        """Re-run each affected sample at fp32; the ones re-run, or NonFiniteOutput for those that cannot be (its
        `repaired`: the others, whose output is good)."""
        if self.backend.precision == DEFAULT or self.twin() is None:
            raise self._unrepairable(e)
        still = np.zeros_like(e.counts)
        for i in e.affected:
            try:
                rerun(i)
            except px.NonFiniteOutput as again:  # fp32 is not finite either: the model's own output
                still[i] = again.counts.sum()
        repaired = [i for i in e.affected if not still[i]]
        if still.any():
            bad = px.NonFiniteOutput(still, e.samples, source=f"{self.source} and its fp32 re-run")
            bad.repaired = repaired
            raise bad
        return repaired

    def _twin_pixels(self, one: np.ndarray, scale: float, dst: np.ndarray) -> None:
        np.copyto(dst, self._twin.infer_pixels(one, scale)[0])
