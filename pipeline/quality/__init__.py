"""Image quality: the metrics SR papers report (metrics) and what a lower precision costs against fp32, measured on
the held-out images and judged against its budget (loss). It sits below pipeline.backends: `--precision auto`
(pipeline.backends.select) reads these records to choose; nothing here chooses or loads a backend.

    metrics   psnr_y, ssim_y, crop_border_for          loss   precision_loss, stored, within_budget, loss_line, ...
"""
from pipeline.quality.loss import (
    BUDGET_DB,
    WHEN,
    applies,
    budget,
    finite_number,
    identity,
    loss_line,
    machine,
    measure,
    precision_loss,
    record_key,
    record_problem,
    run_scale,
    stored,
    summary,
    within_budget,
)

__all__ = ["BUDGET_DB", "WHEN", "applies", "budget", "finite_number", "identity", "loss_line", "machine", "measure",
           "precision_loss", "record_key", "record_problem", "run_scale", "stored", "summary", "within_budget"]
