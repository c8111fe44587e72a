"""`python -m pipeline sr INPUT OUTPUT --ray [ADDRESS]`: the Ray executor of an sr run (pipeline.sr.flow).

The run plans exactly as a local one (same checks, jobs, output tree, --skip-existing and up-front failures); this
executor chooses once on the driver (pipeline.backends.choose: the model files made there, `--precision auto` timed
there) and ships that Choice with exactly its files to every actor, then streams the job rows through Ray Data
into a pool of SrActor (one backend each, one GPU each when the cluster has GPUs); the actors write the results
into OUTPUT, which must be a path every node sees. Records stream back into the run's RecordLog (the driver keeps
counts, not records). Ray retries the batches of an actor that dies on a restarted actor.

A clip is cut into segments at keyframes (pipeline.sr's segment plan); each segment is one task on the same actors,
written as a segment file beside its output; once a clip's segments are all in, the driver joins them by stream
copy into the clip's output (with the source's audio and subtitles) and removes them. With --skip-existing the
segments a killed run finished are taken as they are."""
from __future__ import annotations

import json
import math
import os
import socket
import time
import warnings
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from pipeline import backends, quality, sr
from pipeline.artifacts.atomic import remove_stale_parts
from pipeline.cluster import artifacts, connect, progress, unit
from pipeline.cluster.actor import SrActor
from pipeline.errors import PipelineError, first_line
from pipeline.precisions import AUTO, DEFAULT
from pipeline.sr import OPTION_FIELDS, ModelChoice, Plan, Record, RunOptions, Started, resolve_model

if TYPE_CHECKING:
    from pipeline.sr.runner.console import Console

TASKS_PER_ACTOR = 4   # batches queued per actor: enough to keep it busy, few to redo when it dies
MAX_BATCH = 32        # images per Ray task: amortises Ray's per-task cost on small images


def _pool(ray, n_rows: int, actors: int, cluster: connect.Cluster, ctor: dict, segments: bool):
    # a segment is a long task of its own: one row per batch, so a free actor takes the next one
    batch = 1 if segments else max(1, min(MAX_BATCH, math.ceil(n_rows / (actors * TASKS_PER_ACTOR))))
    per_actor = {"num_gpus": 1} if cluster.gpus > 0 else {"num_cpus": 1}
    # no more actors than tasks: a resumed run with a few images left started idle actors (and Ray warned so)
    size = max(1, min(actors, math.ceil(n_rows / batch)))
    return dict(fn_constructor_kwargs=ctor, compute=ray.data.ActorPoolStrategy(size=size), batch_size=batch,
                batch_format="numpy", **per_actor)


def _cause(e: BaseException) -> str:
    """The user's error inside Ray's wrappers (RayTaskError, ActorDiedError), in one line."""
    for attr in ("cause", "__cause__"):
        inner = getattr(e, attr, None)
        if isinstance(inner, BaseException) and inner is not e:
            return _cause(inner)
    return first_line(e)


class RayExecutor:
    name = "ray"
    takes_videos = True   # each clip cut into segments at keyframes, joined by stream copy on the driver
    streams = True
    uses_cache = False    # the driver checks the cache when choose() makes the files
    takes = OPTION_FIELDS - {"workers"}  # as a local run's, but an actor decodes and encodes its own images
    why_not = "with --ray each actor reads and writes one image at a time"
    flags = ("ray", "ray_actors")

    def __init__(self, opts: RunOptions, address: str, actors: int | None):
        if actors is not None and actors < 1:
            raise PipelineError("--ray-actors must be at least 1")
        self.opts, self.address, self.actors = opts, address, actors
        self.cluster: connect.Cluster | None = None
        self.ray = None  # the ray module, once a cluster is started (a run with nothing left to do starts none)
        self._facts: dict = {}
        self.auto_line = ""
        self.choice: backends.Choice | None = None  # the driver's, once started
        self.clips: list = []
        self.unusable: list[Record] = []
        self.stale = 0
        self.clip_plans: dict = {}
        self.locks: dict = {}  # each clip's output lock, by name (pipeline.artifacts.lock)

    def model(self, opts: RunOptions) -> ModelChoice:
        if opts.backend_name is None:  # asked in the plan: before the cluster starts
            raise PipelineError("a Ray run's actors each load their backend by name ('auto', 'ort', ...): a backend "
                                "loaded in this process cannot be sent to them; give its name")
        return resolve_model(opts)

    def _choose(self, model: str, scale: float, console: Console) -> backends.Choice:
        """The driver chooses once (`--precision auto` timed and measured here, `--backend auto` picked here) and
        every actor loads that Choice; on a CPU cluster each actor runs one thread unless --threads says."""
        request = self.opts.request
        if self.cluster.gpus == 0 and request.threads is None:
            request = replace(request, threads=1)  # one CPU per actor: more threads would fight the other actors
        choice = backends.choose(request, model, scale, log=console.always, progress=console.bar,
                                 chatter=console.detail)
        if request.precision == AUTO:
            self.auto_line = choice.why
        return choice

    def _plan_clips(self, plan: Plan, identity: dict, actors: int) -> list[str]:
        """Every clip's segments (and the ones a killed run finished, with --skip-existing); the first line's notes
        for a single clip."""
        clips = [r for r in plan.todo if r.job.video]
        self.clips = sr.plan_work(clips, plan.model.scale, identity, self.opts.segment_seconds, actors,
                                  self.opts.skip_existing, self.clip_plans, self.locks)
        self.unusable = [r for r in clips if r.status == "failed"]  # no usable video: said, not run
        plan.todo[:] = [r for r in plan.todo if r.status != "failed"]
        # temp files a killed earlier driver (its join) or actor (a segment) left; not the finished segments
        self.stale = remove_stale_parts([f for c in self.clips for f in (c.rec.job.dst, *c.files)])
        if len(plan.found.jobs) == 1 and self.clips:  # one clip: its size notes in the first line, as a local run's
            self.clips[0].plan.notes_said = True
            return self.clips[0].plan.notes
        return []

    def _idle(self, plan: Plan) -> Started:
        """Nothing left for actors (a rerun with --skip-existing after a finished run): no cluster is started, no
        file exported or shared."""
        self.jobs, self.n_actors, self.scale = {}, 0, plan.model.scale
        self._facts = {"address": None, "actors": 0, "artifacts": []}
        return Started(plan.model.name, plan.model.scale, "Ray", "not started: nothing left to do", "none",
                       "nothing left to do", tile=self.opts.tile, workers=0)

    def start(self, plan: Plan, console: Console) -> Started:
        self.opts = plan.opts  # the checked options: the --onnx file opened once
        o, m = self.opts, plan.model
        if not plan.todo:
            return self._idle(plan)
        clips = [r for r in plan.todo if r.job.video]
        if clips:  # PyAV loads only for runs with videos; every clip probed, checked and locked before Ray starts
            self.clip_plans = sr.plan_clips(clips, m.scale, o.codec, o.crf, o.audio, o.preset)
            self.locks = sr.lock_outputs(clips)
        ray = connect.import_ray()
        self.cluster = cluster = connect.connect(self.address)
        self.choice = choice = self._choose(m.name, m.scale, console)
        shared = artifacts.prepare(ray, choice)
        actors = self.actors or max(1, int(cluster.gpus or cluster.cpus))
        options = unit.worker_options(o)
        self.ctor = dict(shared=shared, options=options, driver=(socket.gethostname(), os.getpid()))
        self.ray, self.n_actors, self.scale = ray, actors, m.scale
        self.jobs = {r.job.rel: r.job for r in plan.todo if not r.job.video}
        what = []
        if clips:  # what makes a segment, so that none of another run's is taken
            identity = sr.segment_identity(m.spec, o.weights, choice.key(), {**options, "codec": o.codec,
                                           "crf": o.crf, "preset": o.preset, "audio": o.audio,
                                           "encoder_threads": self._encoder_threads()})
            what = self._plan_clips(plan, identity, actors)
        self._facts = {"address": cluster.address, "actors": actors, "artifacts": shared.describe()}
        why = (f"precision auto picked {choice.runs} on the driver, the fastest within its quality budget here"
               if o.precision == AUTO else choice.brief)
        return Started(m.name, m.scale, f"Ray {cluster.address}",
                       f"{cluster.cpus:g} CPU, {cluster.gpus:g} GPU, {actors} actor(s), backend {choice.backend}"
                       + (f" {choice.precision}" if choice.precision != DEFAULT else "") + f": {why}",
                       choice.backend, choice.why, what=what, tile=o.tile,
                       batch=o.batch if isinstance(o.batch, int) else 1, workers=actors)

    def announce(self, console: Console) -> None:
        if self.auto_line:
            console.always_lines(self.auto_line)
        elif self.choice is not None and self.choice.why != self.choice.brief:
            console.always_lines(self.choice.why, verbose_only=True)  # the first line said it in a few words
        if self.choice is not None and self.choice.quality is not None:  # the loss it stands on, as a local run says
            console.always(f"precision: {quality.loss_line(self.choice.quality)}")
        for rec in self.unusable:
            console.failed(rec)
        for c in self.clips:
            console.info(f"{c.rec.job.rel}: {c.plan.describe(self.scale)}; {len(c.segments)} segment(s)")
            for n in [] if c.plan.notes_said else c.plan.notes:
                console.info(f"{c.rec.job.rel}: {n}")
        if self.stale:
            console.info(f"removed {self.stale} temp file(s) a killed earlier run left beside its outputs")
        for line in sr.resume_lines(self.clips):
            console.info(line)

    def _encoder_threads(self) -> int:
        """An actor's encoder threads: its inference threads where they are set (one CPU per actor on a CPU-only
        cluster), else FFmpeg's choice (0)."""
        return dict(self.choice.options).get("threads") or 0

    def _rows(self, todo: list[Record]) -> list[dict]:
        """One row per image and per clip segment still to do (absolute paths: actors do not run in the driver's
        working folder)."""
        o = self.opts
        rows = [{"src": str(r.job.src.absolute()), "dst": str(r.job.dst.absolute()), "rel": r.job.rel,
                 "fmt": r.job.fmt, "segment": ""} for r in todo if not r.job.video]
        for c in self.clips:
            job = c.rec.job
            for seg, f in c.todo():
                task = {"segment": seg.to_json(), "file": str(f.absolute()), "codec": o.codec, "crf": o.crf,
                        "preset": o.preset, "audio": o.audio, "key": c.key,
                        "encoder_threads": self._encoder_threads()}
                rows.append({"src": str(job.src.absolute()), "dst": str(job.dst.absolute()), "rel": job.rel,
                             "fmt": job.fmt, "segment": json.dumps(task)})
        return rows

    def _clip_done(self, clip, console: Console, finished: Callable[[Record], None]) -> None:
        """A clip whose segments are all in: joined into its output, its record into the run."""
        since = self.ready if math.isfinite(self.ready) else self.t_start  # as a local clip: from the backend ready
        clip.finish(time.time() - since)
        finished(clip.rec)
        if clip.rec.status == "failed":
            console.failed(clip.rec)
        else:
            console.info(f"{clip.rec.job.rel}: {clip.rec.video['frames']} frames in {len(clip.segments)} "
                         f"segment(s) joined into {clip.rec.job.dst}")

    def _take(self, d: dict, console: Console, finished: Callable[[Record], None], bar) -> float:
        """One actor's answer into the run: an image's record, or a segment's result (its clip joined when it is
        the last); returns the output megapixels it adds."""
        if "index" not in d:
            rec = Record.from_dict(d, self.jobs.pop(d["input"]))
            finished(rec)
            if rec.status == "failed":
                console.failed(rec)
            elif rec.in_size:
                console.written(rec, self.scale)
            bar.update(1)
            return rec.out_mpix
        clip = self.by_rel[d["record"]["input"]]
        clip.results[d["index"]] = d
        frames = len(d.get("timing", []))
        bar.update(frames, progress.segment_key(clip.rec.job.rel, d["index"]))
        if clip.done:
            self._clip_done(clip, console, finished)
        w, h = clip.plan.width, clip.plan.height
        return w * h * frames / 1e6

    def _stream(self, ds, console: Console, finished: Callable[[Record], None], bar, seen: dict) -> float:
        """Records into the run and the bar as they come; returns when the first actor was ready (wall clock)."""
        with warnings.catch_warnings():
            # Ray Data's advice to raise override_num_blocks when a run has fewer input blocks than actors: with the
            # pool no larger than its tasks (_pool), what remains is how Ray cut the rows into blocks, not the user's
            warnings.filterwarnings("ignore", message="The minimum number of concurrent actors")
            return self._stream_batches(ds, console, finished, bar, seen)

    def _stream_batches(self, ds, console: Console, finished: Callable[[Record], None], bar, seen: dict) -> float:
        ready, started, mpix = math.inf, time.perf_counter(), 0.0
        for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
            ready = self.ready = min(ready, float(batch["ready_at"].min()))
            for rec_json, actor, backend in zip(batch["record"], batch["actor"], batch["backend"], strict=True):
                seen.setdefault(str(actor), str(backend))
                mpix += self._take(json.loads(rec_json), console, finished, bar)
            bar.set_postfix_str(f"{mpix / max(time.perf_counter() - started, 1e-9):.2f} MPix/s", refresh=False)
        return ready

    def execute(self, todo: list[Record], console: Console, finished: Callable[[Record], None]) -> float:
        seen: dict[str, str] = {}
        t0 = ready = self.t_start = time.time()
        self.ready = math.inf
        rows = self._rows(todo)
        self.by_rel = {c.rec.job.rel: c for c in self.clips}
        # the local run's: a tqdm bar on a terminal, plain lines in a log; a clip counts its frames
        frames = sum(c.plan.info.frames or 0 for c in self.clips)
        shown = console.bar(len(self.jobs) + frames, unit="picture" if self.clips else "img")
        board = self.ray.remote(num_cpus=0)(progress.Board).remote() if self.clips else None
        reused = sum(len(r["timing"]) for c in self.clips for r in c.results.values())  # a killed run's frames
        bar = progress.DriverBar(self.ray, board, shown, reused)
        try:
            for clip in [c for c in self.clips if c.done]:  # every segment made by a killed earlier run
                self._clip_done(clip, console, finished)
            if rows:
                segments = any(r["segment"] for r in rows)
                ds = self.ray.data.from_items(rows).map_batches(
                    SrActor, **_pool(self.ray, len(rows), self.n_actors, self.cluster, {**self.ctor, "board": board},
                                     segments))
                try:
                    ready = self._stream(ds, console, finished, bar, seen)
                    ready = ready if math.isfinite(ready) else t0
                except Exception as e:  # an actor that cannot start (backend missing on a node, ...): one line
                    raise PipelineError(f"the Ray run failed: {_cause(e)}") from None
        finally:
            bar.stop()
            shown.close()
        if self.clips:
            self._facts["segments"] = [c.fact() for c in self.clips]
        self._facts.update(backend="; ".join(sorted(set(seen.values()))), actor_processes=sorted(seen),
                           actor_start_s=round(max(0.0, ready - t0), 3) if rows else 0.0)
        # processing: from the first actor ready to the last record, as the local run's process_s
        return max(0.0, time.time() - (ready if rows else t0))

    def facts(self) -> dict:
        """The run's facts; `quality`: the measured loss the driver's choice stands on, as a local run gives it."""
        held = self.choice.quality if self.choice is not None else None
        return dict(self._facts) | ({"quality": quality.summary(held)} if held is not None else {})

    def close(self) -> None:
        for lock in self.locks.values():  # the outputs' locks of clips not joined (an error, Ctrl-C)
            lock.release()
        if self.cluster is not None:
            connect.disconnect()
            self.cluster = None
