"""The one place the Ray runner touches the sr stage: its argument checks, backend loading and per-image unit of
work (pipeline.sr.ImageWorker: decode -> tiled inference -> atomic write -> Record), used exactly as the local
run uses them, one image at a time inside an actor."""
from __future__ import annotations

from pathlib import Path

from pipeline.artifacts.identity import resolve
from pipeline.backends.base import check_precision
from pipeline.backends.checks import check_scale
from pipeline.sr import ImageWorker, Job, settings
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


def check_arguments(args) -> tuple[str, float, str | None]:
    """The local run's argument checks (one PipelineError line before any work); (model, scale, format)."""
    settings.check_numbers(tile=args.tile, tile_overlap=args.tile_overlap, batch=args.batch, workers=args.workers,
                           threads=args.threads, jpeg_quality=args.jpeg_quality)
    fmt = settings.check_format(args.fmt)
    settings.check_paths(summary=args.summary, reference=args.reference, onnx=args.onnx, engine=args.engine,
                         weights=args.weights)
    check_precision(args.precision)
    model = settings.resolve_model(args.model, args.onnx, engine=args.engine)
    spec = resolve(model, args.onnx, args.engine)
    return model, check_scale(spec, spec.default_scale if args.scale is None else args.scale), fmt


def worker_options(args) -> dict:
    def absolute(path):  # actors do not run in the driver's working folder
        return str(Path(path).absolute()) if path else None

    return {"tile": args.tile, "tile_overlap": args.tile_overlap, "batch": args.batch,
            "jpeg_quality": args.jpeg_quality, "reference": absolute(args.reference),
            "weights": absolute(args.weights), "threads": args.threads}
