"""What a preview runs on: INPUT's images and videos as `sr` finds them, the whole job's size read from headers (no
image is decoded for it), and the samples: K images spread over the folder, or K runs of consecutive frames spread
over the clips, decoded as `sr` decodes them and cropped to a centred window."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import numpy as np

from pipeline.errors import PipelineError
from pipeline.sr import HeaderError, ImageError, Job, check_header, discover, encode_image, read_image, read_image_bytes

CROP = 512  # samples larger than this are cropped to a centred CROP x CROP window (the page says so)
HEAD_BYTES = 1 << 18  # enough for a JPEG's frame header after most EXIF blocks; the whole file otherwise


@dataclass
class Picture:
    """One image of INPUT, its size from the header."""

    job: Job
    width: int
    height: int


@dataclass
class Clip:
    """One video of INPUT: what `sr` will read (pipeline.sr's probe), its frames, duration and rate as the file can
    hold them (clip_numbers), and the bytes of the streams it copies."""

    job: Job
    info: object  # pipeline.sr's VideoInfo
    frames: int
    audio_bytes: int
    duration_s: float = 0.0
    rate: Fraction = Fraction(25)
    lies: list[str] = field(default_factory=list)  # what its header says that the file cannot hold


@dataclass
class Survey:
    """INPUT as a whole: its images and clips, and the files that cannot be read (left out of the estimate)."""

    pictures: list[Picture] = field(default_factory=list)
    clips: list[Clip] = field(default_factory=list)
    video_jobs: list[Job] = field(default_factory=list)  # probed into `clips` by the video side (PyAV)
    unreadable: list[str] = field(default_factory=list)
    header_lies: list[str] = field(default_factory=list)  # a clip's header number the file cannot hold, and why

    def out_mpix(self, scale: float) -> tuple[float, float]:
        """(the images' output megapixels, the clips') for the whole job at `scale`."""
        images = sum(p.width * p.height for p in self.pictures) * scale * scale / 1e6
        frames = sum(c.info.width * c.info.height * c.frames for c in self.clips) * scale * scale / 1e6
        return images, frames

    def formats(self, scale: float) -> dict[str, float]:
        """Output megapixels per output image format (what the outputs' size is estimated from)."""
        by: dict[str, float] = {}
        for p in self.pictures:
            by[p.job.fmt] = by.get(p.job.fmt, 0.0) + p.width * p.height * scale * scale / 1e6
        return by


@dataclass
class Sample:
    """One sample image: its file in the preview's samples folder, the decoded (cropped) pixels, where it is from."""

    name: str
    path: Path
    pixels: np.ndarray
    source: str
    cropped: bool


def shown(name: str) -> str:
    """A file name as text every writer takes: bytes that are not UTF-8 (held as surrogates) written as \\xNN."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _header(path: Path) -> tuple[int, int]:
    """The size from the header, read as sr reads the file (regular files only, under its size cap, opened without
    blocking): its first HEAD_BYTES, the whole file (under that cap) only when the header sits further in."""
    head = read_image_bytes(path, HEAD_BYTES)
    try:
        return check_header(head)[1:]
    except HeaderError:
        if len(head) < HEAD_BYTES:
            raise
        return check_header(read_image_bytes(path))[1:]


def survey(input_path: Path, scratch: Path) -> Survey:
    """INPUT's jobs as `sr` lists them (`scratch`: an output folder that is never written), each image sized from
    its header (the videos are left to the video side's probe). A file sr would fail before reading it (not a
    regular file, a link leading outside INPUT) is left out with sr's reason, unread."""
    found = discover(input_path, scratch)
    result = Survey()
    for job in found.jobs:
        if job.problem:
            result.unreadable.append(f"{shown(job.rel)}: {job.problem}")
            continue
        if job.video:
            result.video_jobs.append(job)
            continue
        try:
            w, h = _header(job.src)
        except (HeaderError, ImageError, OSError) as e:
            result.unreadable.append(f"{shown(job.rel)}: {e}")
            continue
        result.pictures.append(Picture(job, w, h))
    return result


def check_readable(result: Survey, input_path: Path) -> None:
    """PipelineError (before any work) when not one image or video in INPUT can be read."""
    if not result.pictures and not result.clips:
        why = f" ({result.unreadable[0]})" if result.unreadable else ""
        raise PipelineError(f"no readable image or video in {input_path}{why}")


def spread(n: int, k: int) -> list[int]:
    """k indices spread evenly over range(n) (each in the middle of its share); all n of them when n <= k."""
    k = min(n, k)
    return [int((i + 0.5) * n / k) for i in range(k)]


def centre_crop(pixels: np.ndarray, side: int = CROP) -> tuple[np.ndarray, bool]:
    h, w = pixels.shape[:2]
    if h <= side and w <= side:
        return pixels, False
    y0, x0 = max(0, (h - side) // 2), max(0, (w - side) // 2)
    return np.ascontiguousarray(pixels[y0:y0 + side, x0:x0 + side]), True


def image_samples(pictures: list[Picture], k: int, folder: Path) -> list[Sample]:
    """K images spread over the folder (file order), decoded as `sr` decodes them (orientation applied, gray, alpha
    and 16-bit kept), cropped, written as PNG (lossless: the outputs are compared pixel for pixel) into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    samples = []
    for n, i in enumerate(spread(len(pictures), k)):
        job = pictures[i].job
        try:
            image = read_image(job.src)
        except ImageError:
            continue  # a file whose header reads but whose pixels do not: sr fails it too; the next one samples
        pixels, cropped = centre_crop(image.pixels)
        name = f"{n + 1:02d}-{shown(Path(job.rel).stem)[:40]}"
        path = folder / f"{name}.png"
        path.write_bytes(encode_image(pixels, "png"))
        samples.append(Sample(name, path, pixels, shown(job.rel), cropped))
    return samples


MAX_RATE = 1000.0  # fps; a header's rate above this (or not positive) is not believed
DEFAULT_RATE = Fraction(25)  # the rate assumed when the header's is not believed


def _rate(info, lies: list[str]) -> Fraction:
    rate = Fraction(info.rate) if info.rate else None
    if rate is not None and not (0 < rate <= MAX_RATE):
        lies.append(f"a frame rate of {float(rate):g} fps")
        rate = None
    return rate or DEFAULT_RATE


def _duration(info, lies: list[str]) -> float | None:
    d = info.duration_s
    if d is not None and not (math.isfinite(d) and d >= 0):
        lies.append(f"a duration of {d:g} s")
        return None
    return d or None


def clip_numbers(info, size: int) -> tuple[int, float, Fraction, list[str]]:
    """(frames, duration s, rate fps, what the header says that the file cannot hold) from pipeline.sr's probe of a
    clip of `size` bytes. Every frame takes at least one byte of the file, so the frames are held to `size`; a
    negative or non-finite duration or rate is not believed; a header frame count that its own duration x rate
    contradicts by more than 2x gives way to the smaller of the two."""
    lies: list[str] = []
    rate, duration = _rate(info, lies), _duration(info, lies)
    counted = int(info.frames) if info.frames_exact and info.frames is not None else None
    if counted is not None and counted < 1:
        lies.append(f"{counted} frames")
        counted = None
    timed = max(1, math.floor(duration * float(rate))) if duration else None
    if counted is not None and timed is not None and max(counted, timed) > 2 * min(counted, timed) + 2:
        lies.append(f"{counted} frames in {duration:g} s at {float(rate):g} fps")
        counted = min(counted, timed)
    frames = counted or timed or 1
    if frames > max(1, size):
        lies.append(f"{frames} frames in a file of {size} bytes")
        frames = max(1, size)
    return frames, frames / float(rate), rate, lies
