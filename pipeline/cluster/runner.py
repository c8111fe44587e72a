"""`python -m pipeline sr INPUT OUTPUT --ray [ADDRESS]`: the Ray executor of an sr run (pipeline.sr.flow).

The run plans exactly as a local one (same checks, jobs, output tree, --skip-existing and up-front failures); this
executor makes the model files once on the driver, then streams the job rows through Ray Data into a pool of
SrActor (one backend each, one GPU each when the cluster has GPUs); the actors write the results into OUTPUT,
which must be a path every node sees. Records stream back into the run's RecordLog (the driver keeps counts, not
records). Ray retries the batches of an actor that dies on a restarted actor."""
from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from pipeline.backends import pick_auto
from pipeline.cluster import artifacts, connect, unit
from pipeline.cluster.actor import SrActor
from pipeline.errors import PipelineError, first_line
from pipeline.sr import ModelChoice, Plan, Record, RunOptions, Started, resolve_model

if TYPE_CHECKING:
    from pipeline.sr.console import Console

TASKS_PER_ACTOR = 4   # batches queued per actor: enough to keep it busy, few to redo when it dies
MAX_BATCH = 32        # images per Ray task: amortises Ray's per-task cost on small images


def _pool(ray, n_rows: int, actors: int, cluster: connect.Cluster, ctor: dict):
    batch = max(1, min(MAX_BATCH, math.ceil(n_rows / (actors * TASKS_PER_ACTOR))))
    per_actor = {"num_gpus": 1} if cluster.gpus > 0 else {"num_cpus": 1}
    return dict(fn_constructor_kwargs=ctor, compute=ray.data.ActorPoolStrategy(size=actors), batch_size=batch,
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
    takes_videos = False  # a clip is one sequential stream of frames, not a unit to spread over actors
    streams = True
    uses_cache = False    # the driver's artifacts.prepare checks the cache when it makes files

    def __init__(self, opts: RunOptions, address: str, actors: int | None):
        if actors is not None and actors < 1:
            raise PipelineError("--ray-actors must be at least 1")
        self.opts, self.address, self.actors = opts, address, actors
        self.cluster: connect.Cluster | None = None
        self._facts: dict = {}

    def model(self, opts: RunOptions) -> ModelChoice:
        return resolve_model(opts)

    def _backend(self, model: str) -> tuple[str, str]:
        """'auto' on a CPU cluster is picked here (the actors then load that one); on GPU nodes each actor picks."""
        o = self.opts
        if o.backend != "auto" or self.cluster.gpus > 0 or o.onnx or o.engine:
            return o.backend, "requested" if o.backend != "auto" else "auto: picked by each actor on its node"
        pick = pick_auto(model, o.precision, weights=o.weights)
        return pick.name, f"auto: {pick.reason}"

    def start(self, plan: Plan, console: Console) -> Started:
        self.opts = plan.opts  # the checked options: the --onnx file opened once
        o, m = self.opts, plan.model
        ray = connect.import_ray()
        self.cluster = cluster = connect.connect(self.address)
        backend, choice = self._backend(m.name)
        shared = artifacts.prepare(ray, backend, m.name, o.precision, weights=o.weights, onnx=o.onnx,
                                   engine=o.engine, log=console.info)
        actors = self.actors or max(1, int(cluster.gpus or cluster.cpus))
        options = unit.worker_options(o)
        if cluster.gpus == 0 and options["threads"] is None:
            options["threads"] = 1  # one CPU per actor: more threads would fight the other actors
        self.ctor = dict(shared=shared, backend=backend, model=m.name, precision=o.precision, scale=m.scale,
                         options=options)
        self.ray, self.n_actors, self.scale = ray, actors, m.scale
        self.jobs = {r.job.rel: r.job for r in plan.todo}
        self._facts = {"address": cluster.address, "actors": actors, "artifacts": shared.describe()}
        return Started(m.name, m.scale, f"Ray {cluster.address}",
                       f"{cluster.cpus:g} CPU, {cluster.gpus:g} GPU, {actors} actor(s), backend {backend}"
                       + (f" {o.precision}" if o.precision != "fp32" else "") + f": {choice}",
                       backend, choice, tile=o.tile, batch=o.batch if isinstance(o.batch, int) else 1, workers=actors)

    def announce(self, console: Console) -> None:
        pass

    def _stream(self, ds, console: Console, finished: Callable[[Record], None], bar, seen: dict) -> float:
        """Records into the run and the bar as they come; returns when the first actor was ready (wall clock)."""
        ready, started, mpix = math.inf, time.perf_counter(), 0.0
        for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
            ready = min(ready, float(batch["ready_at"].min()))
            for rec_json, actor, backend in zip(batch["record"], batch["actor"], batch["backend"], strict=True):
                d = json.loads(rec_json)
                rec = Record.from_dict(d, self.jobs.pop(d["input"]))
                finished(rec)
                seen.setdefault(str(actor), str(backend))
                if rec.status == "failed":
                    console.failed(rec)
                elif rec.in_size:
                    console.written(rec, self.scale)
                mpix += rec.out_mpix
                bar.update(1)
            bar.set_postfix_str(f"{mpix / max(time.perf_counter() - started, 1e-9):.2f} MPix/s", refresh=False)
        return ready

    def execute(self, todo: list[Record], console: Console, finished: Callable[[Record], None]) -> float:
        seen: dict[str, str] = {}
        t0 = ready = time.time()
        bar = console.bar(len(todo))  # the local run's: a tqdm bar on a terminal, plain lines in a log
        try:
            if todo:
                # absolute: actors do not run in the driver's working folder
                rows = self.ray.data.from_items([{"src": str(r.job.src.absolute()), "dst": str(r.job.dst.absolute()),
                                                  "rel": r.job.rel, "fmt": r.job.fmt} for r in todo])
                ds = rows.map_batches(SrActor, **_pool(self.ray, len(todo), self.n_actors, self.cluster, self.ctor))
                try:
                    ready = self._stream(ds, console, finished, bar, seen)
                    ready = ready if math.isfinite(ready) else t0
                except Exception as e:  # an actor that cannot start (backend missing on a node, ...): one line
                    raise PipelineError(f"the Ray run failed: {_cause(e)}") from None
        finally:
            bar.close()
        self._facts.update(backend="; ".join(sorted(set(seen.values()))), actor_processes=sorted(seen),
                           actor_start_s=round(max(0.0, ready - t0), 3) if todo else 0.0)
        # processing: from the first actor ready to the last record, as the local run's process_s
        return max(0.0, time.time() - (ready if todo else t0))

    def facts(self) -> dict:
        return dict(self._facts)

    def close(self) -> None:
        if self.cluster is not None:
            connect.disconnect()
            self.cluster = None
