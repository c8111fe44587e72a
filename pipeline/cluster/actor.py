"""The Ray Data actor: loads the backend once, then turns batches of job rows into one record per image.

Results are written by the actor itself (atomically: temp file + rename, so a killed actor leaves no half
image under the output name); the driver only sees small records. A writer killed mid-file leaves its temp
file behind: the retry that writes the same output removes it."""
from __future__ import annotations

import glob
import json
import os
import socket
import time
from pathlib import Path

import numpy as np

from pipeline.cluster import artifacts, unit

COLUMNS = ("src", "dst", "rel", "fmt", "segment")  # segment: a clip's segment task as JSON ("" for an image)


def remove_stale_temps(dst: Path) -> None:
    """Temp files of `dst` left by a writer that died (pipeline.artifacts.atomic names them .NAME.PID-TID.part)."""
    for tmp in dst.parent.glob(f".{glob.escape(dst.name)}.*.part"):
        tmp.unlink(missing_ok=True)


class SrActor:
    """map_batches callable class: constructed once per actor process."""

    def __init__(self, shared: artifacts.Shared, options: dict):
        import ray

        choice = artifacts.materialize(ray, shared)  # the driver's Choice, its files in this node's cache
        self.backend = unit.load(choice)
        self.choice = choice.brief  # in a few words: the summary joins the actors' descriptions with ";"
        self.worker = unit.make_worker(self.backend, choice.model, choice.scale, options)
        self.name = f"{socket.gethostname()}:{os.getpid()}"
        self.ready_at = time.time()  # wall clock: the driver compares actors' start with its own

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        records = []
        for src, dst, rel, fmt, segment in zip(*(batch[c] for c in COLUMNS), strict=True):
            job = unit.job_from_row(str(src), str(dst), str(rel), str(fmt))
            if segment:
                task = json.loads(str(segment))
                rec = unit.segment(self.worker, job, task)
                done, written = "timing" in rec, Path(task["file"])
            else:
                rec = unit.process(self.worker, job)
                done, written = rec["status"] == "ok", job.dst
            if done:
                remove_stale_temps(written)
            records.append(json.dumps(rec))
        n = len(records)
        return {"record": np.array(records, dtype=object), "actor": np.array([self.name] * n, dtype=object),
                "backend": np.array([f"{self.backend.describe()} ({self.choice})"] * n, dtype=object),
                "ready_at": np.full(n, self.ready_at)}
