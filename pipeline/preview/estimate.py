"""The whole job's time and size for one candidate, from what its sr runs on the samples measured.

    seconds  setup (its load with its files cached) + the images' output megapixels (from headers) x the rate sr
             reached on the sample images + the clips' output megapixels x the rate on the sample clip: both rates
             are sr's processing seconds per output megapixel with decoding, inference and encoding (the clip's
             encoder at the run's codec and preset) overlapped as sr overlaps them. For the recommended candidate
             the sample images' run is split into its fixed part (fill and drain, paid once by a job) and a rate,
             from a second run on the samples twice over. What it estimates: the `wall_s` of `sr --summary`.
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
    seconds: float | None
    bytes: int | None
    ms_per_mpix: float | None      # sr's processing ms per output megapixel on the samples (all of them)
    host_ms_per_mpix: float | None  # of which the host's decoding and encoding, per output megapixel (summed)


def _rate(runs) -> tuple[float | None, float | None]:
    mpix = sum(r.out_mpix for r in runs)
    if not mpix:
        return None, None
    return (1000 * sum(r.process_s for r in runs) / mpix,
            1000 * sum(r.decode_s + r.encode_s for r in runs) / mpix)


def seconds(m: Measured, survey: Survey, scale: float) -> float | None:
    images, frames = survey.out_mpix(scale)
    total = m.setup_s
    for mpix, run, fixed in ((images, m.images, m.images_fixed_s), (frames, m.clip, None)):
        if mpix:
            if run is None or not run.out_mpix:
                return None
            fixed = fixed or 0.0  # paid once by the job, not per megapixel
            total += fixed + mpix * (run.process_s - fixed) / run.out_mpix
    return total


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
    rate, host = _rate(runs)
    parts = [image_bytes(m, survey, scale, image_names), clip_bytes(m, survey, sample_area)]
    size = None if any(p is None for p in parts) else int(round(sum(parts)))
    return Estimate(seconds(m, survey, scale), size, rate, host)
