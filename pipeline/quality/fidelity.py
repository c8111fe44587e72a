"""Fidelity: how close a lower precision's output is to fp32's own output, as Y-PSNR (8-bit outputs, border
cropped: pipeline.quality.metrics' protocol) per image, its mean and its worst image, held to a floor per precision
(pipeline.precisions.FIDELITY_FLOOR_DB). The ground-truth drop (pipeline.quality.loss) says little for a model far
from the ground truth (a GAN-trained or random checkpoint: ~0 dB whatever the precision does); fidelity says how far
the precision moved the output itself.

    fidelity_db(out, ref, scale) -> float       one image (identical: CAP_DB)
    figures(values) -> dict                     a quality record's fields: per image, mean, worst
    consistency_problem(record) -> str | None   a record whose mean or worst is not its own per-image figures'
    summary(values, precision, on) -> dict      the `fidelity` a report row carries
    ssim_to_fp32(out, ref, scale) -> float      SSIM-Y of one image against fp32's
    short(record) -> tuple[str, ...]            the fidelity rule's failures (mean, worst, SSIM floors), () within

The fidelity rule (pipeline.quality.loss.verdict) judges a lower precision by these alone where the model's fp32
output is not above bicubic on the held-out photos (a GAN model such as Real-ESRGAN, which does not aim at PSNR):
there is no gain over bicubic to keep, and the ground-truth drop says nothing, but what a user sees is the output
moved away from fp32's.
"""
from __future__ import annotations

import math

import numpy as np

from pipeline.precisions import FIDELITY_FLOOR_DB, FIDELITY_MEAN_FLOOR_DB, FIDELITY_SSIM_FLOOR
from pipeline.quality.metrics import crop_border_for, psnr_y, ssim_y

CAP_DB = 100.0  # identical outputs (infinite PSNR) are recorded as this: JSON has no infinity
KEYS = ("fidelity_db", "fidelity_mean_db", "fidelity_worst_db")
SSIM_KEYS = ("fidelity_ssim", "fidelity_ssim_worst")


def to_image(y: np.ndarray) -> np.ndarray:
    """A CHW float output in [0, 1] as the 8-bit HWC image it is written as."""
    return np.clip(np.round(np.asarray(y, np.float32).transpose(1, 2, 0) * 255), 0, 255).astype(np.uint8)


def fidelity_db(out: np.ndarray, ref: np.ndarray, scale: float) -> float:
    """Y-PSNR of 8-bit `out` against fp32's 8-bit `ref` (dB), capped at CAP_DB."""
    value = psnr_y(out, ref, crop_border_for(scale))
    return CAP_DB if not math.isfinite(value) or value > CAP_DB else round(value, 3)


def figures(values: list[float]) -> dict:
    return {"fidelity_db": [round(v, 3) for v in values], "fidelity_mean_db": round(float(np.mean(values)), 3),
            "fidelity_worst_db": round(float(min(values)), 3)}


def ssim_to_fp32(out: np.ndarray, ref: np.ndarray, scale: float) -> float:
    """SSIM-Y of 8-bit `out` against fp32's 8-bit `ref` (1.0: identical)."""
    return round(float(ssim_y(out, ref, crop_border_for(scale))), 6)


def ssim_figures(values: list[float]) -> dict:
    return {"fidelity_ssim": [round(v, 6) for v in values], "fidelity_ssim_worst": round(float(min(values)), 6)}


def mean_floor(precision: str) -> float | None:
    return FIDELITY_MEAN_FLOOR_DB.get(precision)


def ssim_floor(precision: str) -> float | None:
    return FIDELITY_SSIM_FLOOR.get(precision)


def short(record: dict) -> tuple[str, ...]:
    """The fidelity rule's failures for a record, one entry each ('BELOW its 40 dB mean fidelity floor', ...)."""
    p, out = record["precision"], []
    if (limit := mean_floor(p)) is not None and record["fidelity_mean_db"] < limit:
        out.append(f"BELOW its {limit:g} dB mean fidelity floor")
    if not within_floor(record["fidelity_worst_db"], p):
        out.append("BELOW its fidelity floor")
    if (limit := ssim_floor(p)) is not None and record["fidelity_ssim_worst"] < limit:
        out.append(f"BELOW its {limit:g} SSIM-to-fp32 floor")
    return tuple(out)


def rule_line(record: dict) -> str:
    """'fidelity to fp32 44.7 dB mean (floor 40), worst image 41.7 (floor 38), SSIM-Y to fp32 0.9934 at worst
    (floor 0.98)'."""
    p = record["precision"]

    def fl(v):
        return f" (floor {v:g})" if v is not None else ""
    return (f"fidelity to fp32 {record['fidelity_mean_db']:.1f} dB mean{fl(mean_floor(p))}, worst image "
            f"{record['fidelity_worst_db']:.1f}{fl(floor(p))}, SSIM-Y to fp32 {record['fidelity_ssim_worst']:.4f} "
            f"at worst{fl(ssim_floor(p))}")


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def consistency_problem(record: dict) -> str | None:
    """Why a record's fidelity fields are missing or disagree with its own per-image figures, or None."""
    values = record.get("fidelity_db")
    if not isinstance(values, list) or not values or not all(_number(v) for v in values):
        return "it has no fidelity figures (measured by an older version)"
    if len(values) != record.get("images"):
        return "its fidelity figures are not one per image"
    mean, worst = record.get("fidelity_mean_db"), record.get("fidelity_worst_db")
    if not _number(mean) or abs(mean - float(np.mean(values))) > 2e-3:
        return "its fidelity mean is not the mean of its own per-image figures (edited?)"
    if not _number(worst) or abs(worst - min(values)) > 1e-9:
        return "its worst fidelity is not the least of its own per-image figures (edited?)"
    ssim = record.get("fidelity_ssim")
    if not isinstance(ssim, list) or len(ssim) != len(values) or not all(_number(v) for v in ssim):
        return "it has no SSIM-to-fp32 figures, one per image (measured by an older version)"
    if not _number(record.get("fidelity_ssim_worst")) or abs(record["fidelity_ssim_worst"] - min(ssim)) > 1e-9:
        return "its worst SSIM to fp32 is not the least of its own per-image figures (edited?)"
    return None


def floor(precision: str) -> float | None:
    """Today's floor for a precision (policy, read now: a stored record keeps its measured figures)."""
    return FIDELITY_FLOOR_DB.get(precision)


def within_floor(worst_db: float, precision: str) -> bool:
    limit = floor(precision)
    return limit is None or worst_db >= limit


def summary(values: list[float], precision: str, on: str) -> dict:
    """{mean_db, worst_db, floor_db, within_floor, images, on}: what `compare` and `bench` report as `fidelity`;
    `on`: the images measured ('held-out' photos, or compare's own inputs)."""
    f = figures(values)
    return {"mean_db": f["fidelity_mean_db"], "worst_db": f["fidelity_worst_db"], "floor_db": floor(precision),
            "within_floor": within_floor(f["fidelity_worst_db"], precision), "images": len(values), "on": on}


def line(mean_db: float, worst_db: float, precision: str) -> str:
    """'fidelity to fp32 54.8 dB (worst image 53.0, floor 45)'."""
    limit = floor(precision)
    return (f"fidelity to fp32 {mean_db:.1f} dB (worst image {worst_db:.1f}"
            + (f", floor {limit:g})" if limit is not None else ")"))
