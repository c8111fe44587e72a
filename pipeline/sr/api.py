"""`upscale(INPUT, OUTPUT, ...) -> Summary`: the sr stage's Python API (`python -m pipeline sr` calls it).

Flow: check every option and find the jobs (pipeline.sr.settings, pipeline.sr.jobs), check every place the run
writes (pipeline.sr.preflight) -> load the backend (pipeline.backends; 'auto' picks one and says why) -> run the
images (pipeline.sr.scheduler around a pipeline.sr.worker.ImageWorker) -> Summary (and the --summary JSON).
Everything that can be wrong with the arguments fails before any image is read; one bad image never stops the run
(it is a failed record).
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from pipeline import backends
from pipeline.analysis import quality
from pipeline.artifacts.atomic import atomic_write, remove_stale_parts
from pipeline.artifacts.identity import resolve
from pipeline.artifacts.onnx_file import onnx_metadata
from pipeline.backends.base import check_run_precision
from pipeline.backends.checks import check_scale
from pipeline.engine.sidecar import read_sidecar
from pipeline.errors import PipelineError, ReportedInterrupt, Terminated, check_choice
from pipeline.htmlreport import write_html
from pipeline.sr import preflight, settings, videofmt
from pipeline.sr.bicubic import bicubic
from pipeline.sr.console import Console, count_text, done_line, failed_line, headline, scale_note
from pipeline.sr.jobs import JobList, discover, known_extensions
from pipeline.sr.records import Record, Summary
from pipeline.sr.reference import MISSING
from pipeline.sr.scheduler import Scheduler
from pipeline.sr.worker import ImageWorker


def load_backend(backend, model: str, precision: str, *, onnx=None, engine=None, weights=None,
                 threads=None, log=None) -> tuple[backends.Backend, str]:
    """A loaded backend and why it was chosen; `backend` is a name ('auto', 'ort', ...) or a loaded one.
    `log` gets the slow steps of loading (an export into the cache on first use, an engine build)."""
    if not isinstance(backend, str):
        return backend, backend.selection_reason or "given"
    opts = {k: v for k, v in (("onnx", onnx), ("engine", engine), ("weights", weights), ("threads", threads),
                              ("log", log)) if v is not None}
    loaded = backends.create(backend, model, precision, **opts)
    return loaded, loaded.selection_reason or backend


def _load(backend, model, precision: str, console: Console, **opts) -> tuple[backends.Backend, str, str | None]:
    """load_backend, or with `--precision auto` the fastest precision within its quality budget (and the line
    that says why)."""
    if precision == "auto" and isinstance(backend, str):
        given = {k: v for k, v in opts.items() if v is not None and k != "engine"}
        loaded, why = quality.pick_precision(backend, model, log=console.always, **given)
        return loaded, loaded.selection_reason or backend, why
    return (*load_backend(backend, model, precision, log=console.always, **opts), None)


def _say_precision(loaded: backends.Backend, auto_line: str | None, console: Console) -> None:
    """After the first line: why `auto` chose this precision, and what a lower precision costs (measured)."""
    if auto_line:
        console.always(auto_line)
    if (record := quality.precision_loss(loaded, log=console.always)) is not None:
        console.always(f"precision: {quality.loss_line(record)}")
    elif (hint := quality.fp32_hint(loaded)) is not None:
        console.always(hint)


def _model_metadata(spec, onnx, engine) -> dict[str, str]:
    """What describes the model: its ONNX file's metadata, an engine's sidecar copy of it, else its spec's."""
    if engine is not None:
        return (read_sidecar(Path(engine)) or {}).get("onnx_metadata") or {}
    if onnx is not None:
        return onnx_metadata(Path(onnx))
    return spec.to_metadata()


def triage(found: JobList, skip_existing: bool) -> tuple[list[Record], list[Record], list[str]]:
    """Records for every job, those still to do (not failed up front, not skipped), and the failure lines to print
    after the first line (a collision names every input in its one line)."""
    records = [Record(j) for j in found.jobs]
    todo, said = [], {}
    for rec in records:
        if rec.job.problem:
            rec.fail(rec.job.problem)
            said.setdefault(rec.reason, f"failed {rec.job.rel}: {rec.reason}")
        elif skip_existing and rec.job.dst.exists():
            rec.status, rec.reason = "skipped", "output exists"
        else:
            todo.append(rec)
    return records, todo, list(said.values())


def say_triage(records: list[Record], failures: list[str], console: Console) -> None:
    """After the first line: the jobs failed up front, and how many were skipped."""
    for line in failures:
        console.always(line)
    skipped = [r for r in records if r.status == "skipped"]
    if skipped:
        videos = sum(r.job.video for r in skipped)
        console.info(f"skipping {count_text(len(skipped) - videos, videos)} whose output exists")


def report_run(summary: Summary, reference, console: Console) -> None:
    """The closing lines: reference scores, the done line with its rates, and what failed."""
    ref = summary.reference
    if ref:
        console.info(f"reference ({ref['images']} image(s)): PSNR-Y {ref['psnr']:.2f} dB "
                     f"(bicubic {ref['psnr_bicubic']:.2f}), "
                     f"SSIM-Y {ref['ssim']:.4f} (bicubic {ref['ssim_bicubic']:.4f})")
    elif reference is not None and summary.ok:
        missing = sum(r.metrics.get("reference") == MISSING for r in summary.ok)
        console.always(f"reference: no image in {reference} matches an output ({missing} with no file of the same "
                       f"name, {len(summary.ok) - missing} of another size or unreadable); no scores "
                       f"(per-image reasons are in the summary)")
    frames = sum(r.pictures for r in summary.ok if r.job.video)
    console.info(done_line(summary.counts, summary.wall_s, images=summary.pictures - frames, frames=frames,
                           out_mpix=summary.out_mpix, process_s=summary.process_s, setup_s=summary.setup_s))
    failed = summary.failed
    if failed:
        videos = sum(r.job.video for r in failed)
        console.always(failed_line([r.job.rel for r in failed], len(failed) - videos, videos))


def write_summary(path: Path, result: Summary) -> None:
    """--summary at the end of the run; a failure to write it is one line (the outputs are already written)."""
    try:
        atomic_write(path, json.dumps(result.to_dict(), indent=2) + "\n")
    except OSError as e:
        raise PipelineError(f"cannot write --summary {path}: {e.strerror or e} (the outputs are written; "
                            f"{result.counts['ok']} ok)") from None


def _reference_sheet(result: Summary, output: Path, console: Console) -> None:
    """One scored image's crops side by side, with the outputs, and the same as before/after sliders in a page
    (reference-sheet.html); metrics import only with --reference."""
    from pipeline.analysis import sheet

    png = sheet.for_sr_run(result, output, sheet.from_float(bicubic))
    if png is None:
        return
    ref = result.reference
    md = (f"# sr --reference: {result.model} x{result.scale:g}\n\nMean over {ref['images']} scored image(s): "
          f"PSNR-Y {ref['psnr']:.2f} dB (bicubic {ref['psnr_bicubic']:.2f} dB), SSIM-Y {ref['ssim']:.4f} "
          f"(bicubic {ref['ssim_bicubic']:.4f}); crops of the first scored image below.\n")
    console.info(f"sheet: {png}; in a browser: {write_html(png.with_suffix('.md'), md, sheets=[png])}")


def upscale(input: str | Path, output: str | Path, *, model: str | None = None, scale: float | None = None,
            backend: str | backends.Backend = "auto", precision: str = "fp32", onnx=None, engine=None, weights=None,
            threads: int | None = None, fmt: str | None = None, jpeg_quality: int = 95, tile: int | None = None,
            tile_overlap: int | None = None, batch: int | str = 1, workers: int | None = None,
            skip_existing: bool = False, reference=None, summary=None, progress: bool = True, verbose: bool = False,
            codec: str | None = None, crf: int | None = None, audio: str = "copy",
            log: Callable[[str], object] | None = None) -> Summary:
    """Super-resolve an image or a folder tree (OUTPUT mirrors it) and return the run's Summary.

    model: registered name; by default the one `backend` (if loaded) or `onnx` was made for, else srcnn.
    backend: a name ('auto' picks the fastest available and says why) or an already-loaded Backend
    (then onnx/engine/weights/threads/precision do not apply: it is used as it is).
    codec/crf: how videos are encoded (pipeline.sr.videofmt; default: H.264 at a high-quality CRF, lossless FFV1
    for .mkv, VP9 for .webm); images ignore them. audio: 'copy' (a stream the output container cannot hold is an
    error before any work) or 'drop'.
    tile: LR tile side, 0 = never tile, None = from free memory (a device backend's own). batch: images or
    tiles of one size per call, or 'auto' (the most that fit on a device, capped; 1 on the host). workers:
    decode/encode threads, None = every usable core with a device backend, else 2. progress=False hides the bar and
    per-image lines (the header and failures still go out); verbose adds the backend's full description and
    reasons. log: where lines go (default: stderr). Argument problems, unwritable outputs included, raise
    PipelineError before any work; per-image failures are in the Summary. On KeyboardInterrupt the images done
    are kept, --summary is written for them and the interrupt is raised again.
    """
    t_start = time.perf_counter()
    console = Console(progress, log, verbose)
    settings.check_numbers(tile=tile, tile_overlap=tile_overlap, batch=batch, workers=workers, threads=threads,
                           jpeg_quality=jpeg_quality)
    fmt = settings.check_format(fmt)
    videofmt.check_crf(videofmt.check_codec(codec), crf)
    check_choice("audio", audio, videofmt.AUDIO_MODES)
    if precision == "auto" and engine is not None:
        raise PipelineError("--precision auto chooses among the ONNX backends; an engine's precision is built in")
    settings.check_paths(summary=summary, reference=reference, onnx=onnx, engine=engine, weights=weights)
    if isinstance(backend, str):
        check_run_precision(precision, auto=True)
    elif any(v is not None for v in (onnx, engine, weights, threads)):
        raise PipelineError("onnx, engine, weights and threads choose what backend to load; "
                            "they cannot change the already-loaded backend that was given")
    model = settings.resolve_model(model, onnx, backend, engine)
    spec = resolve(model, onnx, engine)  # with --onnx/--engine, what the file says: no PyTorch needed
    scale = check_scale(spec, spec.default_scale if scale is None else scale)
    found = discover(input, output, fmt, summary=summary)
    if not found.jobs:
        raise PipelineError(f"no images found in {input}, nor videos (extensions: {known_extensions()})")
    for job in found.videos:  # a --codec the container cannot hold, or a --crf its codec ignores: before any work
        videofmt.check_crf(videofmt.codec_for(job.fmt, codec), crf, default_for=None if codec else job.fmt)
    # the cache is written only to export (or build) what no --onnx/--engine file gives; torch reads the weights
    preflight.check_writable(found, output, summary, uses_cache=isinstance(backend, str) and backend != "torch"
                             and onnx is None and engine is None)
    overwrites = preflight.overwrites(found, skip_existing)

    loaded, choice, auto_line = _load(backend, model, precision, console, onnx=onnx, engine=engine,
                                      weights=weights, threads=threads)
    note = scale_note(_model_metadata(spec, onnx, engine), scale)
    videos = len(found.videos)
    what = count_text(len(found.jobs) - videos, videos)
    records, todo, failures = triage(found, skip_existing)
    stale = remove_stale_parts([r.job.dst for r in todo])
    clips = [r for r in todo if r.job.video]
    if clips:  # PyAV loads only for runs with videos
        from pipeline.sr.video import VideoRunner, plan_clips

        plans = plan_clips(clips, scale, codec, crf, audio)
        if len(found.jobs) == 1 and plans:  # one clip: its size/crop notes belong in the first line, once
            only = next(iter(plans.values()))
            what, only.notes_said = "; ".join([what, *only.notes]), True
    console.always(headline(spec.name, scale, note, loaded.name, loaded.selection_brief or choice,
                            what, output, overwrites))
    console.detail(f"backend: {loaded.describe()}; why: {choice}")
    _say_precision(loaded, auto_line, console)
    say_triage(records, failures, console)
    if stale:
        console.info(f"removed {stale} temp file(s) a killed earlier run left beside its outputs")
    if found.ignored:
        console.info(f"ignored {len(found.ignored)} file(s) without an image or video extension "
                     f"(e.g. {found.ignored[0]})")
    worker = ImageWorker(loaded, spec, scale, tile=tile, tile_overlap=tile_overlap, batch=batch,
                         jpeg_quality=jpeg_quality, reference=reference)
    workers = settings.io_workers(workers, loaded.on_gpu)
    console.detail(f"tiles: {worker.tile or 'whole images'} LR px, {worker.margin} HR px of context; batch "
                   f"{worker.batch}; {workers} decode/encode worker(s)")
    setup_s = time.perf_counter() - t_start
    interrupted: KeyboardInterrupt | None = None  # Ctrl-C, or SIGTERM (the CLI raises its subclass)
    images = [r for r in todo if not r.job.video]
    try:
        process_s = Scheduler(worker, console, workers).run(images) if images or not clips else 0.0
        if clips:
            process_s += VideoRunner(worker, console).run_all(clips, plans)
    except KeyboardInterrupt as stop:
        interrupted, process_s = stop, time.perf_counter() - t_start - setup_s

    result = Summary(model=spec.name, scale=scale, backend=loaded.describe(), backend_choice=choice,
                     input=str(input), output=str(output), tile=worker.tile, tile_margin_hr=worker.margin,
                     batch=worker.batch, workers=workers, records=records, ignored=found.ignored,
                     wall_s=time.perf_counter() - t_start, process_s=process_s, setup_s=setup_s,
                     interrupted=interrupted is not None)
    if summary is not None:
        write_summary(Path(summary), result)
    if interrupted is not None:
        c = result.counts
        word = "terminated" if isinstance(interrupted, Terminated) else "interrupted"
        console.always(f"{word}: {c['ok']} file(s) written (complete), {c['not_done']} not done"
                       + (f", summary in {summary}" if summary is not None else "")
                       + "; to finish, run the same command again with --skip-existing")
        raise ReportedInterrupt(interrupted)
    report_run(result, reference, console)
    if result.reference:
        _reference_sheet(result, Path(output), console)
    return result
