"""Checks of the sr stage's options, all made before any image is read or any output written: a bad
value is one PipelineError line (the CLI's exit 2), never a silent fallback or a failure after the work."""
from __future__ import annotations

import os
from pathlib import Path

from models.spec import DEFAULT_MODEL
from pipeline.artifacts.identity import resolve
from pipeline.artifacts.onnx_file import check_onnx_file
from pipeline.backends.descriptor import MAX_THREADS
from pipeline.errors import PipelineError
from pipeline.images import imageio, tiling

JPEG_QUALITY = (1, 100)  # OpenCV's JPEG and WebP quality range (WebP takes no 0)
HOST_WORKERS = 2  # decode/encode threads beside a host backend, which itself uses every core while it infers


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask: a container's or taskset's limit, not the machine's)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def io_workers(workers: int | None, on_gpu: bool) -> int:
    """--workers, or the default: every usable core when inference runs off the host's cores (the CPU then only
    decodes and encodes); beside a host backend, today's 2 (at most the cores), so inference keeps the cores."""
    if workers is not None:
        return workers
    return usable_cores() if on_gpu else min(HOST_WORKERS, usable_cores())


def _at_least(name: str, value: int | None, low: int, note: str = "") -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low):
        raise PipelineError(f"{name} must be an integer >= {low}{note}, got {value!r}")


def check_numbers(*, tile, tile_overlap, batch, workers, threads, jpeg_quality) -> None:
    _at_least("--tile", tile, 0, " (0 = never tile)")
    _at_least("--tile-overlap", tile_overlap, 0)
    if batch != "auto":
        _at_least("--batch", batch, 1, " or 'auto'")
    _at_least("--workers", workers, 1)
    _at_least("--threads", threads, 1)
    if threads is not None and threads > MAX_THREADS:  # ONNX Runtime failed on it with "incompatible arguments"
        raise PipelineError(f"--threads must be an integer from 1 to {MAX_THREADS}, got {threads}")
    tiling.tile_memory()  # SRDEPLOY_TILE_MEMORY, checked before any work like the options
    lo, hi = JPEG_QUALITY
    if isinstance(jpeg_quality, bool) or not isinstance(jpeg_quality, int) or not lo <= jpeg_quality <= hi:
        raise PipelineError(f"--jpeg-quality must be an integer from {lo} to {hi}, got {jpeg_quality!r}")


def check_format(fmt: str | None) -> str | None:
    if fmt is None:
        return None
    try:
        return imageio.normalize_format(fmt)
    except ValueError as e:
        raise PipelineError(str(e)) from None




def check_paths(*, summary, reference, onnx, engine, weights):
    """The paths a run reads and writes; returns the --onnx file opened (pipeline.artifacts.onnx_file.OnnxFile: parsed
    once, handed down) or None."""
    if summary is not None and Path(summary).is_dir():
        raise PipelineError(f"--summary {summary} is a folder; give the JSON file to write")
    if reference is not None and not Path(reference).is_dir():
        raise PipelineError(f"reference folder not found: {reference}")
    if onnx is not None:
        onnx = check_onnx_file(onnx)
    if engine is not None and not Path(engine).is_file():
        raise PipelineError(f"TensorRT engine not found: {engine}")
    if weights is not None and not Path(weights).is_file():
        raise PipelineError(f"weights file not found: {weights}")
    return onnx


def resolve_model(model: str | None, onnx=None, backend=None, engine=None) -> str:
    """The model to run: --model, else the one a loaded backend, an engine or an ONNX file was made for, else
    the default. A --model that disagrees with the backend or the file is an error, not a guess."""
    if backend is not None and not isinstance(backend, str):
        loaded = backend.model_name
        if model is not None and model != loaded:
            raise PipelineError(f"the given backend runs model '{loaded}', not '{model}'")
        return loaded
    if engine is not None or onnx is not None:  # the file says; a disagreeing --model is refused
        return resolve(model, onnx, engine).name
    return model or DEFAULT_MODEL
