"""One candidate (backend x precision) measured on the samples: loaded as `sr` loads it (its files made and cached on
first use, as sr makes them), warmed up once, then `sr` itself run on the sample images and on the sample clip with
that loaded backend, so the rate measured is the one sr reaches (its decode, tiling, inference streams and encode
overlapped as it overlaps them). What it wrote is read back for the fidelity and re-encoded for the sizes."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pipeline import backends, quality, sr
from pipeline.artifacts.cache import cache_dir
from pipeline.backends.pixels import nonfinite_pixels
from pipeline.errors import PipelineError, first_line
from pipeline.preview.inputs import Sample


@dataclass(frozen=True)
class Candidate:
    backend: str
    precision: str

    @property
    def label(self) -> str:
        return f"{self.backend} {self.precision}"

    @property
    def slug(self) -> str:
        return f"{self.backend}-{self.precision}"


@dataclass
class SrRun:
    """What one `sr` run on samples measured: its processing seconds, the output megapixels and frames, the host's
    seconds (decode, encode: summed over images, overlapped with inference in the run) and its records."""

    process_s: float
    out_mpix: float
    decode_s: float
    encode_s: float
    records: list


@dataclass
class Measured:
    candidate: Candidate
    setup_s: float = 0.0               # loading it with its files cached: sr's setup
    built: list[str] = field(default_factory=list)  # cache files made now (an export, a Q/DQ file, a quality record)
    images: SrRun | None = None
    images_fixed_s: float | None = None  # the sample run's part that does not grow with the job (fill and drain)
    clip: SrRun | None = None
    clip_file: Path | None = None      # the sample clip's output (its packets sized for the estimate)
    outputs: dict[str, np.ndarray] = field(default_factory=dict)  # sample name -> output as sr wrote it
    nonfinite: int = 0                 # output pixels with a NaN or inf, before any fp32 re-run
    failures: list[str] = field(default_factory=list)
    quality: dict | None = None        # the held-out quality record it stands on (bf16, int8)
    error: str = ""                    # it could not be loaded or run at all


def _cache_files() -> dict[str, int]:
    """The cache's files, not its hidden ones (`.NAME.lock` locks, `.NAME.part` and `.export-*/` work in flight):
    those are not artifacts."""
    root = cache_dir()
    if not root.is_dir():
        return {}
    files = (p.relative_to(root) for p in root.rglob("*") if p.is_file())
    return {str(r): (root / r).stat().st_mtime_ns for r in files if not any(s.startswith(".") for s in r.parts)}


def _built(before: dict[str, int]) -> list[str]:
    return sorted(k for k, v in _cache_files().items() if before.get(k) != v)


def _quiet(_line: str) -> None:
    pass


def load(c: Candidate, model: str | None, scale: float, m: Measured):
    """The loaded backend (sr's choose + load), its cached setup time and what was built for it now."""
    before = _cache_files()
    request = backends.BackendRequest(c.backend, c.precision)
    t0 = time.perf_counter()
    loaded = backends.load(backends.choose(request, model, scale, here=True, log=_quiet), log=_quiet)
    m.setup_s = time.perf_counter() - t0
    m.quality = quality.precision_loss(loaded, scale=scale)  # measured once and stored, as sr's first run does
    m.built = _built(before)
    if m.built:  # first-time work is not part of a later sr run's setup: time the load again, from the cache
        t0 = time.perf_counter()
        loaded = backends.load(backends.choose(request, model, scale, here=True, log=_quiet), log=_quiet)
        m.setup_s = time.perf_counter() - t0
    return loaded


def run_sr(loaded, src: Path, dst: Path, scale: float, **opts) -> SrRun:
    summary = sr.upscale(src, dst, backend=loaded, scale=scale, progress=False, log=_quiet, **opts)
    recs = summary.records
    return SrRun(summary.process_s, summary.out_mpix, sum(r.decode_s for r in recs), sum(r.encode_s for r in recs),
                 recs)


def _count_nonfinite(loaded, sample: Sample, scale: float) -> int:
    """The candidate's own output pixels with a NaN or inf on one sample (one whole-image call, no fp32 re-run)."""
    image = sr.read_image(sample.path)
    x = image.region_rgb(0, image.height, 0, image.width)[None]
    counts = nonfinite_pixels(np.asarray(loaded.infer(x, scale)))
    return 0 if counts is None else int(counts.sum())


def _read_outputs(m: Measured, run: SrRun, samples: list[Sample], loaded, scale: float) -> None:
    by_src = {s.path.resolve(): s for s in samples}
    for rec in run.records:
        sample = by_src.get(Path(rec.job.src).resolve())
        if sample is None:
            continue
        if rec.status != "ok" or rec.rerun:
            m.nonfinite += _count_nonfinite(loaded, sample, scale)
        if rec.status != "ok":
            m.failures.append(f"{sample.name}: {rec.reason}")
            continue
        m.outputs[sample.name] = sr.read_image(rec.job.dst).pixels


def _doubled(folder: Path, into: Path) -> Path:
    """The sample images twice over (links): a run of twice the work, whose extra time is the images' own."""
    into.mkdir(parents=True, exist_ok=True)
    for p in sorted(folder.glob("*.png")):
        for k in (1, 2):
            (into / f"{p.stem}~{k}.png").hardlink_to(p)
    return into


def split_fixed(once: SrRun, twice: SrRun) -> tuple[float, float]:
    """(fixed seconds, seconds per output megapixel) from a run on the samples and one on them twice over: the
    difference is the images' own time; the rest of the first run is its fill and drain (the first decode, the last
    encode, the streams' ramp), which a whole job pays once. The rate is held between half the plain rate and the
    plain rate (a noisy pair cannot make the fixed part negative or most of the run)."""
    plain = once.process_s / once.out_mpix
    rate = (twice.process_s - once.process_s) / max(twice.out_mpix - once.out_mpix, 1e-9)
    rate = min(plain, max(plain / 2, rate))
    return once.process_s - rate * once.out_mpix, rate


def measure(c: Candidate, model: str | None, scale: float, samples: list[Sample], clip: Path | None,
            work: Path, codec: str | None, warm_up: Path, split: bool = False) -> Measured:
    """Load, warm up (`warm_up`: a small crop of a sample, through sr), then sr on the samples and on the sample
    clip; a candidate that cannot load or run is returned with its one-line error."""
    m = Measured(c)
    try:
        loaded = load(c, model, scale, m)
        out = work / c.slug
        folder = samples[0].path.parent
        run_sr(loaded, warm_up, out / "warm-up" / warm_up.name, scale)
        m.images = run_sr(loaded, folder, out / "images", scale)
        _read_outputs(m, m.images, samples, loaded, scale)
        if split and len(samples) > 1 and m.images.out_mpix:
            twice = run_sr(loaded, _doubled(folder, out / "doubled"), out / "images-twice", scale)
            m.images_fixed_s, _ = split_fixed(m.images, twice)
        if clip is not None:
            m.clip_file = out / "clip" / clip.name
            m.clip = run_sr(loaded, clip, m.clip_file, scale, codec=codec, audio="drop")
            if m.clip.records and m.clip.records[0].status != "ok":
                m.failures.append(f"the sample clip: {m.clip.records[0].reason}")
    except (PipelineError, OSError, RuntimeError, ValueError, MemoryError) as e:
        m.error = first_line(e) or type(e).__name__
    return m


def _pooled(a: SrRun | None, b: SrRun | None) -> SrRun | None:
    if a is None or b is None:
        return a
    return SrRun(a.process_s + b.process_s, a.out_mpix + b.out_mpix, a.decode_s + b.decode_s,
                 a.encode_s + b.encode_s, a.records)


def pool(m: Measured, again: Measured) -> None:
    """A second measurement of the same candidate pooled into the first: its sr runs' seconds and megapixels summed
    (the rate over both), the mean of the two loads."""
    if again.images_fixed_s is not None:  # split into fixed and per-megapixel parts: its own, measured together
        m.images, m.images_fixed_s = again.images, again.images_fixed_s
    else:
        m.images = _pooled(m.images, again.images)
    m.clip = _pooled(m.clip, again.clip)
    m.setup_s = (m.setup_s + again.setup_s) / 2
