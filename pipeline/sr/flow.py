"""One sr run, whoever does the work: plan -> triage -> an executor -> one Summary -> one report.

    plan       every option checked, the model resolved, INPUT discovered, every place the run writes checked,
               the jobs triaged (--skip-existing, collisions): all before any image is read
    executor   only turns jobs into Records: local threads (pipeline.sr.local), a Ray cluster
               (pipeline.cluster.runner), a Triton server (pipeline.serve.client)
    report     the same first line, per-image and failure lines, done line and --summary keys for every executor

Adding an executor means writing one class with the Executor protocol below; nothing else changes. Each executor
declares the RunOptions fields it takes (`takes`): the plan refuses any other one set away from its default, before
any work, from Python as from the CLI."""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import ClassVar, Protocol

from pipeline.artifacts.identity import resolve
from pipeline.artifacts.onnx_file import onnx_metadata
from pipeline.backends.base import check_auto_engine, check_run_precision
from pipeline.backends.checks import check_scale
from pipeline.engine.sidecar import read_sidecar
from pipeline.errors import PipelineError, ReportedInterrupt, Terminated, check_choice
from pipeline.images.imageio import extensions_text
from pipeline.sr import preflight, settings, videofmt
from pipeline.sr.options import RunOptions, option_flag
from pipeline.sr.runner.console import Console, count_text, done_line, failed_line, headline, plural, rerun_line
from pipeline.sr.runner.jobs import JobList, discover, known_extensions
from pipeline.sr.runner.records import Record, RecordLog, Summary
from pipeline.sr.video.opening import header_problem


@dataclass(frozen=True)
class ModelChoice:
    """The model a run executes, resolved once from --model / --onnx / --engine / a loaded backend."""

    spec: object      # models.spec.ModelSpec
    scale: float
    metadata: dict    # what describes it (its ONNX file's metadata, an engine sidecar's copy, or its spec's)

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass
class Plan:
    opts: RunOptions
    found: JobList
    records: list[Record]           # one per job, in job order
    todo: list[Record]              # not failed up front, not skipped
    failures: list[str]             # the up-front failure lines (a collision names every input once)
    overwrites: int
    model: ModelChoice | None       # None: the executor learns it at start (a served model)
    fmt: str | None = None


@dataclass
class Started:
    """What an executor tells the run once it is ready to execute."""

    model: str
    scale: float
    where: str                      # the headline's 'on ...': a backend name, 'Triton URL', 'Ray ADDRESS'
    why: str                        # the headline's reason in a few words
    backend: str                    # the summary's backend (full description)
    choice: str                     # the summary's backend_choice
    note: str = ""                  # what a user's net does at this scale
    what: list[str] = field(default_factory=list)  # notes for the headline's 'what' (one clip's size notes)
    tile: int | None = None
    margin: int = 0
    batch: int = 1
    workers: int = 1


class ExecutorLost(Exception):
    """The executor cannot go on (a server that stopped answering): the run ends with what it finished."""


class Executor(Protocol):
    """What runs the jobs. Which RunOptions fields it takes is declared on the class, so that the plan refuses the
    others, from Python as from the CLI: `takes` names the fields it honours, `why_not` ends the refusal ('--tile
    applies only to local runs; WHY_NOT'). Its own settings (a URL, a number of actors) are its constructor's
    arguments after the RunOptions, None for their defaults; `flags` names their command-line options (argparse
    dests) in that order, the one that selects the executor first: the CLI builds it from them, and refuses the
    others without the first ('--ray-actors applies only to --ray runs')."""

    name: str                       # 'local' | 'ray' | 'triton': the summary's executor.name
    takes: ClassVar[frozenset[str]]  # the RunOptions fields it honours (the local executor: every one)
    why_not: ClassVar[str]          # why it does not take the others
    flags: ClassVar[tuple[str, ...]]  # its constructor's settings as command-line options; () for the local run
    takes_videos: bool              # False: a video in INPUT is an argument error
    streams: bool                   # True: execute() hands finished records to `finished` (not kept in memory)
    uses_cache: bool                # may write the artifact cache (export or build on first use)

    def model(self, opts: RunOptions) -> ModelChoice | None: ...

    def start(self, plan: Plan, console: Console) -> Started: ...

    def announce(self, console: Console) -> None: ...  # lines right after the first one (the precision's cost)

    def execute(self, todo: list[Record], console: Console, finished: Callable[[Record], None]) -> float: ...

    def facts(self) -> dict: ...    # the summary's executor facts; the backend it ran, once known

    def close(self) -> None: ...


def resolve_model(opts: RunOptions) -> ModelChoice:
    """--model / --onnx / --engine / the loaded backend -> the spec, the checked scale and its metadata."""
    model = settings.resolve_model(opts.model, opts.onnx, opts.backend, opts.engine)
    spec = resolve(model, opts.onnx, opts.engine)  # with --onnx/--engine, what the file says: no PyTorch needed
    scale = check_scale(spec, spec.default_scale if opts.scale is None else opts.scale)
    if opts.engine is not None:
        meta = (read_sidecar(Path(opts.engine)) or {}).get("onnx_metadata") or {}
    elif opts.onnx is not None:
        meta = onnx_metadata(opts.onnx)
    else:
        meta = spec.to_metadata()
    return ModelChoice(spec, scale, meta)


def applies_only(flags: list[str], where: str) -> str:
    """'--tile applies only to local runs' / '--threads, --tile apply only to local runs'."""
    return f"{', '.join(flags)} {'applies' if len(flags) == 1 else 'apply'} only to {where}"


def check_takes(opts: RunOptions, executor: Executor) -> None:
    """Every field set away from its default is one the executor takes (it would be ignored otherwise)."""
    given = [option_flag(f.name) for f in fields(RunOptions) if f.name not in executor.takes
             and (f.default is MISSING or getattr(opts, f.name) != f.default)]
    if given:
        raise PipelineError(f"{applies_only(given, 'local runs')}; {executor.why_not}")


def check_options(opts: RunOptions) -> tuple[str | None, RunOptions]:
    """Every option on its own, before anything is read; returns the normalised --format, and the options with
    the --onnx file opened (parsed once for the whole run)."""
    if opts.onnx is not None and opts.engine is not None:
        raise PipelineError("--onnx and --engine both name the model file to run: give one of them")
    settings.check_numbers(tile=opts.tile, tile_overlap=opts.tile_overlap, batch=opts.batch, workers=opts.workers,
                           threads=opts.threads, jpeg_quality=opts.jpeg_quality)
    fmt = settings.check_format(opts.fmt)
    videofmt.check_crf(videofmt.check_codec(opts.codec), opts.crf)
    videofmt.check_preset(opts.codec, opts.preset)
    check_choice("audio", opts.audio, videofmt.AUDIO_MODES)
    if opts.segment_seconds is not None and not opts.segment_seconds > 0:
        raise PipelineError(f"--segment-seconds must be more than 0, got {opts.segment_seconds:g}")
    check_auto_engine(opts.precision, opts.engine)
    onnx = settings.check_paths(summary=opts.summary, reference=opts.reference, onnx=opts.onnx, engine=opts.engine,
                                weights=opts.weights)
    if opts.backend_name is not None:
        check_run_precision(opts.precision, auto=True)
    elif any(v is not None for v in (opts.onnx, opts.engine, opts.weights, opts.threads)):
        raise PipelineError("onnx, engine, weights and threads choose what backend to load; "
                            "they cannot change the already-loaded backend that was given")
    return fmt, replace(opts, onnx=onnx)


def _check_inputs(found: JobList, opts: RunOptions, executor: Executor) -> None:
    """Something to do, and only what this executor takes (a clip is one sequential stream: local runs only)."""
    if not found.jobs:
        kinds = f"{known_extensions()}" if executor.takes_videos else extensions_text()
        raise PipelineError(f"no images found in {opts.input}{', nor videos' if executor.takes_videos else ''} "
                            f"(extensions: {kinds})")
    if found.videos and not executor.takes_videos:
        raise PipelineError(f"--{executor.name} upscales images; {found.videos[0].rel} is a video (run videos "
                            f"without --{executor.name})")
    for job in found.videos:  # a --codec the container cannot hold, or a --crf its codec ignores: before any work
        codec, default_for = videofmt.codec_for(job.fmt, opts.codec), None if opts.codec else job.fmt
        videofmt.check_crf(codec, opts.crf, default_for=default_for)
        videofmt.check_preset(codec, opts.preset, default_for=default_for)


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


def _refuse_big_clips(todo: list[Record]) -> list[str]:
    """Clips whose stream header is over the pixel limit fail here, before any backend loads (issue 67: a 64x48
    clip cost 898 MB of backend to refuse); their failure lines. The frames are still checked as they decode."""
    lines = []
    for rec in (r for r in todo if r.job.video):
        if big := header_problem(rec.job.src):
            rec.fail(big)
            lines.append(f"failed {rec.job.rel}: {big}")
    todo[:] = [r for r in todo if r.status != "failed"]
    return lines


def plan(opts: RunOptions, executor: Executor) -> Plan:
    """Everything that can be wrong with the arguments, found before any image is read (PipelineError)."""
    check_takes(opts, executor)
    fmt, opts = check_options(opts)
    model = executor.model(opts)
    found = discover(opts.input, opts.output, fmt, summary=opts.summary)
    _check_inputs(found, opts, executor)
    preflight.check_writable(found, opts.output, opts.summary, uses_cache=executor.uses_cache)
    records, todo, failures = triage(found, opts.skip_existing)
    failures += _refuse_big_clips(todo)
    return Plan(opts, found, records, todo, failures, preflight.overwrites(found, opts.skip_existing), model, fmt)


def _say_start(plan: Plan, started: Started, executor: Executor, console: Console, idle: bool = False) -> None:
    """The first line, then the jobs failed up front, the skipped ones and the ignored files."""
    videos = len(plan.found.videos)
    what = "; ".join([count_text(len(plan.found.jobs) - videos, videos), *started.what])
    console.always(headline(started.model, started.scale, started.note, started.where, started.why, what,
                            plan.opts.output, plan.overwrites))
    if not idle:
        executor.announce(console)
    for line in plan.failures:
        console.always(line)
    skipped = [r for r in plan.records if r.status == "skipped"]
    if skipped:
        clips = sum(r.job.video for r in skipped)
        console.info(f"skipping {count_text(len(skipped) - clips, clips)} whose output exists")


def _say_ignored(found: JobList, executor: Executor, console: Console) -> None:
    if found.ignored:
        kinds = "an image or video" if executor.takes_videos else "an image"
        console.info(f"ignored {len(found.ignored)} file(s) without {kinds} extension (e.g. {found.ignored[0]})")


def say_done(summary: Summary, console: Console, summary_path=None) -> None:
    """The closing lines of every run: reference scores, the done line with its rates, and what failed.
    `summary_path`: the --summary file, if one was asked for (where the per-image reasons are)."""
    log, ref = summary.log, summary.reference
    if ref:
        console.info(f"reference ({ref['images']} image(s)): PSNR-Y {ref['psnr']:.2f} dB "
                     f"(bicubic {ref['psnr_bicubic']:.2f}), "
                     f"SSIM-Y {ref['ssim']:.4f} (bicubic {ref['ssim_bicubic']:.4f})")
    elif summary.reference_dir is not None and log.counts["ok"]:
        console.always(f"reference: no image in {summary.reference_dir} matches an output ({log.unmatched} with no "
                       f"file of the same name, {log.counts['ok'] - log.unmatched} of another size or unreadable); "
                       "no scores (" + ("per-image reasons are in the summary" if summary_path else
                                        "--summary FILE lists each image's reason") + ")")
    console.info(done_line(summary.counts, summary.wall_s, images=log.pictures - log.frames, frames=log.frames,
                           out_mpix=log.out_mpix, process_s=summary.process_s, setup_s=summary.setup_s,
                           stages=log.video_stage_s))
    if log.rerun["tiles"]:  # written, but not by the precision asked for: always said
        console.always(rerun_line(log.rerun))
    if log.failures:
        names = [f["input"] for f in log.failures]
        console.always(failed_line(names, len(names) - log.failed_videos, log.failed_videos))


def write_summary(path: Path, result: Summary) -> None:
    """--summary at the end of the run; a failure to write it is one line (the outputs are already written)."""
    try:
        result.write(path)
    except OSError as e:
        raise PipelineError(f"cannot write --summary {path}: {e.strerror or e} (the outputs are written; "
                            f"{result.counts['ok']} ok)") from None


def _ignore(rec: Record) -> None:
    pass


def _execute(plan: Plan, executor: Executor, log: RecordLog, console: Console,
             t0: float) -> tuple[float, BaseException | None]:
    """(processing seconds, what stopped the run early: Ctrl-C / SIGTERM, or a lost executor). A streaming
    executor's records go to the log as they finish; the others fill the plan's records in place."""
    streamed = 0

    def finished(rec: Record) -> None:
        nonlocal streamed
        streamed += 1
        log.add(rec)

    try:
        return executor.execute(plan.todo, console, finished if executor.streams else _ignore), None
    except (KeyboardInterrupt, ExecutorLost) as stop:
        return time.perf_counter() - t0, stop
    finally:
        if executor.streams:
            log.counts["pending"] = len(plan.todo) - streamed
        else:
            for rec in plan.records:
                log.add(rec)


def _summary(plan: Plan, started: Started, executor: Executor, log: RecordLog, t_start: float, setup_s: float,
             process_s: float, stop: BaseException | None, idle: bool = False) -> Summary:
    facts = {} if idle else executor.facts()
    return Summary(model=started.model, scale=started.scale, backend=facts.pop("backend", started.backend),
                   backend_choice=started.choice, quality=facts.pop("quality", None),
                   executor={"name": executor.name, **facts},
                   input=str(plan.opts.input), output=str(plan.opts.output), tile=started.tile,
                   tile_margin_hr=started.margin, batch=started.batch, workers=started.workers, log=log,
                   ignored=plan.found.ignored, wall_s=time.perf_counter() - t_start, process_s=process_s,
                   setup_s=setup_s, interrupted=isinstance(stop, KeyboardInterrupt),
                   stopped=str(stop) if isinstance(stop, ExecutorLost) else "",
                   reference_dir=plan.opts.reference)


def _say_stop(summary: Summary, stop: BaseException, path, console: Console) -> None:
    """An executor lost (exit 1), or Ctrl-C / SIGTERM (raised again): what was kept, and how to finish."""
    where = f", summary in {path}" if path is not None else ""
    c = summary.counts
    if isinstance(stop, ExecutorLost):
        left = summary.log.counts["pending"]
        console.always(f"error: {stop}; {plural(c['ok'], 'image')} written, {left} not{where}; rerun with "
                       f"--skip-existing to finish")
        return
    word = "terminated" if isinstance(stop, Terminated) else "interrupted"
    kept = sum(s.get("kept", 0) for s in summary.executor.get("segments", []))  # of clips not written
    segs = (f", {plural(kept, 'finished segment')} of {'it' if c['not_done'] == 1 else 'them'} kept"
            if kept else "")
    console.always(f"{word}: {c['ok']} file(s) written (complete), {c['not_done']} not done{segs}{where}"
                   f"; to finish, run the same command again with --skip-existing"
                   + (" (it takes the kept segments)" if kept else ""))
    raise ReportedInterrupt(stop)


def _idle_start(p: Plan) -> Started:
    """The first line's facts of a run with nothing to upscale: no backend was loaded."""
    return Started(p.model.name, p.model.scale, "no backend", "nothing to upscale", "", "not loaded")


def run(opts: RunOptions, executor: Executor, after: Callable[[Summary, Console], None] | None = None) -> Summary:
    """Plan, start the executor, execute, summarise and report; returns the Summary (`summary.exit_code`: 1 when
    something failed or the executor was lost). `after` adds to the report of a finished run (sr's --reference
    sheet)."""
    t_start = time.perf_counter()
    console = Console(opts.progress, opts.log, opts.verbose)
    p = plan(opts, executor)
    log = RecordLog(keep=not executor.streams, spool_beside=opts.summary)
    # every job failed up front (e.g. clips over the pixel limit): nothing is upscaled, so no backend loads
    idle = p.model is not None and not p.todo and bool(p.failures) and not any(r.status == "skipped"
                                                                                  for r in p.records)
    try:
        started = _idle_start(p) if idle else executor.start(p, console)
        _say_start(p, started, executor, console, idle)
        _say_ignored(p.found, executor, console)
        if executor.streams or idle:  # the records done up front go first; the executor's arrive as they finish
            for rec in p.records:
                if rec.status != "pending":
                    log.add(rec)
        setup_s = time.perf_counter() - t_start
        process_s, stop = (0.0, None) if idle else _execute(p, executor, log, console, t_start + setup_s)
        summary = _summary(p, started, executor, log, t_start, setup_s, process_s, stop, idle)
        if opts.summary is not None:
            write_summary(Path(opts.summary), summary)
    finally:
        executor.close()
        log.close()
    if stop is not None:
        _say_stop(summary, stop, opts.summary, console)
        return summary
    say_done(summary, console, opts.summary)
    if after is not None:
        after(summary, console)
    return summary
