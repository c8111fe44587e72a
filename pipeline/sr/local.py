"""The local executor: the backend loaded in this process, images through the scheduler's thread pools
(pipeline.sr.scheduler), videos frame by frame (pipeline.sr.video), all around one ImageWorker."""
from __future__ import annotations

import time
from collections.abc import Callable

from pipeline import backends, quality
from pipeline.artifacts.atomic import remove_stale_parts
from pipeline.precisions import AUTO
from pipeline.sr import settings
from pipeline.sr.console import Console, scale_note
from pipeline.sr.flow import ModelChoice, Plan, Started, resolve_model
from pipeline.sr.options import OPTION_FIELDS, RunOptions
from pipeline.sr.records import Record
from pipeline.sr.scheduler import Scheduler
from pipeline.sr.worker import ImageWorker


class LocalExecutor:
    name = "local"
    takes = OPTION_FIELDS  # every option: the others' refusals say 'applies only to local runs'
    why_not = ""
    flags = ()
    takes_videos = True
    streams = False

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

    def model(self, opts: RunOptions) -> ModelChoice:
        return resolve_model(opts)

    def _load(self, model: str, scale: float, console: Console) -> tuple[backends.Backend, str, str | None]:
        """The backend, why it was chosen and, with `--precision auto`, the line that says which precision ran
        (its calibration and measurement on first use with a progress bar; the quantizer's talk under --verbose)."""
        o = self.opts
        if o.backend_name is None:  # a loaded backend was given
            return o.backend, o.backend.selection_reason or "given", None
        # the Choice (what runs, its files, why) is what a segment key or a summary is made from, as on Ray
        self.choice, loaded = backends.choose_loaded(o.request, model, scale, log=console.always,
                                                     progress=console.bar, chatter=console.detail)
        choice = loaded.selection_reason or o.backend
        picked = o.precision == AUTO and o.backend_name is not None  # its reason is the line saying which ran
        return loaded, choice, choice if picked else None

    def start(self, plan: Plan, console: Console) -> Started:
        self.opts = plan.opts  # the checked options: the --onnx file opened once
        o, m = self.opts, plan.model
        loaded, choice, auto_line = self._load(m.name, m.scale, console)
        self.stale = remove_stale_parts([r.job.dst for r in plan.todo])
        self.clips = [r for r in plan.todo if r.job.video]
        what = []
        if self.clips:  # PyAV loads only for runs with videos
            from pipeline.sr.video import plan_clips

            self.plans = plan_clips(self.clips, m.scale, o.codec, o.crf, o.audio)
            if len(plan.found.jobs) == 1 and self.plans:  # one clip: its size/crop notes go in the first line, once
                only = next(iter(self.plans.values()))
                what, only.notes_said = only.notes, True
        self.worker = ImageWorker(loaded, m.spec, m.scale, tile=o.tile, tile_overlap=o.tile_overlap, batch=o.batch,
                                  jpeg_quality=o.jpeg_quality, reference=o.reference)
        self.workers = settings.io_workers(o.workers, loaded.on_gpu)
        self.console, self.loaded, self.auto_line = console, loaded, auto_line
        on = loaded.name if loaded.precision == "fp32" else f"{loaded.name} {loaded.precision}"  # first line says it
        return Started(m.name, m.scale, on, loaded.selection_brief or choice, loaded.describe(), choice,
                       note=scale_note(m.metadata, m.scale), what=what, tile=self.worker.tile,
                       margin=self.worker.margin, batch=self.worker.batch, workers=self.workers)

    def announce(self, console: Console) -> None:
        """After the first line: the backend in full, the precision's measured cost, leftovers, tiles."""
        w = self.worker
        console.detail(f"backend: {self.loaded.describe()}; why: {self.loaded.selection_reason or self.opts.backend}")
        if self.auto_line:
            console.always(self.auto_line)
        o, scale = self.opts, self.worker.scale
        if (record := quality.precision_loss(self.loaded, log=console.always, scale=scale,
                                             progress=console.bar)) is not None:
            console.always(f"precision: {quality.loss_line(record)}")
        elif o.backend_name is not None and (hint := backends.faster_line(
                self.loaded.model_name, o.backend_name, self.loaded, scale, onnx=o.onnx, weights=o.weights)):
            console.info(hint)
        if self.stale:
            console.info(f"removed {self.stale} temp file(s) a killed earlier run left beside its outputs")
        console.detail(f"tiles: {w.tile or 'whole images'} LR px, {w.margin} HR px of context; batch "
                       f"{w.batch}; {self.workers} decode/encode worker(s)")

    def execute(self, todo: list[Record], console: Console, finished: Callable[[Record], None]) -> float:
        images = [r for r in todo if not r.job.video]
        t0 = time.perf_counter()
        if images or not self.clips:
            Scheduler(self.worker, console, self.workers).run(images)
        if self.clips:
            from pipeline.sr.video import VideoRunner

            VideoRunner(self.worker, console).run_all(self.clips, self.plans)
        return time.perf_counter() - t0

    def facts(self) -> dict:
        return {}

    def close(self) -> None:
        pass
