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
from pipeline.images.pixels import to_rgb8
from pipeline.precisions import DEFAULT, GAIN_KEPT_MIN
from pipeline.preview.estimate import Estimate
from pipeline.preview.measure import Measured
from pipeline.quality import fidelity

RECOMMENDED, WITHIN, OVER, FAILED = "recommended", "within budget", "over budget", "failed"
VERDICTS = (RECOMMENDED, WITHIN, OVER, FAILED)


def rule_line(spec) -> str:
    """The rule a lower precision is held to for this model, named before its rows are read: a model that does not
    aim at PSNR (its spec's `aims_at_psnr`: Real-ESRGAN, GAN-trained) has no gain over bicubic to keep, so only its
    fidelity to fp32 counts (pipeline.quality.fidelity)."""
    if not spec.aims_at_psnr:
        return (f"gate: {spec.name} is a GAN model (it does not aim at PSNR): a lower precision is held to the "
                "fidelity rule, its output's PSNR and SSIM to fp32's own on the held-out photos (not PSNR against "
                "the originals, where fp32 is not above bicubic), and to its worst sample's fidelity to fp32 here")
    return (f"gate: a lower precision is held to its held-out PSNR-Y loss budget, to keeping >= {GAIN_KEPT_MIN:.0%} "
            "of the model's gain over bicubic, and to its worst sample's fidelity to fp32 here")


@dataclass
class Judged:
    measured: Measured
    estimate: Estimate
    fidelity: dict | None  # {"mean": dB, "worst": dB} over the samples against fp32, None when not measured
    verdict: str
    why: str


def fidelity_to(m: Measured, reference: dict[str, np.ndarray], scale: float) -> dict | None:
    values = [fidelity.fidelity_db(to_rgb8(out), to_rgb8(reference[name]), scale) for name, out in m.outputs.items()
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
                                                    j.estimate.seconds, _refusal(j))
                                 for j in order))
    best = backends.decide(facts)
    for j in order:
        if best is not None and (j.measured.candidate.backend, j.measured.candidate.precision) == (
                best.backend, best.precision):
            j.verdict = RECOMMENDED
            break
    return order


def _refusal(j: Judged) -> str:
    """Why a candidate may not be recommended ("" while within budget): its verdict's reason, else the verdict
    itself, so a refused row without a reason line is never counted as within budget."""
    return "" if j.verdict == WITHIN else (j.why or j.verdict)
