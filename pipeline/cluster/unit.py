"""The one place the Ray actors touch the sr stage: backend loading and the per-image unit of work
(pipeline.sr.ImageWorker: decode -> tiled inference -> atomic write -> Record), used exactly as the local run
uses them, one image at a time inside an actor."""
from __future__ import annotations

from pathlib import Path

import pipeline.sr as sr
from pipeline.sr import ImageWorker, Job, RunOptions
from pipeline.sr import load_backend as _load_backend


def load_backend(name: str, model: str, precision: str, **opts):
    """(loaded backend, why it was chosen) exactly as the local run loads it."""
    return _load_backend(name, model, precision, onnx=opts.get("onnx"), engine=opts.get("engine"),
                         weights=opts.get("weights"), threads=opts.get("threads"))


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
            "jpeg_quality": opts.jpeg_quality, "reference": absolute(opts.reference),
            "weights": absolute(opts.weights), "threads": opts.threads}
