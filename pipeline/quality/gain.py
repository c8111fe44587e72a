"""What the model adds over bicubic, and how much of it a lower precision keeps: the gate's third test
(pipeline.precisions.GAIN_KEPT_MIN), judged on the figures a quality record carries (pipeline.quality.loss: the
held-out photos at the run's scale, scored against the originals at fp32, at the precision, and by plain bicubic).

    model_gain(record) -> {"psnr_y": dB, "ssim_y": ...}         fp32's score minus bicubic's
    adds_nothing(gain) -> bool                                  at or below bicubic in PSNR-Y or SSIM-Y
    gain_kept(record) -> {"psnr_y": f, "ssim_y": f} | None      a precision's gain as a share of fp32's (None: nothing
                                                                to keep)
    short(record) -> str | None                                 why it keeps too little, or None
    below_line(record) -> str                                   'at or below bicubic here on the 4 held-out photos: ...'
"""
from __future__ import annotations

from pipeline.precisions import GAIN_KEPT_MIN

# each metric: (the precision's score, fp32's, bicubic's) as a record names them
METRICS = {"psnr_y": ("psnr", "psnr_fp32", "psnr_bicubic"), "ssim_y": ("ssim", "ssim_fp32", "ssim_bicubic")}
WORDS = {"psnr_y": "PSNR-Y", "ssim_y": "SSIM-Y"}


def model_gain(record: dict) -> dict:
    """The model's gain over bicubic at fp32 on the record's images: {psnr_y (dB), ssim_y}."""
    return {k: round(record[fp32] - record[bic], 5) for k, (_, fp32, bic) in METRICS.items()}


def adds_nothing(gain: dict) -> bool:
    """At or below bicubic in either metric: there is no gain for a lower precision to keep."""
    return any(v <= 0 for v in gain.values())


def gain_kept(record: dict) -> dict | None:
    """The share of the model's gain over bicubic that the record's precision keeps, per metric (1.0: all of it; a
    precision may also add to it), or None where the model adds nothing there."""
    gain = model_gain(record)
    if adds_nothing(gain):
        return None
    return {k: round((record[own] - record[bic]) / gain[k], 4) for k, (own, _, bic) in METRICS.items()}


def keeps_enough(record: dict) -> bool:
    kept = gain_kept(record)
    return kept is not None and all(v >= GAIN_KEPT_MIN for v in kept.values())


def kept_text(kept: dict) -> str:
    """'keeps 97 % of the model's PSNR-Y gain over bicubic and 93 % of its SSIM-Y gain'. A negative share is no
    share kept: '... and loses more than its whole SSIM-Y gain (71 % of it below bicubic)'."""
    p, s = kept["psnr_y"], kept["ssim_y"]
    first = (f"keeps {100 * p:.0f} % of the model's PSNR-Y gain" if p >= 0 else
             f"loses more than the model's whole PSNR-Y gain ({100 * -p:.0f} % of it below bicubic)")
    if s < 0:
        return f"{first} over bicubic and loses more than its whole SSIM-Y gain ({100 * -s:.0f} % of it below bicubic)"
    return f"{first} over bicubic and {'' if p >= 0 else 'keeps '}{100 * s:.0f} % of its SSIM-Y gain"


def short(record: dict) -> str | None:
    """Why the record's precision fails the gain test, in a few words, or None when it keeps enough."""
    kept = gain_kept(record)
    if kept is None:
        return "nothing to keep: the model is at or below bicubic here"
    low = [WORDS[k] for k, v in kept.items() if v < GAIN_KEPT_MIN]
    return f"BELOW {100 * GAIN_KEPT_MIN:.0f} % of the model's {' and '.join(low)} gain" if low else None


def gain_text(gain: dict) -> str:
    """'PSNR-Y -1.52 dB, SSIM-Y -0.0410 against it'."""
    return f"PSNR-Y {gain['psnr_y']:+.2f} dB, SSIM-Y {gain['ssim_y']:+.4f} against it"


def below_line(record: dict) -> str:
    """'at or below bicubic here on the 4 held-out photos: PSNR-Y -0.07 dB, SSIM-Y +0.0036 against it'."""
    gain = model_gain(record)
    return (f"at or below bicubic here on the {record['images']} held-out photos: PSNR-Y {gain['psnr_y']:+.2f} dB, "
            f"SSIM-Y {gain['ssim_y']:+.4f} against it")
