"""The one place the Ray runner touches the sr stage's internals: building the per-image worker and running
one job through it (decode -> tiled inference -> atomic write), returning its record as a dict.

Built on pipeline.sr.run (Runner, _decode, _encode, Record) until the sr stage exposes its per-image unit;
when it does, only this module changes."""
from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

from pipeline.errors import PipelineError, first_line
from pipeline.sr.imageio import ImageError
from pipeline.sr.jobs import Job
from pipeline.sr.run import Record, Runner, _decode, _encode, _infer_reason, check_model_and_scale, create_backend

WORKER_OPTIONS = ("tile", "tile_overlap", "batch", "jpeg_quality", "reference")


def load_backend(name: str, model: str, precision: str, **opts):
    """(loaded backend, why it was chosen) exactly as the local run loads it."""
    return create_backend(name, model, precision, opts.get("onnx"), opts.get("engine"), opts.get("weights"),
                          opts.get("threads"))


def make_worker(backend, model: str, scale: float, options: dict):
    spec, scale = check_model_and_scale(model, scale)
    args = SimpleNamespace(**{k: options.get(k) for k in WORKER_OPTIONS})
    args.batch = args.batch or 1
    args.jpeg_quality = args.jpeg_quality or 95

    def quiet(_msg: str) -> None:  # per-image lines are the driver's job; the record carries the notes
        pass

    return Runner(args, backend, spec, scale, quiet, quiet)


def job_from_row(src: str, dst: str, rel: str, fmt: str) -> Job:
    return Job(Path(src), Path(dst), rel, fmt)


def process(worker, job: Job) -> dict:
    """One image start to end on this thread; failures are the record's status and reason, never raised."""
    rec = Record(job)
    image, reason, rec.decode_s = _decode(job)
    if image is None:
        rec.status, rec.reason = "failed", reason
        return rec.as_dict()
    rec.status, rec.reason = "ok", ""
    try:
        plan, out = worker.prepare(rec, image)
    except ImageError as e:  # the output cannot be made (too large for the format or the memory)
        rec.status, rec.reason = "failed", str(e)
        return rec.as_dict()
    t0 = time.perf_counter()
    try:
        worker.run_tiled(image, plan, out)
    except Exception as e:  # an inference failure of this image only
        rec.status, rec.reason = "failed", _infer_reason(e)
        return rec.as_dict()
    rec.infer_s = time.perf_counter() - t0
    try:
        _encode(rec, out, image, worker)
    except ImageError as e:
        rec.status, rec.reason = "failed", str(e)
    except OSError as e:
        rec.status, rec.reason = "failed", f"cannot write {job.dst}: {e.strerror or e}"
    except Exception as e:  # an encoder or metrics crash on this image only
        rec.status, rec.reason = "failed", f"{type(e).__name__}: {first_line(e)}"
    return rec.as_dict()


def check_arguments(args) -> tuple[str, float, str | None]:
    """The local run's argument checks (one PipelineError line before any work); (model, scale, format)."""
    from pipeline import backends
    from pipeline.sr import imageio
    from pipeline.sr.run import PRECISIONS

    _, scale = check_model_and_scale(args.model, args.scale)
    fmt = None
    if args.fmt:
        try:
            fmt = imageio.normalize_format(args.fmt)
        except ValueError as e:
            raise PipelineError(str(e)) from None
    if args.batch < 1:
        raise PipelineError("--batch must be at least 1")
    if args.backend != "auto" and args.backend not in backends.NAMES:
        raise PipelineError(f"unknown backend '{args.backend}' (choose from: auto, {', '.join(backends.NAMES)})")
    if args.precision not in PRECISIONS:
        raise PipelineError(f"unknown precision '{args.precision}' (choose from: {', '.join(PRECISIONS)})")
    for flag, value, what in (("--onnx", args.onnx, "ONNX file"), ("--engine", args.engine, "TensorRT engine")):
        if value is not None and not Path(value).is_file():
            raise PipelineError(f"{what} not found: {value} ({flag})")
    if args.reference and not Path(args.reference).is_dir():
        raise PipelineError(f"reference folder not found: {args.reference}")
    return args.model, scale, fmt


def worker_options(args) -> dict:
    def absolute(path):  # actors do not run in the driver's working folder
        return str(Path(path).absolute()) if path else None

    return {"tile": args.tile, "tile_overlap": args.tile_overlap, "batch": args.batch,
            "jpeg_quality": args.jpeg_quality, "reference": absolute(args.reference),
            "weights": absolute(args.weights), "threads": args.threads}
