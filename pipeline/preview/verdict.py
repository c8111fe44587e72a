"""Each candidate's verdict and the one recommended.

    failed         it could not run, a sample failed, or its own output held a NaN or inf (before any fp32 re-run)
    over budget    a lower precision the quality gate refuses: its held-out record (pipeline.quality's gate, the
                   one `sr --precision auto` stands on) or its worst fidelity to fp32 on these samples under the
                   precision's floor
    within budget  the rest; the fastest of them by estimated time is `recommended`
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline import backends, quality
from pipeline.precisions import DEFAULT
from pipeline.preview.estimate import Estimate
from pipeline.preview.measure import Measured
from pipeline.quality import fidelity

RECOMMENDED, WITHIN, OVER, FAILED = "recommended", "within budget", "over budget", "failed"
VERDICTS = (RECOMMENDED, WITHIN, OVER, FAILED)


@dataclass
class Judged:
    measured: Measured
    estimate: Estimate
    fidelity: dict | None  # {"mean": dB, "worst": dB} over the samples against fp32, None when not measured
    verdict: str
    why: str


def rgb8(pixels: np.ndarray) -> np.ndarray:
    """An output as sr wrote it (gray, BGR, BGRA; 8 or 16 bits) as 8-bit RGB, what the fidelity is measured on."""
    p = pixels
    if p.dtype == np.uint16:
        p = ((p.astype(np.uint32) + 128) // 257).astype(np.uint8)
    if p.ndim == 2:
        return np.repeat(p[:, :, None], 3, axis=2)
    return np.ascontiguousarray(p[:, :, 2::-1])


def fidelity_to(m: Measured, reference: dict[str, np.ndarray], scale: float) -> dict | None:
    values = [fidelity.fidelity_db(rgb8(out), rgb8(reference[name]), scale) for name, out in m.outputs.items()
              if name in reference and reference[name].shape == out.shape]
    if not values:
        return None
    return {"mean": round(float(np.mean(values)), 2), "worst": round(float(min(values)), 2)}


def _gate(m: Measured, fid: dict | None) -> tuple[str, str]:
    p = m.candidate.precision
    if p == DEFAULT:
        return WITHIN, "fp32: the reference precision"
    reasons, ok = [], True
    if fid is None:
        return OVER, "no fidelity to fp32 measured (the fp32 reference did not run)"
    if not fidelity.within_floor(fid["worst"], p):
        ok = False
        reasons.append(f"worst sample {fid['worst']:.1f} dB to fp32, BELOW its {fidelity.floor(p):g} dB floor")
    else:
        floor = fidelity.floor(p)
        reasons.append(f"worst sample {fid['worst']:.1f} dB to fp32" + (f" (floor {floor:g})" if floor else ""))
    if m.quality is not None:
        ok = quality.within_budget(m.quality) and ok
        reasons.append("held-out: " + quality.loss_line(m.quality, advice=False))
    return (WITHIN if ok else OVER), "; ".join(reasons)


def judge(m: Measured, est: Estimate, reference: dict[str, np.ndarray], scale: float) -> Judged:
    fid = fidelity_to(m, reference, scale) if m.outputs else None
    if m.error:
        return Judged(m, est, fid, FAILED, m.error)
    if m.nonfinite or m.failures:
        why = f"{m.nonfinite} output pixel(s) NaN or inf" if m.nonfinite else ""
        why = "; ".join([w for w in (why, *m.failures[:2]) if w])
        return Judged(m, est, fid, FAILED, why)
    if est.seconds is None:
        return Judged(m, est, fid, FAILED, "nothing was measured to estimate from")
    verdict, why = _gate(m, fid)
    return Judged(m, est, fid, verdict, why)


def rank(judged: list[Judged]) -> list[Judged]:
    """Sorted by estimated time (the failed last); the one the backends' decide picks from these samples' facts
    (each candidate's estimated seconds, its verdict's refusal) becomes `recommended`: the same "fastest within
    budget" `sr --precision auto` runs."""
    order = sorted(judged, key=lambda j: (j.estimate.seconds is None, j.estimate.seconds or 0.0))
    facts = backends.Facts(tuple(backends.Candidate(j.measured.candidate.backend, j.measured.candidate.precision,
                                                    j.estimate.seconds, "" if j.verdict == WITHIN else j.why)
                                 for j in order))
    best = backends.decide(facts)
    for j in order:
        if best is not None and (j.measured.candidate.backend, j.measured.candidate.precision) == (
                best.backend, best.precision):
            j.verdict = RECOMMENDED
            break
    return order
