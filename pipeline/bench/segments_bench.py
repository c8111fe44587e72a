"""What cutting a clip into segments costs a local run (issue 49): one clip of a few minutes upscaled in this
process (the backend loaded once), into FFV1 whole and at 10 s segments, and into H.264 as one continuous encode,
at the default segment length (60 s) and at 10 s.

    overhead   the segmented FFV1 run's cut (the plan's pass over the packets), seeks (each segment's opening and
               the frames decoded before its first), records (each finished file demuxed and hashed) and join (the
               stream copy), as a share of its wall time, and its wall time against the whole run's
    size       the H.264 video bytes of each segmented run against the continuous encode's: each segment starts
               with an IDR frame and its own B-frame delay, the price of resuming mid-clip
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import av
import cv2
import numpy as np

from pipeline import backends
from pipeline.artifacts.identity import resolve
from pipeline.data.sample_images import HELD_OUT, load_rgb
from pipeline.sr import upscale

RATE = 24
WHOLE_S = 1e9   # a --segment-seconds no clip reaches twice: the clip runs whole, one continuous encode
SHORT_S = 10.0  # the short segments compared


def write_pan_clip(path: Path, width: int, height: int, frames: int, gop: int) -> Path:
    """An H.264 clip panning 2 px per frame round a held-out photo (wrapping), keyframes every `gop` frames."""
    photo = load_rgb(HELD_OUT[0])
    strip = cv2.resize(photo, (width * 4, height), interpolation=cv2.INTER_AREA)
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=RATE, options={"crf": "18", "g": str(gop)})
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for i in range(frames):
            view = np.roll(strip, -2 * i, axis=1)[:, :width]
            for p in stream.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(view), format="rgb24")):
                out.mux(p)
        for p in stream.encode():
            out.mux(p)
    return path


def video_bytes(path: Path) -> int:
    with av.open(str(path)) as c:
        return sum(p.size for p in c.demux(c.streams.video[0]))


def segment_bench(model: str, clip_s: float = 180.0, size: tuple[int, int] = (96, 54), backend="auto", weights=None,
                  log=print, short_s: float = SHORT_S) -> dict:
    """The overhead and size rows (module docstring) for one `clip_s`-second clip of `size`; `short_s`: the short
    segments' length."""
    be = backends.create(backend, model, "fp32", weights=weights) if isinstance(backend, str) else backend
    scale = resolve(model).default_scale
    frames = int(clip_s * RATE)
    with tempfile.TemporaryDirectory(prefix="segment-bench-") as tmp:
        clip = write_pan_clip(Path(tmp) / "clip.mp4", *size, frames, gop=2 * RATE)

        def run(name: str, codec: str, seconds: float | None) -> tuple[dict, Path]:
            out = Path(tmp) / f"{name}.{'mkv' if codec == 'ffv1' else 'mp4'}"
            log(f"segment bench: {name} ...")
            s = upscale(clip, out, backend=be, scale=scale, codec=codec, segment_seconds=seconds, progress=False,
                        log=lambda m: None)
            if s.counts["ok"] != 1:
                raise RuntimeError(f"segment bench {name}: {s.log.failures}")
            facts = (s.executor.get("segments") or [{}])[0]
            return {"wall_s": s.wall_s, "process_s": s.process_s, **facts}, out

        whole, _ = run("ffv1-whole", "ffv1", WHOLE_S)
        cut, _ = run(f"ffv1-{short_s:g}s", "ffv1", short_s)
        parts = ("cut_s", "seek_s", "record_s", "join_s")
        split = sum(cut.get(k, 0.0) for k in parts)
        overhead = {"segment_s": short_s, "segments": cut.get("segments", 1), **{k: cut.get(k, 0.0) for k in parts},
                    "share": split / cut["wall_s"] if cut["wall_s"] > 0 else None,
                    "whole_s": whole["wall_s"], "segmented_s": cut["wall_s"]}
        sizes = {}
        for name, seconds in (("continuous", WHOLE_S), ("default", None), (f"{short_s:g}s", short_s)):
            facts, out = run(f"h264-{name}", "h264", seconds)
            sizes[name] = {"bytes": video_bytes(out), "segments": facts.get("segments", 1)}
        for r in sizes.values():
            r["vs_continuous"] = r["bytes"] / sizes["continuous"]["bytes"]
    return {"clip_s": clip_s, "frames": frames, "size": list(size), "model": model, "backend": be.describe(),
            "overhead": overhead, "h264": sizes}
