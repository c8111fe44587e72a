"""The whole job's time and size for one candidate, from what its sr runs on the samples measured.

    seconds  load + the job's output megapixels x ms/MPix, one formula for every candidate (the table shows all
             three). load: its setup (its load with its files cached), plus, for the recommended candidate, the
             sample images' fixed part (fill and drain, paid once by a job: its run split into that and a rate by a
             second run on the samples twice over). ms/MPix: the images' output megapixels (from headers) at the
             rate sr reached on the sample images and the clips' at the rate on the sample clip, over the job's
             megapixels: both rates are sr's processing seconds per output megapixel with decoding, inference and
             encoding (the clip's encoder at the run's codec and preset) overlapped as sr overlaps them. What it
             estimates: the `wall_s` of `sr --summary`.
    bytes    each output image format's megapixels x the bytes per megapixel of the sample outputs encoded in that
             format (as sr encodes them), plus each clip's frames at the sample clip's keyframe and other-frame
             packet sizes (keyframes at the encoder's interval), scaled by frame area, plus the copied streams' bytes.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline import sr
from pipeline.preview import video
from pipeline.preview.inputs import Survey
from pipeline.preview.measure import Measured


@dataclass
class Estimate:
    seconds: float | None           # load_s + the job's output megapixels x ms_per_mpix / 1000
    bytes: int | None
    ms_per_mpix: float | None       # sr's processing ms per output megapixel, at the samples' rates, for this job
    host_ms_per_mpix: float | None  # the host's decoding and encoding on the samples, per output megapixel (summed)
    load_s: float | None = None     # the load, plus the images' fixed part where it was measured apart


def _host_rate(runs) -> float | None:
    mpix = sum(r.out_mpix for r in runs)
    return 1000 * sum(r.decode_s + r.encode_s for r in runs) / mpix if mpix else None


def _sample_rate(runs) -> float | None:
    mpix = sum(r.out_mpix for r in runs)
    return 1000 * sum(r.process_s for r in runs) / mpix if mpix else None


def seconds(m: Measured, survey: Survey, scale: float) -> tuple[float | None, float | None, float | None]:
    """(the estimate, its load, its ms per output megapixel): estimate = load + MPix x ms/MPix / 1000."""
    images, frames = survey.out_mpix(scale)
    fixed = m.images_fixed_s if images else None
    load, work = m.setup_s + (fixed or 0.0), 0.0  # the fixed part is paid once by the job, not per megapixel
    for mpix, run, part in ((images, m.images, fixed), (frames, m.clip, None)):
        if mpix:
            if run is None or not run.out_mpix:
                return None, None, None
            work += mpix * (run.process_s - (part or 0.0)) / run.out_mpix
    rate = 1000 * work / (images + frames) if images + frames else None
    return load + work, load, rate


def _bytes_per_mpix(outputs: list[np.ndarray], fmt: str) -> float:
    """The sample outputs encoded as sr writes `fmt` (its conversion for the format, JPEG/WebP quality 95)."""
    size = mpix = 0.0
    for out in outputs:
        pixels, _ = sr.convert_for_format(out, fmt)
        size += len(sr.encode_image(pixels, fmt))
        mpix += out.shape[0] * out.shape[1] / 1e6
    return size / mpix


def image_bytes(m: Measured, survey: Survey, scale: float, names: set[str]) -> float | None:
    """`names`: the image samples (not the clips' frames)."""
    outputs = [o for n, o in m.outputs.items() if n in names] or list(m.outputs.values())
    formats = survey.formats(scale)
    if not formats:
        return 0.0
    if not outputs:
        return None
    return sum(mpix * _bytes_per_mpix(outputs, fmt) for fmt, mpix in formats.items())


def clip_bytes(m: Measured, survey: Survey, sample_area: int) -> float | None:
    if not survey.clips:
        return 0.0
    if m.clip_file is None or not m.clip_file.exists() or not sample_area:
        return None

    keys, others = video.packet_sizes(m.clip_file)
    total = 0.0
    for c in survey.clips:
        codec = sr.codec_for(c.job.fmt, None)
        total += video.clip_bytes(keys, others, c.frames, codec, c.info.width * c.info.height / sample_area)
        total += c.audio_bytes
    return total


def estimate(m: Measured, survey: Survey, scale: float, image_names: set[str], sample_area: int) -> Estimate:
    if m.error:
        return Estimate(None, None, None, None)
    runs = [r for r in (m.images if survey.pictures else None, m.clip) if r is not None]
    parts = [image_bytes(m, survey, scale, image_names), clip_bytes(m, survey, sample_area)]
    size = None if any(p is None for p in parts) else int(round(sum(parts)))
    total, load, rate = seconds(m, survey, scale)
    if rate is None and total is not None:  # a job of no output megapixels: the samples' own rate, said as is
        rate = _sample_rate(runs)
    return Estimate(total, size, rate, _host_rate(runs), load)
