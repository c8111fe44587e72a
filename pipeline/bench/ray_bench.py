"""The same folder super-resolved locally and through Ray with 1 and 2 actors, in one run: wall times, the
ratios, Ray's fixed cost (cluster and actor start, shutdown) and its per-image overhead.

Each run is a `python -m pipeline sr` process, as a user runs it, with a --summary to read the times from.
Without an address the Ray runs start their own local cluster, inside a private network namespace when
`isolate` (where Ray binds the loopback only; needs root: `unshare -n`), so a benchmark never listens on the
machine's network. `bench` calls `ray_bench`; pipeline.report renders it (`ray_markdown`)."""
from __future__ import annotations

import json
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

from models.spec import DEFAULT_MODEL
from pipeline import report
from pipeline.bench.sr_runs import median, timed_sr
from pipeline.errors import PipelineError


def _command(sr_args: list[str], isolate: bool) -> list[str]:
    cmd = [sys.executable, "-m", "pipeline", "sr", *sr_args]
    if not isolate:
        return cmd
    if shutil.which("unshare") is None:
        raise PipelineError("isolated Ray runs need `unshare` (util-linux) and root; pass isolate=False to use "
                            "the machine's network")
    return ["unshare", "-n", "sh", "-c", "ip link set lo up && exec " + shlex.join(cmd)]


def ray_bench(folder: str | Path, *, model: str = DEFAULT_MODEL, scale: float = 3.0, backend: str = "ort",
              actors: tuple[int, ...] = (1, 2), address: str | None = None, isolate: bool = True,
              repeats: int = 1, log=print) -> dict:
    """Time `sr folder` locally and with --ray --ray-actors N for each N, `repeats` times each (medians).

    overhead_ms_per_image: the actors' time not spent decoding, inferring or encoding an image, per image
    (process time x actors - per-image work) / images; fixed_s: wall time outside the processing phase."""
    folder = Path(folder)
    if not folder.is_dir():
        raise PipelineError(f"bench folder not found: {folder}")
    common = ["--model", model, "--scale", f"{scale:g}", "--backend", backend, "--quiet"]
    runs: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="ray-bench-") as tmp:
        configs = [("local", [], False)] + [
            (f"ray-{n}", ["--ray", *([address] if address else []), "--ray-actors", str(n)], isolate and not address)
            for n in actors]
        for _ in range(repeats):
            for name, extra, iso in configs:
                out, summary = Path(tmp) / name, Path(tmp) / f"{name}.json"
                shutil.rmtree(out, ignore_errors=True)
                log(f"ray bench: {name} ...")
                cmd = _command([str(folder), str(out), *common, "--summary", str(summary), *extra], iso)
                runs.setdefault(name, []).append(timed_sr(cmd, summary, f"sr {folder} {out}"))
    return summarize(runs, actors)


def summarize(runs: dict[str, list[dict]], actors: tuple[int, ...]) -> dict:
    local = runs["local"]
    n = local[0]["images"]
    result = {"images": n, "repeats": len(local), "backend": local[0]["backend"],
              "local": {"wall_s": median(local, "wall_s"), "process_s": median(local, "process_s")}, "ray": {}}
    for k in actors:
        rs = runs[f"ray-{k}"]
        wall, proc = median(rs, "wall_s"), median(rs, "process_s")
        work = median(rs, "work_s")
        result["ray"][k] = {
            "wall_s": wall, "process_s": proc, "backend": rs[0]["backend"],
            "wall_ratio_vs_local": result["local"]["wall_s"] / wall,
            "process_ratio_vs_local": result["local"]["process_s"] / proc if proc > 0 else None,
            "fixed_s": wall - proc,
            "overhead_ms_per_image": max(0.0, proc * k - work) / max(n, 1) * 1e3,
            "work_ms_per_image": work / max(n, 1) * 1e3,
        }
    return result


def ray_video_bench(clip: str | Path, *, model: str = DEFAULT_MODEL, scale: float = 3.0, backend: str = "ort",
                    actors: tuple[int, ...] = (1, 2), isolate: bool = True, repeats: int = 1, log=print) -> dict:
    """One clip upscaled into FFV1 locally and with --ray --ray-actors N (segments joined by stream copy): frames/s
    of the processing phase, the ratio to 1 actor, and what splitting costs as a share of the run: the segments'
    seeks (summed over actors, against the actors' processing time) and the driver's join (against the wall)."""
    clip = Path(clip)
    common = ["--model", model, "--scale", f"{scale:g}", "--backend", backend, "--codec", "ffv1", "--quiet"]
    runs: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="ray-video-bench-") as tmp:
        configs = [("local", [], False)] + [(f"ray-{n}", ["--ray", "--ray-actors", str(n)], isolate) for n in actors]
        for _ in range(repeats):
            for name, extra, iso in configs:
                out, summary = Path(tmp) / f"{name}.mkv", Path(tmp) / f"{name}.json"
                out.unlink(missing_ok=True)
                log(f"ray video bench: {name} ...")
                cmd = _command([str(clip), str(out), *common, "--summary", str(summary), *extra], iso)
                run = timed_sr(cmd, summary, f"sr {clip} {out}")
                seg = run["executor"].get("segments", [{}])[0]
                run.update(fps=run["frames"] / run["process_s"], segments=seg.get("segments", 1),
                           seek_s=seg.get("seek_s", 0.0), join_s=seg.get("join_s", 0.0))
                runs.setdefault(name, []).append(run)
    local = runs["local"]
    result = {"frames": local[0]["frames"], "repeats": repeats, "backend": local[0]["backend"],
              "local": {"fps": median(local, "fps"), "wall_s": median(local, "wall_s")}, "ray": {}}
    for k in actors:
        rs = runs[f"ray-{k}"]
        proc = median(rs, "process_s")
        result["ray"][k] = {"fps": median(rs, "fps"), "wall_s": median(rs, "wall_s"), "process_s": proc,
                            "segments": rs[0]["segments"],
                            "seek_share": median(rs, "seek_s") / (proc * k) if proc > 0 else None,
                            "join_share": median(rs, "join_s") / median(rs, "wall_s")}
    one = result["ray"].get(actors[0], {}).get("fps")
    for r in result["ray"].values():
        r["vs_first"] = r["fps"] / one if one else None
    return result


if __name__ == "__main__":  # python -m pipeline.bench.ray_bench FOLDER [REPEATS]
    res = ray_bench(sys.argv[1], repeats=int(sys.argv[2]) if len(sys.argv) > 2 else 1,
                    log=lambda m: print(m, file=sys.stderr))
    print("\n".join(report.ray_markdown(res)))
    print(json.dumps(res, indent=2))
