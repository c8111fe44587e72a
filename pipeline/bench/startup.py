"""Time to first image: `python -m pipeline sr one.png out.png --onnx F.onnx` in a fresh process, wall clock.

What a deployment pays per cold start: interpreter, imports (no PyTorch on this path), ONNX Runtime session,
one decode, inference and encode. The ONNX file is given, so nothing is exported. One unmeasured run first
warms the OS file cache; then the median of `runs`. A `bench` row ("startup"); goal <= 1.0 s for 256² x3.

    python -m pipeline.bench.startup F.onnx [--size 256] [--scale 3] [--runs 5]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np

from pipeline.artifacts.onnx_file import onnx_metadata
from pipeline.errors import PipelineError

REPO_ROOT = Path(__file__).resolve().parents[2]


def _one_run(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise PipelineError(f"startup run failed (exit {proc.returncode}): {tail}")
    return wall


def time_to_first_image(onnx: str | Path, size: int = 256, scale: float = 3, runs: int = 5,
                        backend: str = "auto") -> dict:
    """Median wall seconds of `runs` fresh `python -m pipeline sr` processes upscaling one size x size image."""
    if size < 1 or runs < 1:
        raise PipelineError("size and runs must be >= 1")
    onnx = Path(onnx).resolve()
    model = onnx_metadata(onnx).get("model")
    with tempfile.TemporaryDirectory(prefix="srdeploy-startup-") as tmp:
        image, out = Path(tmp) / "one.png", Path(tmp) / "out.png"
        pixels = (np.random.default_rng(0).random((size, size, 3)) * 255).astype(np.uint8)
        cv2.imwrite(str(image), pixels)
        cmd = [sys.executable, "-m", "pipeline", "sr", str(image), str(out), "--onnx", str(onnx), "--scale",
               f"{scale:g}", "--backend", backend, "--quiet"] + (["--model", model] if model else [])
        _one_run(cmd)  # warm-up: OS file cache, .pyc files
        walls = [_one_run(cmd) for _ in range(runs)]
    return {"onnx": str(onnx), "model": model, "size": size, "scale": scale, "backend": backend, "runs": runs,
            "median_s": statistics.median(walls), "min_s": min(walls), "max_s": max(walls),
            "walls_s": [round(w, 3) for w in walls], "command": " ".join(cmd[1:])}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pipeline.bench.startup", description=__doc__.splitlines()[0])
    p.add_argument("onnx")
    p.add_argument("--size", type=int, default=256)
    p.add_argument("--scale", type=float, default=3)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--backend", default="auto")
    args = p.parse_args(argv)
    try:
        print(json.dumps(time_to_first_image(args.onnx, args.size, args.scale, args.runs, args.backend), indent=2))
    except PipelineError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
