"""A preview's video side (PyAV): a clip's facts, its sample runs of consecutive frames as `sr` decodes them, and the
sizes of an encoded clip's packets (keyframes apart: a keyframe costs several times another frame)."""
from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import numpy as np

from pipeline import sr
from pipeline.images.pixels import to_8bit
from pipeline.preview.inputs import Clip, Sample, centre_crop, clip_numbers, shown
from pipeline.sr import Job, encode_image

RUN_FRAMES = 8  # consecutive frames per sample run: single frames would all be keyframes and overstate the size


def clip(job: Job) -> Clip | str:
    """The clip's facts (what sr's probe says, its numbers held to what the file can hold) and the bytes of its
    audio and subtitle streams (copied by sr as they are), or why it cannot be read."""
    try:
        info = sr.probe_video(job.src)
        size = job.src.stat().st_size
    except Exception as e:  # VideoError, or a demuxer's own error: one line, the clip is left out
        return str(e).splitlines()[0] if str(e) else type(e).__name__
    frames, duration, rate, lies = clip_numbers(info, size)
    if lies:  # the header cannot be believed: its packets counted (one read of the file, no decoding)
        frames = _video_packets(job.src) or frames
        duration = frames / float(rate)
    return Clip(job, info, frames, _copied_bytes(job.src), duration, rate, lies)


def probe_clips(survey) -> None:
    """The survey's video jobs probed into its clips (or its unreadable files, with why); a header that lies is
    said, with what was counted instead."""
    for job in survey.video_jobs:
        c = clip(job)
        if isinstance(c, str):
            survey.unreadable.append(f"{shown(job.rel)}: {c}")
            continue
        survey.clips.append(c)
        if c.lies:
            survey.header_lies.append(f"{shown(job.rel)}: its header lies ({'; '.join(c.lies)}); counted "
                                      f"{c.frames} frames ({c.duration_s:.1f} s at {float(c.rate):g} fps)")


def _copied_bytes(path: Path) -> int:
    import av  # PyAV: only a preview of videos opens one

    with av.open(str(path)) as container:
        copied = [s for s in container.streams if s.type in ("audio", "subtitle")]
        return sum(p.size for p in container.demux(copied) if p.size) if copied else 0


def _video_packets(path: Path) -> int:
    """The video stream's packets (0 when the demuxer gives up: the header's numbers, clamped, stand)."""
    import av  # PyAV: only a preview of videos opens one

    try:
        with av.open(str(path)) as container:
            return sum(1 for p in container.demux(container.streams.video[0]) if p.size)
    except (av.FFmpegError, OSError):
        return 0


def _run(c: Clip, start_s: float) -> list[np.ndarray]:
    """RUN_FRAMES frames from `start_s` on, read as sr reads them (8-bit BGR)."""
    start = int(start_s / c.info.time_base) if c.info.time_base else None
    frames = []
    reader = sr.read_video(c.job.src, c.info, sr.VideoWindow(start=start), copy=False)
    try:
        for item in reader:
            if not isinstance(item, sr.VideoFrame):
                break
            p = item.pixels[:, :, :3]
            frames.append(to_8bit(p))
            if len(frames) == RUN_FRAMES:
                break
    finally:
        reader.close()
    return frames


def runs(clips: list[Clip], k: int, folder: Path, clip_path: Path) -> tuple[Path | None, list[Sample], int]:
    """K runs of consecutive frames spread over the clips (run i in clip i mod n, at the middle of its share of that
    clip), cropped, written as one lossless clip; the first frame of each run also as a PNG sample (the fidelity is
    measured on pictures, not on an encoder's output) into `folder`. Returns (the clip, the frame samples, its
    frames)."""
    folder.mkdir(parents=True, exist_ok=True)
    taken: list[np.ndarray] = []
    samples = []
    for i in range(k):
        c = clips[i % len(clips)]
        share = [j for j in range(k) if j % len(clips) == i % len(clips)]
        at = share.index(i)
        start_s = max(0.0, (at + 0.5) * c.duration_s / len(share) - RUN_FRAMES / 2 / float(c.rate))
        frames = [centre_crop(f)[0] for f in _run(c, start_s)]
        if not frames:
            continue
        name = f"frame-{i + 1:02d}-{shown(Path(c.job.rel).stem)[:40]}"
        path = folder / f"{name}.png"
        path.write_bytes(encode_image(frames[0], "png"))
        samples.append(Sample(name, path, frames[0], f"{shown(c.job.rel)} at {start_s:.1f} s",
                              frames[0].shape[:2] != (c.info.height, c.info.width)))
        taken.extend(frames)
    if not taken:
        return None, samples, 0
    return _write(clip_path, taken, clips[0].rate), samples, len(taken)


def _write(path: Path, frames: list[np.ndarray], rate: Fraction) -> Path:
    import av  # PyAV: only a preview of videos opens one

    path.parent.mkdir(parents=True, exist_ok=True)
    h, w = min(f.shape[0] for f in frames), min(f.shape[1] for f in frames)
    with av.open(str(path), "w") as out:
        v = out.add_stream("ffv1", rate=Fraction(rate))
        v.width, v.height, v.pix_fmt = w, h, "bgr0"
        for f in frames:
            for p in v.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(f[:h, :w]), format="bgr24")):
                out.mux(p)
        for p in v.encode():
            out.mux(p)
    return path


def packet_sizes(path: Path) -> tuple[list[int], list[int]]:
    """(keyframe packet sizes, other packet sizes) of an encoded clip's video stream."""
    import av  # PyAV: only a preview of videos opens one

    keys, others = [], []
    with av.open(str(path)) as container:
        for p in container.demux(container.streams.video[0]):
            if p.size:
                (keys if p.is_keyframe else others).append(p.size)
    return keys, others


KEYINT = {"h264": 250, "h265": 250, "vp9": 128, "av1": 250}  # the encoders' default keyframe interval (frames)


def clip_bytes(keys: list[int], others: list[int], frames: int, codec: str, area: float) -> float:
    """A whole clip's video bytes from a sample's packets: its keyframes at the encoder's interval, the other frames
    at the sample's mean; `area`: the clip's frame area over the sample's."""
    if not keys and not others:
        return 0.0
    if not others:  # intra only (FFV1): every frame is a keyframe
        return float(np.mean(keys)) * frames * area
    n_key = max(1, math.ceil(frames / KEYINT.get(codec, 250)))
    key = float(np.mean(keys)) if keys else float(np.mean(others))
    return (key * n_key + float(np.mean(others)) * max(0, frames - n_key)) * area
