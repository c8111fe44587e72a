"""Encoder presets at the sr stage's output sizes (issue 52): frames per second, bytes per frame and luma PSNR
against the frames given of x264 and x265 at each preset, at the codec's default CRF (pipeline.sr.videofmt), on
upscaled-looking frames (a photo pan at 360p, scaled x3 by bicubic: smooth like an SR output, every frame
different). Equal CRF is not equal quality across presets: the PSNR column says what each file kept.

Frames are converted to yuv420p before timing: only the encoder (open, every frame, flush) is timed. Presets run
interleaved, round after round, and each row keeps the median, so a loaded machine slows every preset alike.

    python -m pipeline bench --encoders [--quick]     (the table alone, into OUTPUT/encoders.json)
"""
from __future__ import annotations

import io
import statistics
import time

import av
import cv2
import numpy as np

from pipeline.data.sample_images import HELD_OUT, load_rgb
from pipeline.sr import CRF, ENCODERS, encoder_options

PRESETS = ("ultrafast", "superfast", "veryfast", "faster", "fast", "medium")
CODECS = ("h264", "h265")


def sr_like_frames(width: int, height: int, frames: int, scale: int = 3) -> list[av.VideoFrame]:
    """`frames` yuv420p frames of width x height: a 4 px/frame pan over a held-out photo at 1/scale size, upscaled
    by bicubic (an SR output's smoothness)."""
    small_w, small_h = width // scale, height // scale
    photo = load_rgb(HELD_OUT[0])
    cover = max((small_w + 4 * frames) / photo.shape[1], small_h / photo.shape[0])
    photo = cv2.resize(photo, (int(np.ceil(photo.shape[1] * cover)), int(np.ceil(photo.shape[0] * cover))),
                       interpolation=cv2.INTER_AREA)
    out = []
    for i in range(frames):
        crop = np.ascontiguousarray(photo[:small_h, 4 * i:4 * i + small_w])
        big = cv2.resize(crop, (width, height), interpolation=cv2.INTER_CUBIC)
        out.append(av.VideoFrame.from_ndarray(big, format="rgb24").reformat(format="yuv420p"))
    return out


def encode_once(codec: str, preset: str, frames: list[av.VideoFrame], threads: int) -> tuple[float, int, bytes]:
    """(seconds, bytes, the file) of one encode of `frames` into an in-memory MP4 with the sr stage's options but
    `preset`."""
    buf = io.BytesIO()
    options = encoder_options(codec, CRF[codec][0], preset)
    t0 = time.perf_counter()
    with av.open(buf, "w", format="mp4") as out:
        s = out.add_stream(ENCODERS[codec], rate=24, options=options)
        s.width, s.height, s.pix_fmt = frames[0].width, frames[0].height, "yuv420p"
        s.codec_context.thread_count = threads
        for i, f in enumerate(frames):
            f.pts = i
            for p in s.encode(f):
                out.mux(p)
        for p in s.encode():
            out.mux(p)
    return time.perf_counter() - t0, buf.getbuffer().nbytes, buf.getvalue()


def luma_psnr(data: bytes, frames: list[av.VideoFrame]) -> float:
    """Mean Y-plane PSNR (dB) of the encoded file `data` against the `frames` it was made from."""
    scores = []
    with av.open(io.BytesIO(data)) as c:
        for got, want in zip(c.decode(video=0), frames, strict=True):
            a, b = (f.to_ndarray()[:f.height].astype(np.float64) for f in (got, want))  # yuv420p: Y rows first
            mse = float(np.mean((a - b) ** 2))
            scores.append(99.0 if mse == 0 else 10 * np.log10(255.0 ** 2 / mse))
    return float(np.mean(scores))


def preset_table(width: int = 1920, height: int = 1080, frames: int = 24, rounds: int = 3, threads: int = 2,
                 codecs=CODECS, presets=PRESETS, log=print) -> list[dict]:
    """One row per (codec, preset): median fps and bytes per frame over `rounds` interleaved rounds."""
    clip = sr_like_frames(width, height, frames)
    secs: dict[tuple[str, str], list[float]] = {(c, p): [] for c in codecs for p in presets}
    size: dict[tuple[str, str], int] = {}
    psnr: dict[tuple[str, str], float] = {}
    for _ in range(rounds):
        for key in secs:
            s, n, data = encode_once(*key, clip, threads)
            secs[key].append(s)
            if key not in size:  # size and quality of one encode (threaded x264 varies a little between rounds)
                size[key], psnr[key] = n, luma_psnr(data, clip)
    rows = []
    for (codec, preset), ss in secs.items():
        med = statistics.median(ss)
        rows.append({"codec": codec, "preset": preset, "crf": CRF[codec][0], "size": [width, height],
                     "threads": threads, "frames": frames, "rounds": rounds, "fps": round(frames / med, 2),
                     "fps_samples": [round(frames / s, 2) for s in ss],
                     "kbytes_per_frame": round(size[(codec, preset)] / frames / 1024, 1),
                     "psnr_y_db": round(psnr[(codec, preset)], 2)})
        log(f"  {codec} {preset:>9} {width}x{height} crf {CRF[codec][0]}: {rows[-1]['fps']:6.2f} fps, "
            f"{rows[-1]['kbytes_per_frame']:7.1f} KiB/frame, Y-PSNR {rows[-1]['psnr_y_db']:.2f} dB ({threads} "
            f"threads, median of {rounds})")
    return rows
