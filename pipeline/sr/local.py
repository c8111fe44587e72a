"""The local executor: the backend loaded in this process, images through the scheduler's thread pools
(pipeline.sr.runner.scheduler), videos frame by frame (pipeline.sr.video.clip), all around one ImageWorker."""
from __future__ import annotations

import time
from collections.abc import Callable

from pipeline import backends, quality
from pipeline.artifacts.atomic import remove_stale_parts
from pipeline.precisions import AUTO
from pipeline.sr import settings
from pipeline.sr.flow import ModelChoice, Plan, Started, resolve_model
from pipeline.sr.options import OPTION_FIELDS, RunOptions
from pipeline.sr.runner.console import Console, scale_note
from pipeline.sr.runner.records import Record
from pipeline.sr.runner.scheduler import Scheduler
from pipeline.sr.runner.worker import FOLDER_STREAMS, ImageWorker, first_sizes


class Held:
    """Lines said while the backend is chosen (an export, a calibration, a measurement), kept until the run's first
    line is out: the `sr:` line comes first, then these in the order they were said. Their progress bars still show
    on a terminal while they run (and go when done); a log's plain progress lines are kept with the rest."""

    def __init__(self):
        self.lines: list[tuple[str, str]] = []  # (the Console method that says it, the line)

    def always(self, line: str) -> None:
        self.lines.append(("always", line))

    def detail(self, line: str) -> None:
        self.lines.append(("detail", line))

    def progress(self, console: Console) -> Callable:
        """The progress-bar factory for the steps while the backend is chosen."""
        def bar(total: int | None, unit: str = "img", desc: str | None = None):
            return console.bar(total, unit, desc, write=lambda line: self.lines.append(("info", line)), leave=False)
        return bar

    def say(self, console: Console) -> None:
        for kind, line in self.lines:
            getattr(console, kind)(line)
        self.lines.clear()


class LocalExecutor:
    name = "local"
    takes = OPTION_FIELDS  # every option: the others' refusals say 'applies only to local runs'
    why_not = ""
    flags = ()
    takes_videos = True
    streams = False  # execute() returns its records (not the inference streams: run_streams)

    def __init__(self, opts: RunOptions):
        self.opts = opts
        # the cache is written only to export (or build) what no --onnx/--engine file gives; torch reads weights
        name = opts.backend_name
        makes = name == AUTO or name in backends.NAMES and not backends.backend_class(name).DESCRIPTOR.runs_weights
        self.uses_cache = makes and opts.onnx is None and opts.engine is None
        self.worker: ImageWorker | None = None
        self.choice: backends.Choice | None = None  # None: a loaded backend was given
        self.plans: dict = {}
        self.clips: list[Record] = []
        self.works: list = []  # each clip's segments (pipeline.sr.video.segments.ClipWork)
        self.video: tuple = ()  # pipeline.sr.video's clip and segments modules, for runs with videos (PyAV)
        self.serial_cpu_s = 0.0  # CPU seconds of the thread that drove inference (execute: this one)
        self.locks: dict = {}  # each clip's output lock, by name (pipeline.artifacts.lock)
        self.held = Held()
        self.record: dict | None = None  # the precision's measured loss (bf16, int8), or fp32's own baseline

    def model(self, opts: RunOptions) -> ModelChoice:
        return resolve_model(opts)

    def _load(self, model: str, scale: float, console: Console) -> tuple[backends.Backend, str, str | None]:
        """The backend, why it was chosen and, with `--precision auto`, the line that says which precision ran
        (its calibration and measurement on first use with a progress bar; the quantizer's talk under --verbose)."""
        o = self.opts
        if o.backend_name is None:  # a loaded backend was given
            return o.backend, o.backend.selection_reason or "given", None
        # the Choice (what runs, its files, why) is what a segment key or a summary is made from, as on Ray
        self.choice = backends.choose(o.request, model, scale, here=True, log=self.held.always,
                                      progress=self.held.progress(console), chatter=self.held.detail)
        loaded = backends.load(self.choice, log=self.held.always)  # the backend choose loaded, handed over
        choice = loaded.selection_reason or o.backend
        picked = o.precision == AUTO and o.backend_name is not None  # its reason is the line saying which ran
        return loaded, choice, choice if picked else None

    def start(self, plan: Plan, console: Console) -> Started:
        try:
            return self._start(plan, console)
        except BaseException:
            self.held.say(console)  # what was said before it failed, then its error
            raise

    def _quality(self, loaded: backends.Backend, scale: float, console: Console) -> str:
        """The precision's measured loss (bf16, int8) or, at fp32, the model's own scores against bicubic's (each
        measured once per file, scale and machine); the first line's note when the model is at or below bicubic
        at this scale: nothing for a lower precision to keep."""
        bar = self.held.progress(console)
        self.record = quality.precision_loss(loaded, log=self.held.always, scale=scale, progress=bar) \
            or quality.baseline(loaded, scale, log=self.held.detail, progress=bar)
        if self.record is None or not quality.adds_nothing(quality.model_gain(self.record)):
            return ""
        return f"the model is {quality.below_line(self.record)}"

    def _start(self, plan: Plan, console: Console) -> Started:
        self.opts = plan.opts  # the checked options: the --onnx file opened once
        o, m = self.opts, plan.model
        loaded, choice, auto_line = self._load(m.name, m.scale, console)
        below = self._quality(loaded, m.scale, console)
        self.clips = [r for r in plan.todo if r.job.video]
        self.workers = settings.io_workers(o.workers, not loaded.host_cores)  # the encoder's threads too
        what = []
        if self.clips:  # PyAV loads only for runs with videos
            what = self._plan_clips(plan, loaded)
        self.stale = remove_stale_parts([r.job.dst for r in plan.todo] + [f for w in self.works for f in w.files])
        # a folder of images (no clips: their frames keep the one-call path) runs on the backend's CPU streams
        images = len(plan.todo) - len(self.clips)
        self.inference_streams = loaded.run_streams(FOLDER_STREAMS if images > 1 and not self.clips else 1)
        self.worker = ImageWorker(loaded, m.spec, m.scale, tile=o.tile, tile_overlap=o.tile_overlap, batch=o.batch,
                                  jpeg_quality=o.jpeg_quality, reference=o.reference, streams=self.inference_streams,
                                  keep_metadata=not o.strip_metadata)
        self.console, self.loaded, self.auto_line = console, loaded, auto_line
        self.sizes = first_sizes([r.job.src for r in plan.todo if not r.job.video])
        on = loaded.name if loaded.precision == "fp32" else f"{loaded.name} {loaded.precision}"  # first line says it
        note = "; ".join(n for n in (scale_note(m.metadata, m.scale), below) if n)
        return Started(m.name, m.scale, on, loaded.selection_brief or choice, loaded.describe(), choice,
                       note=note, what=what, tile=self.worker.tile,
                       margin=self.worker.margin, batch=self.worker.batch, workers=self.workers)

    def _plan_clips(self, plan: Plan, loaded: backends.Backend) -> list[str]:
        """Each clip's plan and segments (its output locked for this run; with --skip-existing the segments a
        killed run finished, verified); the first line's notes for a single clip."""
        from pipeline.sr.video import clip, segments  # PyAV: imported for runs with videos only

        self.video = clip, segments
        o, m = self.opts, plan.model
        self.plans = clip.plan_clips(self.clips, m.scale, o.codec, o.crf, o.audio, o.preset)
        self.locks = locks = segments.lock_outputs(self.clips)
        choice = self.choice or backends.given(loaded, m.scale)  # a loaded backend given: its own Choice
        identity = segments.segment_identity(m.spec, o.weights, choice.key(),
                                    {"codec": o.codec, "crf": o.crf, "preset": o.preset, "audio": o.audio,
                                     "tile": o.tile, "tile_overlap": o.tile_overlap, "batch": o.batch,
                                     "encoder_threads": self.workers})
        self.works = segments.plan_work(self.clips, m.scale, identity, o.segment_seconds, 1, o.skip_existing,
                                        self.plans, locks)
        if len(plan.found.jobs) == 1 and self.plans:  # one clip: its size/crop notes go in the first line, once
            only = next(iter(self.plans.values()))
            only.notes_said = True
            return only.notes
        return []

    def announce(self, console: Console) -> None:
        """After the first line: the backend in full, the precision's measured cost, leftovers, tiles."""
        w = self.worker
        self.held.say(console)
        why = self.loaded.selection_reason or self.opts.backend
        console.always_lines(f"backend: {self.loaded.describe()}; why: {why}", verbose_only=True)
        if self.auto_line:
            console.always_lines(self.auto_line)
        o, scale = self.opts, self.worker.scale
        if quality.applies(self.loaded) and self.record is not None:
            console.always(f"precision: {quality.loss_line(self.record)}")
        elif o.backend_name is not None and (hint := backends.faster_line(
                self.loaded.model_name, o.backend_name, self.loaded, scale, onnx=o.onnx, weights=o.weights)):
            console.info(hint)
        if self.stale:
            console.info(f"removed {self.stale} temp file(s) a killed earlier run left beside its outputs")
        if self.works:  # the video modules were imported with them (_plan_clips)
            for line in self.video[1].resume_lines(self.works):
                console.info(line)
        streams = f"; {self.inference_streams} inference streams" if self.inference_streams > 1 else ""
        console.info(w.plan_line(self.sizes))
        console.detail(f"tiles: {w.tile or 'whole images'} LR px, {w.margin} HR px of context; batch "
                       f"{w.batch}; {self.workers} decode/encode worker(s){streams}")

    def execute(self, todo: list[Record], console: Console, finished: Callable[[Record], None]) -> float:
        images = [r for r in todo if not r.job.video]
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            if images or not self.clips:
                Scheduler(self.worker, console, self.workers).run(images)
            if self.clips:
                self._videos(console)
        finally:
            self.loaded.run_streams(1)  # a backend given to this run is handed back as it came
            self.serial_cpu_s = time.thread_time() - c0
        return time.perf_counter() - t0

    def _videos(self, console: Console) -> None:
        """Each clip in turn: cut into segments and joined when it is long enough to have several (a killed run
        resumes from its finished ones), else whole; a clip whose output another run holds failed in the plan."""
        clip, segments = self.video  # imported when the clips were planned
        runner = clip.VideoRunner(self.worker, console, encoder_threads=self.workers)
        works = {w.rec.job.rel: w for w in self.works}
        for rec in self.clips:
            work = works.get(rec.job.rel)
            if work is not None and len(work.segments) > 1:
                segments.run_clip(runner, work, console)
            elif work is not None:
                runner.run(rec, work.plan)
                work.release()
            if rec.status == "failed":
                console.failed(rec)

    def facts(self) -> dict:
        """Its segments, and the CPU seconds of the thread that drove inference (what cannot spread over cores)."""
        segmented = [w.fact() for w in self.works if len(w.segments) > 1]
        return ({"serial_cpu_s": round(self.serial_cpu_s, 4)} | ({"segments": segmented} if segmented else {})
                | self._quality_fact())

    def _quality_fact(self) -> dict:
        """The summary's `quality`: a lower precision's measured loss and verdict (gain_kept among them), or at
        fp32 what the model adds over bicubic at this scale."""
        if self.record is None:
            return {}
        if quality.applies(self.loaded):
            return {"quality": quality.summary(self.record)}
        gain = quality.model_gain(self.record)
        return {"quality": {"model_gain": gain, "at_or_below_bicubic": quality.adds_nothing(gain),
                            "images": self.record["images"]}}

    def close(self) -> None:
        for lock in self.locks.values():  # the outputs' locks of clips not run to the end (an error, Ctrl-C)
            lock.release()
