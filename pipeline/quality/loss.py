"""What a lower precision costs, measured and judged: the Y-PSNR and SSIM change against fp32 on the held-out images,
and whether it is within the precision's budget (pipeline.precisions). Choosing a precision from these records is
`--precision auto`'s job (pipeline.backends.select), not this module's.

    precision_loss(backend, scale) -> dict   from the store, or measured now (a few seconds) and stored
    stored_for(model, backend, precision, scale, file_sha256) -> dict | None   the stored record, nothing loaded
    gate(backend, scale) -> Verdict | None   the gate's verdict on a loaded backend (within budget or not, why, the
                                             share of the model's gain over bicubic it keeps): the one public door
    verdict(record) -> Verdict               the same, from a record in hand
    baseline(backend, scale) -> dict | None  an fp32 backend's own scores and bicubic's (what the model adds)
    loss_line(record) -> str          one line: the loss, its budget, and whether it is within it
    summary(record) -> dict           the loss as a report row carries it (bench, compare)

The gate (GATE_VERSION 3) has two rules (rule()). The gain rule: a lower precision is within budget when its Y-PSNR
drop is within its budget, its worst image's fidelity to fp32 at or above its floor, and it keeps GAIN_KEPT_MIN of
the model's gain over bicubic in PSNR-Y and in SSIM-Y (pipeline.quality.gain). Where fp32 is at or below bicubic
there (a GAN model, which does not aim at PSNR), the fidelity rule: its mean and worst image's Y-PSNR and its worst
SSIM-Y against fp32's own output at or above the precision's floors (pipeline.quality.fidelity).

The same backend runs the held-out images (degraded as in training, at the run's scale) at fp32 and at its
precision; both outputs are rounded to 8 bits and scored against the originals, border cropped
(pipeline.quality.metrics' protocol). A record holds for exactly what ran (identity()): the SHA-256 of the file
the backend runs at that scale (Backend.run_file: openvino's folded sibling at an integer scale, its Q/DQ file for
int8), the backend, precision and scale, and the machine (pipeline.native.machine.numerics: CPU, cores, library
versions, OpenVINO's version, whether bf16 arithmetic is used). It is kept under the artifact cache's quality/
folder, checked field by field on read, and measured again (once, under a lock) when anything differs or it is not a
well-formed record. The fp32 side is the backend's own fp32 twin (Backend.fp32_twin): this module runs backends it
is given, and never picks or loads one by name.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.artifacts.atomic import atomic_write
from pipeline.artifacts.cache import cache_dir
from pipeline.artifacts.confine import file_token, open_inside
from pipeline.artifacts.stamp import content_sha256, made_once
from pipeline.data import sample_images
from pipeline.data.degradation import make_pair, upscale_bicubic
from pipeline.errors import PipelineError
from pipeline.native.machine import numerics as machine
from pipeline.precisions import BUDGET_DB, DEFAULT, GAIN_KEPT_MIN, GATE_VERSION
from pipeline.quality import fidelity, gain
from pipeline.quality.metrics import crop_border_for, psnr_y, ssim_y

if TYPE_CHECKING:  # the interface it runs; this package sits below pipeline.backends and never loads one
    from pipeline.backends.base import Backend

WHEN = "%Y-%m-%d %H:%M:%S"  # a measurement's time, as pipeline.backends.auto.measure writes it: they sort as text


def identity(backend: Backend, scale: float) -> dict:
    """Says what a quality record holds for.

    Args:
        backend: the loaded backend.
        scale: the scale it runs at.

    Returns:
        The record's identifying fields: the file that runs at `scale` (its SHA-256), backend, precision, scale,
        machine and the gate's rule (a record judged under an older one is measured again).
    """
    return _ident(backend.model_name, backend.name, backend.precision, scale,
                  content_sha256(backend.run_file(scale)))


def _ident(model: str, backend: str, precision: str, scale: float, file_sha256: str) -> dict:
    return {"model": model, "backend": backend, "precision": precision, "scale": float(scale),
            "file_sha256": file_sha256, "machine": machine(), "gate": GATE_VERSION}


def record_key(fields: dict) -> str:
    """Hashes a record's identifying fields into a short stable key (its store file's name ends with it).

    Args:
        fields: the identifying fields (identity()).

    Returns:
        The key.
    """
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def _store(ident: dict) -> Path:
    name = (f"{file_token(ident['model'])}-{ident['backend']}-{ident['precision']}-x{ident['scale']:g}-"
            f"{record_key(ident)}.json")
    return cache_dir() / "quality" / name


def finite_number(v) -> bool:
    """Says whether `v` is a finite int or float (not a bool): what a record's numbers must be.

    Args:
        v: any value read from a record.

    Returns:
        True for a finite number.
    """
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def record_problem(record, ident: dict) -> str | None:
    """Says why a stored record does not describe `ident` or is not a well-formed record.

    Args:
        record: the stored record, as read.
        ident: the fields it must match (identity()).

    Returns:
        The reason, or None when the record holds.
    """
    if (problem := _ident_problem(record, ident)) is not None:
        return problem
    if not all(finite_number(record.get(k)) for k in ("psnr_loss_db", "ssim_loss", "psnr", "psnr_fp32")):
        return "its losses are not numbers"
    return _scores_problem(record) or consistency_problem(record)


def _ident_problem(record, ident: dict) -> str | None:
    """Why `record` is not a record made for `ident` (a loss or a baseline), or None."""
    if not isinstance(record, dict):
        return "it is not a record"
    for k, v in ident.items():
        if record.get(k) != v:
            return f"its {k.replace('_', ' ')} differs"
    return None


def _scores_problem(record: dict) -> str | None:
    """Why a record's image count or fp32 and bicubic scores are not what a measurement writes, or None."""
    images = record.get("images")
    if not isinstance(images, int) or isinstance(images, bool) or images < 1:
        return "its image count is not a positive number"
    if not all(finite_number(record.get(k)) for k in ("psnr_fp32", "ssim_fp32", "psnr_bicubic", "ssim_bicubic")):
        return "its fp32 and bicubic scores are not numbers"
    return None


# A record's derived figures are rounded from the same measurement: they agree within the rounding, or were edited.
TOLERANCE = {"psnr_loss_db": 2e-4, "ssim_loss": 2e-5}


def consistency_problem(record: dict) -> str | None:
    """Why a record's own figures disagree (its loss is not the difference of its own PSNR fields; SSIM likewise),
    or None: an edited record is measured again, never trusted for its loss alone."""
    for loss, (ref, got) in (("psnr_loss_db", ("psnr_fp32", "psnr")), ("ssim_loss", ("ssim_fp32", "ssim"))):
        values = [record.get(k) for k in (loss, ref, got)]
        if not all(finite_number(v) for v in values):
            return f"its {loss.replace('_', ' ')} figures are not numbers"
        if abs(values[0] - (values[1] - values[2])) > TOLERANCE[loss]:
            return f"its {loss.replace('_', ' ')} is not the difference of its own {ref} and {got} (edited?)"
    return fidelity.consistency_problem(record)


def _bicubic(pairs, scale: float) -> tuple[float, float]:
    """(mean Y-PSNR, mean SSIM) of plain bicubic against the HR photos: the baseline the model's gain is over
    (pipeline.analysis.evaluate's, the model card's)."""
    ups = [(upscale_bicubic(lr, hr.shape[:2]), hr) for lr, hr in pairs]
    border = crop_border_for(scale)
    return (float(np.mean([psnr_y(u, hr, border) for u, hr in ups])),
            float(np.mean([ssim_y(u, hr, border) for u, hr in ups])))


def _scores(backend: Backend, pairs, scale: float, bar=None) -> tuple[float, float, list[np.ndarray]]:
    """(mean Y-PSNR, mean SSIM against the HR photos, the 8-bit outputs)."""
    psnr, ssim, outs = [], [], []
    for lr, hr in pairs:
        x = np.ascontiguousarray((lr.astype(np.float32) / 255).transpose(2, 0, 1)[None])
        out = fidelity.to_image(backend.infer(x, scale)[0])
        psnr.append(psnr_y(out, hr, crop_border_for(scale)))
        ssim.append(ssim_y(out, hr, crop_border_for(scale)))
        outs.append(out)
        if bar is not None:
            bar.update(1)
    return float(np.mean(psnr)), float(np.mean(ssim)), outs


def applies(backend: Backend) -> bool:
    """Says whether a precision loss is measured for this loaded backend.

    Args:
        backend: the loaded backend.

    Returns:
        True for bf16 and int8 on a backend that runs a file (fp16 is a graph precision, checked by `compare`).
    """
    return backend.precision in BUDGET_DB and backend.model_file() is not None


def run_scale(backend: Backend, scale: float | None) -> float:
    """Gives the scale a measurement or a pick is for.

    Args:
        backend: the loaded backend (its model's scale is the default).
        scale: the scale given, or None.

    Returns:
        `scale`, else the model's.
    """
    return float(backend.spec.default_scale if scale is None else scale)


def measure(backend: Backend, scale: float | None = None, progress=None) -> dict:
    """Measures what a lower precision loses against fp32, now.

    Args:
        backend: the loaded backend; it and its fp32 twin score the held-out images.
        scale: the scale (default: the model's).
        progress: `progress(total, unit, desc)` makes a progress bar, or None.

    Returns:
        The record of the difference, with identity()'s fields.
    """
    scale = run_scale(backend, scale)
    pairs = _held_out_pairs(scale)
    (psnr32, ssim32, outs32), (psnr, ssim, outs) = _scored([backend.fp32_twin(), backend], pairs, scale, progress,
                                                           f"measuring {backend.precision}'s loss")
    close = [fidelity.fidelity_db(o, r, scale) for o, r in zip(outs, outs32, strict=True)]
    alike = [fidelity.ssim_to_fp32(o, r, scale) for o, r in zip(outs, outs32, strict=True)]
    return {**_fp32_and_bicubic(backend, scale, pairs, psnr32, ssim32), "psnr": round(psnr, 4),
            "psnr_loss_db": round(psnr32 - psnr, 4), "ssim": round(ssim, 5), "ssim_loss": round(ssim32 - ssim, 5),
            "budget_db": BUDGET_DB.get(backend.precision), **fidelity.figures(close), **fidelity.ssim_figures(alike),
            "fidelity_floor_db": fidelity.floor(backend.precision)}


def _held_out_pairs(scale: float) -> list:
    """The held-out photos as (LR, HR) pairs at `scale`, degraded as in training (PyTorch)."""
    return [make_pair(hr, scale) for hr in sample_images.held_out().values()]


def _scored(runs: list[Backend], pairs, scale: float, progress, desc: str) -> list[tuple]:
    """_scores of each backend in `runs` on `pairs`, under one progress bar (`progress(total, unit, desc)`)."""
    bar = progress(len(runs) * len(pairs), "image", desc) if progress else None
    try:
        return [_scores(b, pairs, scale, bar) for b in runs]
    finally:
        if bar is not None:
            bar.close()


def _fp32_and_bicubic(backend: Backend, scale: float, pairs, psnr32: float, ssim32: float) -> dict:
    """The fields a loss and a baseline share: identity(), the images, fp32's and bicubic's scores, the file, when."""
    psnr_bic, ssim_bic = _bicubic(pairs, scale)
    return {**identity(backend, scale), "images": len(pairs), "psnr_fp32": round(psnr32, 4),
            "ssim_fp32": round(ssim32, 5), "psnr_bicubic": round(psnr_bic, 4), "ssim_bicubic": round(ssim_bic, 5),
            "file": str(backend.run_file(scale)), "when": time.strftime(WHEN)}


def precision_loss(backend: Backend, log=None, scale: float | None = None, progress=None) -> dict | None:
    """Gives the precision-loss record of a loaded backend that runs a lower precision.

    The record stored for the file that runs, the scale and this machine is reused; without one it is measured now
    (once: a second process waits for the first).

    Args:
        backend: the loaded backend.
        log: where a line about a measurement goes, or None.
        scale: the scale (default: the model's).
        progress: `progress(total, unit, desc)` makes a progress bar, or None.

    Returns:
        The record, or None for fp32 and fp16 and for a backend that runs no file.
    """
    if not applies(backend):
        return None
    scale = run_scale(backend, scale)
    return _kept(identity(backend, scale), record_problem, lambda: measure(backend, scale=scale, progress=progress),
                 log, f"measuring what {backend.precision} costs on the held-out images at x{scale:g}")


def _kept(ident: dict, problem, make, log, saying: str, can_make=None) -> dict | None:
    """The record stored for `ident` when `problem` finds none in it; else `make()` now, stored, once (a second
    process waits for the first and reads it), `log` saying `saying` first; None where `can_make()` says it cannot
    be made here."""
    path = _store(ident)
    record, _ = _read(path, ident, problem)
    if record is not None:
        return record
    with made_once(path):
        record, why = _read(path, ident, problem)  # measured by another process while this one waited
        if record is not None:
            return record
        if can_make is not None and not can_make():
            return None
        if log is not None:
            again = "" if why is None else f" (the stored record is not used: {why})"
            log(f"{saying}, once for this file, scale and machine{again}")
        record = make()
        atomic_write(path, json.dumps(record, indent=2) + "\n")
    return record


def _read(path: Path, ident: dict, problem=None) -> tuple[dict | None, str | None]:
    """(the record at `path` when it holds for `ident`, else None; why not, None when there is none). Read only as a
    regular file inside the cache's quality folder (no link followed: a record elsewhere is measured again)."""
    if not path.is_symlink() and not path.exists():
        return None, None
    try:
        fd = open_inside(path.parent, path.name)
    except PipelineError:
        return None, "it is a link or not a regular file inside the cache"
    try:
        with os.fdopen(fd, "rb") as f:
            record = json.loads(f.read().decode())
    except (OSError, ValueError, RecursionError):
        return None, "it is not readable JSON"
    problem = (problem or record_problem)(record, ident)
    return (record, None) if problem is None else (None, problem)


def stored(backend: Backend, scale: float | None = None) -> dict | None:
    """Reads the record measured earlier for the file this backend runs.

    Args:
        backend: the loaded backend (its file, precision and this machine pick the record).
        scale: the scale (default: the model's).

    Returns:
        The record, or None (nothing stored, or a record that does not hold).
    """
    if not applies(backend):
        return None
    ident = identity(backend, run_scale(backend, scale))
    return _read(_store(ident), ident)[0]


def stored_for(model: str, backend: str, precision: str, scale: float, file_sha256: str) -> dict | None:
    """Reads the record measured earlier for exactly these values, with no backend loaded (a stored pick is checked
    by them before anything loads).

    Args:
        model, backend, precision, scale: what ran.
        file_sha256: the content SHA-256 of the file that ran at `scale` (Backend.run_file's).

    Returns:
        The record for this machine and gate rule, or None (nothing stored, or a record that does not hold).
    """
    ident = _ident(model, backend, precision, scale, file_sha256)
    return _read(_store(ident), ident)[0]


def baseline_applies(backend: Backend) -> bool:
    """Whether what the model adds over bicubic is measured with this loaded backend: fp32, running a file, of a
    model trained on the held-out set's degradation (a user's model, trained on its own, is not judged by it)."""
    return backend.precision == DEFAULT and backend.model_file() is not None and backend.spec.trained_here


def baseline_problem(record, ident: dict) -> str | None:
    """Why a stored baseline does not describe `ident` or is not one, or None."""
    return _ident_problem(record, ident) or _scores_problem(record)


def measure_baseline(backend: Backend, scale: float, progress=None) -> dict:
    """An fp32 backend's and bicubic's scores on the held-out set at `scale`, with identity()'s fields."""
    pairs = _held_out_pairs(scale)
    [(psnr32, ssim32, _)] = _scored([backend], pairs, scale, progress, "measuring what the model adds over bicubic")
    return _fp32_and_bicubic(backend, scale, pairs, psnr32, ssim32)


def _has_torch() -> bool:
    """Whether PyTorch imports: it makes the held-out LR images (pipeline.data.degradation), so a deploy-only
    install (no PyTorch) measures no baseline and says nothing about the model's gain."""
    try:
        import torch.nn.functional  # noqa: F401
    except ImportError:
        return False
    return True


def baseline(backend: Backend, scale: float | None = None, log=None, progress=None) -> dict | None:
    """For a loaded fp32 backend: its own and bicubic's scores on the held-out photos at `scale` (what the model
    adds, gain.model_gain), stored, or measured now (about a second for srcnn) once per file, scale and machine;
    None for another precision, a backend that runs no file, a user's own model (baseline_applies), or where
    PyTorch is missing and nothing is stored."""
    if not baseline_applies(backend):
        return None
    scale = run_scale(backend, scale)
    return _kept(identity(backend, scale), baseline_problem, lambda: measure_baseline(backend, scale, progress), log,
                 f"measuring what {backend.model_name} adds over bicubic on the held-out images at x{scale:g}",
                 can_make=_has_torch)


def budget(record: dict) -> float:
    """Gives the budget a record is held to: today's for its precision.

    A stored record keeps its measured loss; the budget is policy, read now.

    Args:
        record: a precision-loss record.

    Returns:
        The budget in dB of Y-PSNR.
    """
    return BUDGET_DB[record["precision"]]


def within_loss(record: dict) -> bool:
    return record["psnr_loss_db"] <= budget(record)


def within_floor(record: dict) -> bool:
    return fidelity.within_floor(record["fidelity_worst_db"], record["precision"])


GAIN_RULE = "gain"  # the model adds over bicubic: the budget, the worst image's fidelity floor and the gain kept
FIDELITY_RULE = "fidelity"  # it does not (a GAN model): fidelity to fp32 alone (mean, worst image, SSIM floors)


def rule(record: dict) -> str:
    """Which rule judges a record: the fidelity rule where its fp32 output is not above bicubic on its held-out
    photos in PSNR-Y or SSIM-Y (there is no gain to keep, and the ground-truth drop says nothing), else the gain
    rule."""
    return FIDELITY_RULE if gain.adds_nothing(gain.model_gain(record)) else GAIN_RULE


def within_budget(record: dict) -> bool:
    """The quality gate: says whether a record passes.

    Args:
        record: a precision-loss record.

    Returns:
        Under the gain rule, True when the drop against the ground truth is within its budget, the worst image's
        fidelity to fp32 is at or above its floor, and GAIN_KEPT_MIN of the model's gain over bicubic is kept in
        PSNR-Y and SSIM-Y; under the fidelity rule, when the mean and worst image's fidelity and the worst SSIM-Y to
        fp32 are at or above their floors.
    """
    if rule(record) == FIDELITY_RULE:
        return not fidelity.short(record)
    return within_loss(record) and within_floor(record) and gain.keeps_enough(record)


@dataclass(frozen=True)
class Verdict:
    """The gate's verdict on one measured lower precision."""

    precision: str
    scale: float
    within_budget: bool
    reasons: tuple[str, ...]   # why not, one entry per failed test ('OVER its 0.1 dB budget', ...); () when within
    gain: dict                 # the model's gain over bicubic at fp32: {psnr_y (dB), ssim_y}
    gain_kept: dict | None     # the share of it kept: {psnr_y, ssim_y} (fractions); None: the model adds none
    record: dict               # the quality record judged (pipeline.quality.loss.measure's fields)
    rule: str = GAIN_RULE      # GAIN_RULE or FIDELITY_RULE (rule(): whether fp32 is above bicubic here)

    @property
    def line(self) -> str:
        return loss_line(self.record, advice=False)


def verdict(record: dict) -> Verdict:
    """The gate's verdict on a quality record (precision_loss's or stored()'s)."""
    if rule(record) == FIDELITY_RULE:
        reasons = list(fidelity.short(record))
    else:
        reasons = ([f"OVER its {budget(record):g} dB budget"] if not within_loss(record) else []) + \
            (["BELOW its fidelity floor"] if not within_floor(record) else []) + \
            [why for why in (gain.short(record),) if why is not None]
    return Verdict(record["precision"], record["scale"], not reasons, tuple(reasons), gain.model_gain(record),
                   gain.gain_kept(record), record, rule(record))


def gate(backend: Backend, scale: float | None = None, *, measure: bool = True, log=None,
         progress=None) -> Verdict | None:
    """The gate's verdict on a loaded backend at `scale` (default: the model's): its record stored, or measured now
    when `measure` (a few seconds, once per file, scale and machine). None when the gate does not apply (fp32, the
    reference; fp16, judged by `compare`; a backend running no file: applies()) or, without `measure`, nothing is
    stored yet."""
    record = precision_loss(backend, log=log, scale=scale, progress=progress) if measure else stored(backend, scale)
    return None if record is None else verdict(record)


def summary(record: dict | None) -> dict | None:
    """Gives the measured loss as a report row or --summary carries it (bench, compare, sr).

    Args:
        record: a precision-loss record, or None.

    Returns:
        The row's fields, `fidelity` and `gain_kept` ({psnr_y, ssim_y} fractions; None where the model adds nothing
        over bicubic) included, or None (fp32, or nothing measured).
    """
    if record is None:
        return None
    judged = verdict(record)
    return {"psnr_loss_db": record["psnr_loss_db"], "ssim_loss": record["ssim_loss"], "budget_db": budget(record),
            "within_budget": judged.within_budget, "why_not": list(judged.reasons), "images": record["images"],
            "fidelity": fidelity.summary(record["fidelity_db"], record["precision"], "held-out"),
            "gain_kept": judged.gain_kept, "model_gain": judged.gain, "rule": judged.rule}


def loss_line(record: dict, advice: bool = True) -> str:
    """Says a record in one line.

    For example: "bf16 loses 0.007 dB Y-PSNR (SSIM 0.0001) against fp32 on the 4 held-out images, keeps 99 % of the
    model's PSNR-Y gain over bicubic and 99 % of its SSIM-Y gain, fidelity to fp32 54.8 dB (worst image 53.0, floor
    45), within its 0.02 dB budget, fidelity floor and 90 % of the gain".

    Args:
        record: a precision-loss record.
        advice: when the record is over its budget, floor or gain rule, tell a run of that precision to use fp32
            (False where that precision was already left out).

    Returns:
        The line.
    """
    p = record["precision"]
    judged = verdict(record)
    if judged.rule == FIDELITY_RULE:
        return (f"{p} judged by fidelity to fp32 (fp32 is not above bicubic on the {record['images']} held-out "
                f"images, {gain.gain_text(judged.gain)}: a model that does not aim at PSNR, e.g. a GAN), "
                f"{fidelity.rule_line(record)}, "
                + ("within its fidelity floors" if judged.within_budget
                   else " and ".join(judged.reasons) + (": use fp32 for exact output" if advice else "")))
    kept = gain.kept_text(judged.gain_kept) if judged.gain_kept is not None else "the model adds nothing over " \
        "bicubic here"
    verdict_text = (f"within its {budget(record):g} dB budget, fidelity floor and {100 * GAIN_KEPT_MIN:.0f} % of "
                    "the gain" if judged.within_budget
                    else " and ".join(judged.reasons) + (": use fp32 for exact output" if advice else ""))
    return (f"{p} loses {record['psnr_loss_db']:.3f} dB Y-PSNR (SSIM {record['ssim_loss']:.4f}) against fp32 on the "
            f"{record['images']} held-out images, {kept}, "
            f"{fidelity.line(record['fidelity_mean_db'], record['fidelity_worst_db'], p)}, {verdict_text}")


def psnr_y_loss(run: Any, fp32: Any, scale: float) -> dict:
    """What `run` loses against `fp32` in mean Y-PSNR on the held-out images at `scale`, scored as measure() scores
    a backend and its fp32 twin (8-bit outputs against the originals, border cropped): any two objects with
    `infer(batch, scale)`, e.g. a peer's runtime in bench.

    Returns:
        {"images", "psnr_fp32", "psnr", "psnr_loss_db"}.
    """
    pairs = _held_out_pairs(scale)
    (psnr32, _, _), (psnr, _, _) = (_scores(b, pairs, scale) for b in (fp32, run))
    return {"images": len(pairs), "psnr_fp32": round(psnr32, 4), "psnr": round(psnr, 4),
            "psnr_loss_db": round(psnr32 - psnr, 4)}
