"""Timing a whole `sr` command in a subprocess, read back from its --summary (the Ray and Triton comparisons)."""
from __future__ import annotations

import json
import statistics
import subprocess
import time
from pathlib import Path

from pipeline.errors import PipelineError, first_line

RUN_LIMIT_S = 1800  # a bench run that takes longer has hung


def timed_sr(cmd: list[str], summary: Path, what: str) -> dict:
    """Run `cmd` (an sr command writing `summary`); wall and processing seconds, images done, per-image work."""
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_LIMIT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise PipelineError(f"bench run failed: {first_line(e)}") from None
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["no output"]
        raise PipelineError(f"bench run `{what}` exited {proc.returncode}: {tail[0]}")
    doc = json.loads(summary.read_text())
    ok = [r for r in doc["images"] if r["status"] == "ok"]
    return {"wall_s": wall, "process_s": doc["process_s"], "images": len(ok),
            "work_s": sum(r.get("time_s", 0.0) for r in ok), "backend": doc["backend"],
            "frames": sum(r.get("video", {}).get("frames", 0) for r in ok), "executor": doc["executor"]}


def median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)
