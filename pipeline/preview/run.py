"""One preview: options checked before any work, INPUT surveyed and sampled, each candidate measured, judged and
ranked, the report written."""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pipeline import backends, precisions, sr
from pipeline.analysis.candidates import candidate_statuses
from pipeline.artifacts.atomic import atomic_write
from pipeline.errors import PipelineError
from pipeline.preview import inputs, video
from pipeline.preview.estimate import estimate
from pipeline.preview.measure import Candidate, Measured, measure, pool
from pipeline.preview.verdict import RECOMMENDED, WITHIN, Judged, judge, rank

OUTPUT_PLACEHOLDER = "OUTPUT"  # where the recommended command's output path goes
WARM_UP = 128  # side of the crop each candidate runs once before it is timed (its first call's one-time costs)
MARK = ".srdeploy-preview"  # in OUTPUT and in OUTPUT/samples: preview made them, so it may replace what they hold
WRITTEN = ("report.json", "report.md", "report.html", "sheets")  # what preview writes directly in OUTPUT


@dataclass(frozen=True)
class PreviewOptions:
    input: str | Path
    output: str | Path = "outputs/preview"
    model: str | None = None
    scale: float | None = None
    backends: tuple[str, ...] | None = None      # None: every backend available here
    precisions: tuple[str, ...] | None = None    # None: every precision
    samples: int = 4
    log: Callable[[str], object] = print


@dataclass
class Prepared:
    opts: PreviewOptions
    model: object            # pipeline.sr.ModelChoice
    survey: inputs.Survey
    out_dir: Path
    candidates: list[Candidate] = field(default_factory=list)
    unavailable: list[dict] = field(default_factory=list)
    reference: Candidate | None = None  # the fp32 run every fidelity is measured against


def _check_names(given, known, flag: str) -> None:
    for name in given or ():
        if name not in known:
            raise PipelineError(f"unknown {flag} '{name}' (choose from: {', '.join(known)})")


def _model_name(opts: PreviewOptions) -> str | None:
    return opts.model


def _marked(folder: Path) -> bool:
    """A folder preview made (not a link, holding its MARK)."""
    return not folder.is_symlink() and (folder / MARK).is_file()


def check_output(out_dir: Path, input_path: Path) -> None:
    """OUTPUT is a folder outside INPUT holding nothing preview would replace that it did not write
    (PipelineError: one line)."""
    if os.path.lexists(out_dir) and not out_dir.is_dir():
        raise PipelineError(f"OUTPUT {out_dir} is a file; give a folder for the report")
    if input_path.is_dir() and sr.output_inside_input(input_path, out_dir):
        raise PipelineError(f"OUTPUT {out_dir} is the INPUT folder or lies inside it; give a folder outside "
                            f"{input_path} (preview would sample its own files and write among yours)")
    _check_ours(out_dir)


def _check_ours(out_dir: Path) -> None:
    """samples/ is replaced only when preview marked it, the report files and sheets/ only in a folder preview
    marked."""
    samples = out_dir / "samples"
    if os.path.lexists(samples) and not _marked(samples):
        raise PipelineError(f"{samples} was not made by preview (no {MARK} in it); give another --output "
                            "(preview replaces only the folders it made)")
    theirs = [n for n in WRITTEN if os.path.lexists(out_dir / n)]
    if theirs and not _marked(out_dir):
        raise PipelineError(f"{out_dir / theirs[0]} was not written by preview (no {MARK} in {out_dir}); give "
                            "another --output (preview replaces only the files it wrote)")


def _mark(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / MARK).is_file():
        atomic_write(folder / MARK, "made by `python -m pipeline preview`, which replaces what it wrote here "
                                    "(samples/, report.*) on its next run into this folder\n")


def _fresh_samples(out_dir: Path) -> Path:
    """OUTPUT and OUTPUT/samples marked as preview's, samples/ emptied of an earlier preview's samples (checked
    again here: only a folder preview marked is removed)."""
    _check_ours(out_dir)
    _mark(out_dir)
    samples = out_dir / "samples"
    if os.path.lexists(samples):
        shutil.rmtree(samples)
    _mark(samples)
    return samples


def _say_survey(survey: inputs.Survey, log: Callable[[str], object]) -> None:
    """One line per file left out and per clip whose header lies (before any work)."""
    for line in survey.unreadable:
        log(f"left out {line}")
    for line in survey.header_lies:
        log(f"note: {line}")


def prepare(opts: PreviewOptions) -> Prepared:
    """Every argument checked and INPUT read from its headers, before any work (PipelineError: one line)."""
    if opts.samples < 1:
        raise PipelineError(f"--samples must be at least 1, got {opts.samples}")
    _check_names(opts.backends, backends.NAMES, "backend in --backends")
    _check_names(opts.precisions, precisions.NAMES, "precision in --precisions")
    out_dir = Path(opts.output)
    if not Path(opts.input).exists():
        raise PipelineError(f"input not found: {opts.input}")
    check_output(out_dir, Path(opts.input))
    model = sr.resolve_model(sr.RunOptions(opts.input, out_dir, model=opts.model, scale=opts.scale))
    survey = inputs.survey(Path(opts.input), out_dir / "never-written")
    if survey.video_jobs:
        video.probe_clips(survey)
    inputs.check_readable(survey, Path(opts.input))
    _say_survey(survey, opts.log)
    prep = Prepared(opts, model, survey, out_dir)
    _candidates(prep)
    if not prep.candidates:
        why = "; ".join(f"{u['backend']} {u['precision']}: {u['reason']}" for u in prep.unavailable[:3])
        raise PipelineError(f"no backend can run {model.name} here ({why})")
    return prep


def _candidates(prep: Prepared) -> None:
    """Each available backend x precision (aliases left out, as compare does), the others with why; the fp32
    reference (PyTorch where it runs) first."""
    opts, name = prep.opts, _model_name(prep.opts)
    for p in opts.precisions or precisions.NAMES:
        for st in candidate_statuses(name, p, only=list(opts.backends) if opts.backends else None):
            if st.available:
                prep.candidates.append(Candidate(st.name, p))
            else:
                prep.unavailable.append({"backend": st.name, "precision": p, "reason": st.reason})
    fp32 = [c for c in prep.candidates if c.precision == precisions.DEFAULT]
    if not fp32:  # fidelity needs an fp32 output: the first backend that runs it, as a reference only
        st = next((s for s in candidate_statuses(name, precisions.DEFAULT) if s.available), None)
        prep.reference = Candidate(st.name, precisions.DEFAULT) if st is not None else None
    else:
        prep.reference = next((c for c in fp32 if backends.backend_class(c.backend).DESCRIPTOR.runs_weights),
                              fp32[0])
        prep.candidates.remove(prep.reference)
        prep.candidates.insert(0, prep.reference)


@dataclass
class Outcome:
    prep: Prepared
    judged: list[Judged]
    samples: list[inputs.Sample]
    image_samples: set[str]
    clip_frames: int
    seconds: float

    @property
    def recommended(self) -> Judged | None:
        return next((j for j in self.judged if j.verdict == "recommended"), None)

    def command(self) -> list[str] | None:
        """The recommended run's arguments after `python -m pipeline` (OUTPUT where the output path goes)."""
        best = self.recommended
        if best is None:
            return None
        c, opts = best.measured.candidate, self.prep.opts
        argv = ["sr", str(opts.input), OUTPUT_PLACEHOLDER]
        if opts.model is not None:
            argv += ["--model", str(opts.model)]
        if opts.scale is not None:
            argv += ["--scale", f"{opts.scale:g}"]
        return argv + ["--backend", c.backend, "--precision", c.precision]


def _sample(prep: Prepared, folder: Path) -> tuple[list[inputs.Sample], Path | None, int, int]:
    """The image samples and the clip frames' samples (one folder), the sample clip, its frames and frame area."""
    k = prep.opts.samples
    samples = inputs.image_samples(prep.survey.pictures, k, folder / "images") if prep.survey.pictures else []
    clip, frames, area = None, 0, 0
    if prep.survey.clips:

        clip, shots, frames = video.runs(prep.survey.clips, k, folder / "images", folder / "clip" / "runs.mkv")
        samples += shots
        area = shots[0].pixels.shape[0] * shots[0].pixels.shape[1] if shots else 0
    if not samples:
        raise PipelineError(f"no sample of {prep.opts.input} could be decoded")
    return samples, clip, frames, area


@dataclass
class _Work:
    """What every candidate's measurement shares."""

    prep: Prepared
    samples: list[inputs.Sample]
    clip: Path | None
    codec: str | None
    folder: Path
    warm_up: Path
    image_names: set[str]
    area: int

    def measure(self, c: Candidate, sub: str = "", split: bool = False) -> Measured:
        return measure(c, self.prep.opts.model, self.prep.model.scale, self.samples, self.clip, self.folder / sub,
                       self.codec, self.warm_up, split)

    def judge(self, m: Measured, reference: dict) -> Judged:
        scale = self.prep.model.scale
        return judge(m, estimate(m, self.prep.survey, scale, self.image_names, self.area), reference, scale)


def _confirm(w: _Work, judged: list[Judged]) -> list[Judged]:
    """The recommended one measured again, last (just before the user's sr run): its images' time split into the
    sample run's fixed part and a rate (measure.split_fixed), its clip's rate pooled over both runs; ranked again
    on that estimate."""
    best = next((j for j in judged if j.verdict == RECOMMENDED), None)
    if best is None:
        return judged
    again = w.measure(best.measured.candidate, "again", split=True)
    if again.error or again.failures:
        return judged
    pool(best.measured, again)
    best.estimate = estimate(best.measured, w.prep.survey, w.prep.model.scale, w.image_names, w.area)
    best.verdict = WITHIN
    return rank(judged)


def preview(prep: Prepared) -> Outcome:
    """Sample, measure every candidate (the fp32 reference first), judge and rank them."""
    t0 = time.perf_counter()
    samples, clip, frames, area = _sample(prep, _fresh_samples(prep.out_dir))
    codec = sr.codec_for(prep.survey.clips[0].job.fmt, None) if prep.survey.clips else None
    prep.opts.log(f"preview {prep.model.name} x{prep.model.scale:g}: {len(samples)} sample(s)"
                  + (f" and {frames} frames in runs" if frames else "") + f", {len(prep.candidates)} candidate(s)")
    with tempfile.TemporaryDirectory(prefix="preview-", dir=prep.out_dir) as work:
        warm_up = Path(work) / "warm-up.png"
        warm_up.write_bytes(sr.encode_image(inputs.centre_crop(samples[0].pixels, WARM_UP)[0], "png"))
        w = _Work(prep, samples, clip, codec, Path(work), warm_up,
                  {s.name for s in samples if not s.name.startswith("frame-")}, area)
        todo = list(prep.candidates)
        if prep.reference is not None and prep.reference not in todo:
            todo.insert(0, prep.reference)
        measured = []
        for c in todo:
            m = w.measure(c)
            measured.append(m)
            prep.opts.log(f"  {c.label}: " + (f"failed: {m.error}" if m.error else
                                              f"measured (load {m.setup_s:.1f} s{', built now' if m.built else ''})"))
        reference = measured[0].outputs if prep.reference is not None else {}
        judged = _confirm(w, rank([w.judge(m, reference) for m in measured if m.candidate in prep.candidates]))
    return Outcome(prep, judged, samples, w.image_names, frames, time.perf_counter() - t0)
