"""The Ray Data actor: loads the backend once, then turns batches of job rows into one record per image.

Results are written by the actor itself (atomically: temp file + rename, so a killed actor leaves no half
image under the output name); the driver only sees small records. A writer killed mid-file leaves its temp
file behind: the retry that writes the same output removes it (only a dead process's: the temp names carry the
writer's pid). An actor on the driver's machine ends itself when the driver dies (SIGKILL leaves Ray no time to
stop it), so no orphan goes on writing segments nobody joins."""
from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path

import numpy as np

from pipeline.artifacts.atomic import remove_stale_parts
from pipeline.cluster import artifacts, progress, unit

COLUMNS = ("src", "dst", "rel", "fmt", "segment")  # segment: a clip's segment task as JSON ("" for an image)
WATCH_S = 1.0  # how often an actor checks that its driver lives


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def watch_driver(driver: tuple[str, int] | None) -> None:
    """On the driver's machine: a thread that ends this process once the driver's process is gone. Elsewhere
    Ray's own fate-sharing ends the actors with their job."""
    if driver is None or driver[0] != socket.gethostname():
        return
    pid = driver[1]

    def watch() -> None:
        while _alive(pid):
            time.sleep(WATCH_S)
        os._exit(1)  # no cleanup: the segment being written stays a temp file the next run removes

    threading.Thread(target=watch, name="sr-driver-watch", daemon=True).start()


class SrActor:
    """map_batches callable class: constructed once per actor process."""

    def __init__(self, shared: artifacts.Shared, options: dict, driver: tuple[str, int] | None = None,
                 board=None):
        import ray

        watch_driver(driver)
        self.board = board  # progress.Board: segments count their frames there
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
                bar = progress.RemoteBar(self.board, progress.segment_key(str(rel), task["segment"]["index"])) \
                    if self.board is not None else None
                rec = unit.segment(self.worker, job, task, bar)
                done, written = "timing" in rec, Path(task["file"])
            else:
                rec = unit.process(self.worker, job)
                done, written = rec["status"] == "ok", job.dst
            if done:
                remove_stale_parts([written])
            records.append(json.dumps(rec))
        n = len(records)
        return {"record": np.array(records, dtype=object), "actor": np.array([self.name] * n, dtype=object),
                "backend": np.array([f"{self.backend.describe()} ({self.choice})"] * n, dtype=object),
                "ready_at": np.full(n, self.ready_at)}
