"""The one place the Ray actors touch the backends and the sr stage: loading the driver's Choice and the per-image
unit of work (pipeline.sr.ImageWorker: decode -> tiled inference -> atomic write -> Record), used exactly as the
local run uses them, one image at a time inside an actor."""
from __future__ import annotations

from pathlib import Path

import pipeline.sr as sr
from pipeline import backends
from pipeline.sr import ImageWorker, Job, RunOptions


def load(choice: backends.Choice) -> backends.Backend:
    """The backend the driver chose, loaded as the local run loads it (pipeline.backends.load)."""
    return backends.load(choice)


def make_worker(backend, model: str, scale: float, options: dict) -> ImageWorker:
    return ImageWorker(backend, model, scale, tile=options.get("tile"), tile_overlap=options.get("tile_overlap"),
                       batch=options.get("batch") or 1, jpeg_quality=options.get("jpeg_quality") or 95,
                       reference=options.get("reference"))


def job_from_row(src: str, dst: str, rel: str, fmt: str) -> Job:
    return Job(Path(src), Path(dst), rel, fmt)


def process(worker: ImageWorker, job: Job) -> dict:
    """One image start to end on this thread; failures are the record's status and reason, never raised."""
    return worker.process(job).as_dict()


def segment(worker: ImageWorker, job: Job, task: dict, bar=None) -> dict:
    """One segment of a clip into its file beside the output (pipeline.sr's segment unit); never raises for the
    clip's own problems. `bar`: what counts its frames as they are written (progress.RemoteBar)."""
    return sr.run_segment(worker, job, task, bar)


def worker_options(opts: RunOptions) -> dict:
    """What each actor's worker needs from the run's options (plain values: they travel to the actors)."""
    def absolute(path):  # actors do not run in the driver's working folder
        return str(Path(path).absolute()) if path else None

    return {"tile": opts.tile, "tile_overlap": opts.tile_overlap, "batch": opts.batch,
            "jpeg_quality": opts.jpeg_quality, "reference": absolute(opts.reference)}
