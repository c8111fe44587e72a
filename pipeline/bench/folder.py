"""Folder throughput: the sr stage on a folder of images against pure inference of the same images.

Both sides use one loaded backend (its loading is start-up, not throughput) and the same decoded pixels;
runs alternate folder / inference so a noisy shared machine slows both alike. The ratio is taken from
the medians; `ratio_best` (fastest run of each) is reported too, because on a machine shared with other
work the medians move by tens of percent from one run to the next while the fastest runs stay close.
The goal (issue 11): the folder run reaches >= 85 % of pure inference throughput.
"""
from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np

from pipeline import backends
from pipeline.artifacts.identity import resolve
from pipeline.data.sample_images import HELD_OUT, load_rgb
from pipeline.sr import imageio, upscale

GOAL = 0.85  # folder run / pure inference throughput


def write_folder(folder: Path, n_images: int, size: int) -> list[Path]:
    """n held-out photos (cycled when n exceeds them), centre-cropped to size x size, as PNG files."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n_images):
        img = load_rgb(HELD_OUT[i % len(HELD_OUT)])
        h, w = img.shape[:2]
        s = min(size, h, w)
        y0, x0 = (h - s) // 2, (w - s) // 2
        path = folder / f"{i:03d}_{HELD_OUT[i % len(HELD_OUT)]}.png"
        if not cv2.imwrite(str(path), np.ascontiguousarray(img[y0:y0 + s, x0:x0 + s, ::-1])):
            raise OSError(f"cannot write {path}")
        paths.append(path)
    return paths


def _inference_s(backend, batches: list[np.ndarray], scale: float) -> float:
    t0 = time.perf_counter()
    for x in batches:
        backend.infer(x, scale)
    return time.perf_counter() - t0


def folder_throughput(model: str, n_images: int, size: int, backend="auto", weights=None, log=print,
                      repeats: int = 3) -> dict:
    """Per-image ms of `upscale()` on a folder of n size x size PNGs and of inference calls alone on the
    same images, their ratio (inference / folder = the folder run's share of pure inference throughput),
    and the keys bench reports have used (folder_s, inference_s, overhead_s, overhead_pct: medians)."""
    scale = resolve(model).default_scale
    be = backends.create(backend, model, "fp32", weights=weights) if isinstance(backend, str) else backend
    with tempfile.TemporaryDirectory(prefix="sr-folder-bench-") as tmp:
        paths = write_folder(Path(tmp) / "in", n_images, size)
        images = [imageio.read_image(p) for p in paths]
        batches = [im.region_rgb(0, im.height, 0, im.width)[None] for im in images]
        for x in {x.shape: x for x in batches}.values():  # warm each input shape once
            be.infer(x, scale)
        folder, infer = [], []
        for r in range(max(1, repeats)):
            t0 = time.perf_counter()
            upscale(Path(tmp) / "in", Path(tmp) / f"out{r}", model=model, scale=scale, backend=be, progress=False,
                    log=lambda _msg: None)
            folder.append(time.perf_counter() - t0)
            infer.append(_inference_s(be, batches, scale))
    folder_s, inference_s = statistics.median(folder), statistics.median(infer)
    ratio, ratio_best = inference_s / folder_s, min(infer) / min(folder)
    log(f"  {model} folder run: {1e3 * folder_s / n_images:.0f} ms/image vs {1e3 * inference_s / n_images:.0f} ms "
        f"pure inference ({be.name}, {n_images} x {size}^2, x{scale:g}, medians of {len(folder)}): "
        f"{100 * ratio:.0f} % of inference throughput (fastest runs: {100 * ratio_best:.0f} %; "
        f"goal {100 * GOAL:.0f} %)")
    return {"model": model, "backend": be.name, "backend_description": be.describe(), "images": n_images,
            "size": size, "scale": scale, "repeats": len(folder),
            "folder_ms_per_image": 1e3 * folder_s / n_images, "inference_ms_per_image": 1e3 * inference_s / n_images,
            "ratio": ratio, "ratio_best": ratio_best, "goal": GOAL, "meets_goal": ratio >= GOAL,
            "folder_s": folder_s, "inference_s": inference_s, "overhead_s": folder_s - inference_s,
            "overhead_pct": 100.0 * (folder_s - inference_s) / folder_s,
            "runs_folder_s": folder, "runs_inference_s": infer}
