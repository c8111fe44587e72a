"""Image quality: the metrics SR papers report (metrics) and what a lower precision costs against fp32, measured on
the held-out images and judged against its budget (loss). It sits below pipeline.backends: `--precision auto`
(pipeline.backends.select) reads these records to choose; nothing here chooses or loads a backend.

    metrics   psnr_y, ssim_y, crop_border_for          loss   precision_loss, stored, within_budget, loss_line, ...
    gain      what the model adds over bicubic and the share a precision keeps
    gate(backend, scale, measure=True) -> Verdict | None   the gate's verdict (within budget or not, why, gain_kept,
                                                           and its rule: GAIN_RULE, or FIDELITY_RULE where fp32 is
                                                           not above bicubic)
"""
from pipeline.quality.gain import adds_nothing, below_line, gain_kept, kept_text, model_gain
from pipeline.quality.loss import (
    BUDGET_DB,
    FIDELITY_RULE,
    GAIN_RULE,
    WHEN,
    Verdict,
    applies,
    baseline,
    budget,
    finite_number,
    gate,
    identity,
    loss_line,
    machine,
    measure,
    precision_loss,
    record_key,
    record_problem,
    run_scale,
    stored,
    stored_for,
    summary,
    verdict,
    within_budget,
)

__all__ = ["BUDGET_DB", "FIDELITY_RULE", "GAIN_RULE", "WHEN", "Verdict", "adds_nothing", "applies", "baseline",
           "below_line", "budget", "finite_number", "gain_kept", "gate", "identity", "kept_text", "loss_line",
           "machine", "measure", "model_gain", "precision_loss", "record_key", "record_problem", "run_scale",
           "stored", "stored_for", "summary", "verdict", "within_budget"]
