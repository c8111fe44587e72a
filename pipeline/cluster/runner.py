"""`python -m pipeline sr INPUT OUTPUT --ray [ADDRESS]`: the driver of a folder run on a Ray cluster.

The driver checks the arguments and lists the files exactly as a local run does (same jobs, same output tree,
--skip-existing and up-front failures), makes the model files once, then streams the job rows through Ray Data
into a pool of SrActor (one backend each, one GPU each when the cluster has GPUs); the actors write the results
into OUTPUT, which must be a path every node sees. The driver holds only the job list, counts and failures;
records stream to the --summary spool. Ray retries the batches of an actor that dies on a restarted actor."""
from __future__ import annotations

import json
import math
import time

from pipeline.backends import pick_auto
from pipeline.cluster import artifacts, connect, unit
from pipeline.cluster.actor import COLUMNS, SrActor
from pipeline.cluster.spool import SummarySpool
from pipeline.errors import PipelineError, first_line
from pipeline.sr import preflight
from pipeline.sr.console import Console, count_text, done_line, failed_line
from pipeline.sr.jobs import discover

TASKS_PER_ACTOR = 4   # batches queued per actor: enough to keep it busy, few to redo when it dies
MAX_BATCH = 32        # images per Ray task: amortises Ray's per-task cost on small images


def _triage(found, skip_existing: bool, spool: SummarySpool, console: Console) -> list[dict]:
    """Job rows still to do; failed-up-front and skipped jobs go straight to the summary."""
    todo = []
    for job in found.jobs:
        base = {"input": job.rel, "output": str(job.dst)}
        if job.problem:
            spool.add({**base, "status": "failed", "reason": job.problem})
            console.always(f"failed {job.rel}: {job.problem}")
        elif skip_existing and job.dst.exists():
            spool.add({**base, "status": "skipped", "reason": "output exists"})
        else:
            # absolute: actors do not run in the driver's working folder
            todo.append({"src": str(job.src.absolute()), "dst": str(job.dst.absolute()), "rel": job.rel,
                         "fmt": job.fmt})
    if spool.counts["skipped"]:
        console.info(f"skipping {count_text(spool.counts['skipped'])} whose output exists")
    return todo


def _resolve_backend(args, model: str, cluster: connect.Cluster) -> tuple[str, str]:
    """'auto' on a CPU cluster is picked here (the actors then load that one); on GPU nodes each actor picks."""
    if args.backend != "auto" or cluster.gpus > 0 or args.onnx or args.engine:
        return args.backend, "requested" if args.backend != "auto" else "auto: picked by each actor on its node"
    pick = pick_auto(model, args.precision, weights=args.weights)
    return pick.name, f"auto: {pick.reason}"


def _pool(ray, n_rows: int, actors: int, cluster: connect.Cluster, ctor: dict):
    batch = max(1, min(MAX_BATCH, math.ceil(n_rows / (actors * TASKS_PER_ACTOR))))
    per_actor = {"num_gpus": 1} if cluster.gpus > 0 else {"num_cpus": 1}
    return dict(fn_constructor_kwargs=ctor, compute=ray.data.ActorPoolStrategy(size=actors), batch_size=batch,
                batch_format="numpy", **per_actor)


def _stream(ds, spool: SummarySpool, bar, console: Console, scale: float, seen: dict) -> float:
    """Records into the summary and the bar as they come; returns when the first actor was ready (wall clock)."""
    ready, started = math.inf, time.perf_counter()
    for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
        ready = min(ready, float(batch["ready_at"].min()))
        for rec_json, actor, backend in zip(batch["record"], batch["actor"], batch["backend"], strict=True):
            rec = json.loads(rec_json)
            spool.add(rec)
            seen.setdefault(str(actor), str(backend))
            if rec["status"] == "failed":
                console.always(f"failed {rec['input']}: {rec['reason']}")
            elif rec.get("in_size"):
                (iw, ih), (ow, oh) = rec["in_size"], rec["out_size"]
                console.info(f"{rec['input']}: {iw}x{ih} -> {ow}x{oh} (x{scale:g}, {rec['mode']} "
                             f"{rec['bit_depth']}-bit, {rec['tiles']} tile{'s' if rec['tiles'] != 1 else ''})")
            bar.update(1)
        bar.set_postfix_str(f"{spool.out_mpix / max(time.perf_counter() - started, 1e-9):.2f} MPix/s", refresh=False)
    return ready


def _run_on_cluster(args, model, scale, todo, spool, console, cluster) -> dict:
    """Make the files once, stream the rows through the actor pool; returns facts for the summary."""
    ray = connect.import_ray()
    backend, choice = _resolve_backend(args, model, cluster)
    shared = artifacts.prepare(ray, backend, model, args.precision, weights=args.weights, onnx=args.onnx,
                               engine=args.engine, log=console.info)
    actors = args.ray_actors or max(1, int(cluster.gpus or cluster.cpus))
    options = unit.worker_options(args)
    if cluster.gpus == 0 and options["threads"] is None:
        options["threads"] = 1  # one CPU per actor: more threads would fight the other actors
    ctor = dict(shared=shared, backend=backend, model=model, precision=args.precision, scale=scale, options=options)
    console.always(f"sr: {model} x{scale:g} on Ray ({cluster.address}, {cluster.cpus:g} CPU, {cluster.gpus:g} GPU): "
                   f"{actors} actor(s), backend {backend} ({choice}); {count_text(len(todo))} -> {args.output}")
    seen: dict[str, str] = {}
    t0 = ready = time.time()
    bar = console.bar(len(todo))  # the local run's: a tqdm bar on a terminal, plain lines in a log
    try:
        if todo:
            rows = ray.data.from_items([{c: r[c] for c in COLUMNS} for r in todo])
            ds = rows.map_batches(SrActor, **_pool(ray, len(todo), actors, cluster, ctor))
            try:
                ready = _stream(ds, spool, bar, console, scale, seen)
                ready = ready if math.isfinite(ready) else t0
            except Exception as e:  # an actor that cannot start (backend missing on a node, ...): one line
                raise PipelineError(f"the Ray run failed: {_cause(e)}") from None
    finally:
        bar.close()
    return {"backend": sorted(set(seen.values())), "backend_choice": choice, "actors": actors,
            "actor_processes": sorted(seen), "artifacts": shared.describe(),
            "actor_start_s": round(max(0.0, ready - t0), 3) if todo else 0.0,
            # processing: from the first actor ready to the last record, as the local run's process_s
            "process_s": max(0.0, time.time() - (ready if todo else t0))}


def _cause(e: BaseException) -> str:
    """The user's error inside Ray's wrappers (RayTaskError, ActorDiedError), in one line."""
    for attr in ("cause", "__cause__"):
        inner = getattr(e, attr, None)
        if isinstance(inner, BaseException) and inner is not e:
            return _cause(inner)
    return first_line(e)


def run_ray(args) -> int:
    t_start = time.perf_counter()
    console = Console(progress=not args.quiet)
    model, scale, fmt = unit.check_arguments(args)
    if args.ray_actors is not None and args.ray_actors < 1:
        raise PipelineError("--ray-actors must be at least 1")
    found = discover(args.input, args.output, fmt, summary=args.summary)
    if not found.jobs:
        raise PipelineError(f"no images found in {args.input}")
    if found.videos:  # a clip is one sequential stream of frames, not a unit to spread over actors
        raise PipelineError(f"--ray upscales images; {found.videos[0].rel} is a video (run videos without --ray)")
    preflight.check_writable(found, args.output, args.summary, uses_cache=False)  # before Ray starts
    spool = SummarySpool(args.summary)
    try:
        if found.ignored:
            console.info(f"ignored {len(found.ignored)} file(s) without an image extension (e.g. {found.ignored[0]})")
        todo = _triage(found, args.skip_existing, spool, console)
        del found.jobs[:]  # the rows are all the driver needs from here on
        cluster = connect.connect(args.ray)
        try:
            facts = _run_on_cluster(args, model, scale, todo, spool, console, cluster)
        finally:
            connect.disconnect()
        return _finish(args, model, scale, spool, facts, found.ignored, time.perf_counter() - t_start, console)
    finally:
        spool.close()


def _finish(args, model, scale, spool: SummarySpool, facts: dict, ignored: list[str], wall: float, console) -> int:
    loop = facts.pop("process_s")
    ok = spool.counts["ok"]
    header = {"model": model, "scale": scale, "backend": "; ".join(facts["backend"]),
              "backend_choice": facts.pop("backend_choice"), "input": str(args.input), "output": str(args.output),
              "ray": {"address": args.ray, **facts}, "wall_s": round(wall, 3), "process_s": round(loop, 3),
              "images_per_s": round(ok / loop, 3) if loop > 0 else None,
              "mpix_per_s": round(spool.out_mpix / loop, 3) if loop > 0 else None}
    spool.write(header, ignored)
    c = spool.counts
    console.info(done_line(c, wall, images=ok, frames=0, out_mpix=spool.out_mpix, process_s=loop))
    if spool.failures:
        console.always(failed_line([f["input"] for f in spool.failures[:5]], c["failed"]))
    return 1 if c["failed"] else 0
