"""Video throughput: frames per second of `pipeline sr` on a short H.264 clip at 480p and 720p input (decode, upscale,
encode with the default codec, audio-free), next to the backend's pure inference on the same frame size, and the
encoder's share: the output's frames encoded alone (the run's preset and threads) against inference alone, as the
share of a frame's sequential cost (decoding, a few % of a frame, left out).

The clip pans across a held-out photo so every frame differs. Frames are cut into the tiles `sr` cuts them into (the
host tile memory budget, pipeline.images.tiling.tile_memory), for the run and for inference alone alike. The backend
is loaded once (its loading is start-up, not throughput) and warmed on frames of the size until its calls run warm
(timing.warm_up) before the timed run.
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

import av
import cv2
import numpy as np

from pipeline import backends
from pipeline.artifacts.identity import resolve
from pipeline.bench.encoders import encode_once
from pipeline.bench.timing import warm_up
from pipeline.data.sample_images import HELD_OUT, load_rgb
from pipeline.report import percent
from pipeline.sr import Image, ImageWorker, upscale

SIZES = {"480p": (854, 480), "720p": (1280, 720)}
# A model made for video (its spec's `use`, e.g. Real-ESRGAN animevideov3) is also run at the size issue 66 sets its
# goal at: a 640x360 H.264 clip at >= 75 % of pure inference.
VIDEO_MODEL_SIZES = {"360p": (640, 360)}
RATE = 24


def sizes_for(model: str) -> dict[str, tuple[int, int]]:
    """The input sizes the video rows of `model` run at: 480p and 720p, and 360p first for a video model."""
    return {**VIDEO_MODEL_SIZES, **SIZES} if resolve(model).use.startswith("video") else dict(SIZES)


def write_clip(path: Path, width: int, height: int, frames: int, gop: int | None = None) -> Path:
    """An H.264 clip panning 4 px per frame across a held-out photo scaled to cover width x height; `gop`: frames
    between keyframes (x264's default otherwise)."""
    photo = load_rgb(HELD_OUT[0])
    cover = max((width + 4 * frames) / photo.shape[1], height / photo.shape[0])
    photo = cv2.resize(photo, (int(np.ceil(photo.shape[1] * cover)), int(np.ceil(photo.shape[0] * cover))),
                       interpolation=cv2.INTER_CUBIC)
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=RATE, options={"crf": "18", **({"g": str(gop)} if gop else {})})
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for i in range(frames):
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(photo[:height, 4 * i:4 * i + width]),
                                               format="rgb24")
            for p in stream.encode(frame):
                out.mux(p)
        for p in stream.encode():
            out.mux(p)
    return path


def _too_slow(be, scale: float, w: int, h: int, max_frame_s: float, rng) -> str | None:
    """Why a w x h frame is not run (it would take longer than max_frame_s, timed on a sixteenth of the frame, so
    a size far over the limit costs no full frame), or None."""
    small = rng.random((1, 3, max(8, h // 4), max(8, w // 4)), dtype=np.float32)
    be.infer(small, scale)
    t0 = time.perf_counter()
    be.infer(small, scale)
    estimate = (time.perf_counter() - t0) * (w * h) / (small.shape[2] * small.shape[3])
    return f"one {w}x{h} frame would take ~{estimate:.0f} s (limit {max_frame_s:g} s)" if estimate > max_frame_s \
        else None


def _inference_alone(be, scale: float, w: int, h: int, frames: int, rng) -> tuple[float, int]:
    """Seconds for `frames` frames through the sr stage's own worker, in the tiles `sr` cuts them into (the tile
    memory budget: a 4K output frame whole took ~9 GB), so it times the work the clip run does; and the tiles."""
    worker = ImageWorker(be, be.spec, scale)
    frame = Image(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
    warm_up(lambda: worker.infer_tiled(worker.plan(frame, "png")))  # the first calls plan kernels / allocate
    t0 = time.perf_counter()
    for _ in range(frames):
        item = worker.plan(frame, "png")
        worker.infer_tiled(item)
    return time.perf_counter() - t0, item.plan.count


def video_fps(model: str, frames: int, backend="auto", weights=None, log=print, max_frame_s: float = 60.0,
              sizes: dict[str, tuple[int, int]] = SIZES) -> list[dict]:
    """One row per size: fps of the whole clip run and of inference alone. A size whose frame would take longer
    than max_frame_s is not run; its row says why."""
    scale = resolve(model).default_scale
    be = backends.create(backend, model, "fp32", weights=weights) if isinstance(backend, str) else backend
    rows = []
    with tempfile.TemporaryDirectory(prefix="sr-video-bench-") as tmp:
        for label, (w, h) in sizes.items():
            clip = write_clip(Path(tmp) / f"{label}.mp4", w, h, frames)
            rng = np.random.default_rng(0)
            why = _too_slow(be, scale, w, h, max_frame_s, rng)
            if why:
                rows.append({"model": model, "backend": be.name, "precision": be.precision, "size": label,
                             "input": [w, h], "scale": scale, "fps": None, "skipped": why})
                log(f"  {model} video {label}: not run, {why}")
                continue
            infer_s, tiles = _inference_alone(be, scale, w, h, frames, rng)
            s = upscale(clip, Path(tmp) / f"out_{label}.mp4", model=model, scale=scale, backend=be,
                        progress=False, log=lambda _msg: None)
            rec = s.records[0]
            if rec.status != "ok":
                raise RuntimeError(f"video bench {label}: {rec.reason}")
            fps = rec.video["fps"]
            encode_fps = _encode_fps(Path(tmp) / f"out_{label}.mp4", rec.video["codec"], rec.video["preset"], s.workers)
            row = {"model": model, "backend": be.name, "precision": be.precision,
                   "backend_description": be.describe(), "size": label,
                   "input": [w, h], "output": list(rec.out_size), "scale": scale, "frames": frames,
                   "codec": rec.video["codec"], "fps": fps, "inference_fps": round(frames / infer_s, 3),
                   "tiles": tiles, "time_per_frame_s": rec.video["time_per_frame_s"], "preset": rec.video["preset"],
                   "encode_fps": encode_fps}
            row["of_inference"] = round(fps / row["inference_fps"], 3)
            row["encoder_share"] = _share(encode_fps, row["inference_fps"])
            log(f"  {model} video {label} ({w}x{h} -> {rec.out_size[0]}x{rec.out_size[1]}, {be.name} {be.precision}"
                f"{f', {tiles} tiles a frame' if tiles > 1 else ''}): {fps:.2f} fps decode+upscale+encode "
                f"({percent(row['of_inference'], 0)} of inference alone, {row['inference_fps']:.2f} fps); "
                f"{rec.video['codec']} {rec.video['preset']} alone {encode_fps} fps: encoder share "
                f"{percent(row['encoder_share'], 0)}")
            rows.append(row)
    return rows


def _encode_fps(clip: Path, codec: str, preset: str | None, threads: int) -> float | None:
    """Frames per second of encoding `clip`'s frames again alone (its codec, preset and the run's threads); None
    for a codec without presets."""
    if preset is None:
        return None
    with av.open(str(clip)) as c:
        frames = [f.reformat(format="yuv420p") for f in c.decode(video=0)]
    seconds, _, _ = encode_once(codec, preset, frames, threads)
    return round(len(frames) / seconds, 2)


def _share(encode_fps: float | None, inference_fps: float) -> float | None:
    """The encoder's share of a frame's sequential cost (encode + inference)."""
    if not encode_fps or not inference_fps:
        return None
    return round((1 / encode_fps) / (1 / encode_fps + 1 / inference_fps), 3)
