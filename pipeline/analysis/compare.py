"""`python -m pipeline compare`: every available backend/precision vs PyTorch FP32 on the same real images.

Per backend: max / median / p99 absolute error, max relative error, PSNR (data range 1) against the
PyTorch FP32 output, and pass/fail with tolerances by precision (FP32: max abs <= --tol-fp32;
FP16: PSNR >= --psnr-fp16 dB; bf16 and int8: the measured held-out loss within its budget,
pipeline.quality). `--bisect` names the first ONNX node whose output diverges for each
failing ONNX-based backend (pipeline.analysis.layer_bisect). pipeline.report writes the result as report.md,
report.json and error.png. models.registry (torch) is imported where the reference side needs it.
"""
from __future__ import annotations

import math
import time

import numpy as np

from pipeline import backends as B
from pipeline import quality
from pipeline.analysis.candidates import candidate_statuses
from pipeline.analysis.layer_bisect import bisect_onnx
from pipeline.analysis.reference import compare_inputs, load_net, reference_outputs
from pipeline.artifacts.identity import resolve
from pipeline.artifacts.onnx_file import onnx_metadata
from pipeline.artifacts.reference import read_reference
from pipeline.errors import PipelineError, first_line
from pipeline.precisions import DEFAULT, GRAPH
from pipeline.quality import fidelity

DEFAULT_TOL_FP32 = 1e-4
DEFAULT_PSNR_FP16 = 50.0
REL_FLOOR = 1e-3  # relative error denominators below this (near-black pixels) are clamped to it


# -- the math (pure numpy; tests/test_compare.py checks it on constructed outputs) --------------------
def error_stats(out: np.ndarray | list, ref: np.ndarray | list) -> dict:
    """Errors of `out` against `ref` (arrays, or lists of arrays of matching shapes, pooled).

    max_abs, median_abs, p99_abs: of |out - ref| over every element; max_rel: max |out - ref| /
    max(|ref|, REL_FLOOR); psnr_db: 10 log10(1 / MSE) on the 0..1 range (inf when identical).
    """
    outs = out if isinstance(out, (list, tuple)) else [out]
    refs = ref if isinstance(ref, (list, tuple)) else [ref]
    if len(outs) != len(refs):
        raise ValueError(f"{len(outs)} outputs vs {len(refs)} references")
    diffs, rels = [], []
    for o, r in zip(outs, refs, strict=True):
        o, r = np.asarray(o, np.float64), np.asarray(r, np.float64)
        if o.shape != r.shape:
            raise ValueError(f"output shape {o.shape} differs from reference shape {r.shape}")
        d = np.abs(o - r).ravel()
        diffs.append(d)
        rels.append(d / np.maximum(np.abs(r).ravel(), REL_FLOOR))
    d = np.concatenate(diffs)
    if d.size == 0:
        raise ValueError("empty outputs")
    if not np.all(np.isfinite(d)):
        return {"max_abs": math.inf, "median_abs": math.inf, "p99_abs": math.inf, "max_rel": math.inf,
                "psnr_db": -math.inf, "elements": int(d.size), "finite": False}
    mse = float(np.mean(d * d))
    return {
        "max_abs": float(d.max()),
        "median_abs": float(np.median(d)),
        "p99_abs": float(np.percentile(d, 99)),
        "max_rel": float(np.concatenate(rels).max()),
        "psnr_db": math.inf if mse == 0 else 10.0 * math.log10(1.0 / mse),
        "elements": int(d.size),
        "finite": True,
    }


def verdict(stats: dict, precision: str, tol_fp32: float = DEFAULT_TOL_FP32,
            psnr_fp16: float = DEFAULT_PSNR_FP16, loss: dict | None = None) -> tuple[bool, str]:
    """(passed, criterion text) for one backend's error stats at its precision: its error within its tolerance
    (tolerance_ratio <= 1)."""
    ratio, crit = tolerance_ratio(stats, precision, tol_fp32, psnr_fp16, loss)
    if loss is not None and math.isfinite(ratio):  # the quality record's own verdict
        return loss["within_budget"], crit
    return ratio <= 1.0, crit


def tolerance_ratio(stats: dict, precision: str, tol_fp32: float = DEFAULT_TOL_FP32,
                    psnr_fp16: float = DEFAULT_PSNR_FP16, loss: dict | None = None) -> tuple[float, str]:
    """(error / the precision's tolerance, criterion text): 1.0 is at the tolerance, whatever the precision is
    judged on, so one plot holds every precision's rows against their own line. bf16 and int8 trade exactness
    for speed on purpose: judged by their measured held-out loss (`loss`, quality.summary) against its budget;
    without one (a backend with no model file to key it: trt), by the PSNR bar of fp16 (as an RMS ratio)."""
    if not stats.get("finite", True):
        return math.inf, "non-finite output"
    if loss is not None:
        ratio, f = max(loss["psnr_loss_db"], 0.0) / loss["budget_db"], loss.get("fidelity") or {}
        crit = f"held-out Y-PSNR loss <= {loss['budget_db']:g} dB"
        if f.get("floor_db") is not None:  # fidelity below its floor counts as over, in the same amplitude terms
            ratio = max(ratio, 10 ** ((f["floor_db"] - f["worst_db"]) / 20))
            crit += f", fidelity >= {f['floor_db']:g} dB"
        return ratio, crit
    if precision != DEFAULT:  # not exact by design: the PSNR bar of fp16
        return 10 ** ((psnr_fp16 - stats["psnr_db"]) / 20), f"PSNR >= {psnr_fp16:g} dB"
    return stats["max_abs"] / tol_fp32, f"max abs <= {tol_fp32:g}"


def row_fidelity(outs: list, refs: list, precision: str, scale: float, loss: dict | None) -> dict | None:
    """A lower precision's fidelity to fp32 (dB): its quality record's (the held-out photos against its own fp32
    twin), else measured here on compare's images against the PyTorch FP32 reference; None at fp32."""
    if precision == DEFAULT:
        return None
    if loss is not None:
        return loss.get("fidelity")
    if not all(np.isfinite(o).all() for o in outs):
        return None
    values = [fidelity.fidelity_db(fidelity.to_image(o), fidelity.to_image(r), scale)
              for batch, refs_ in zip(outs, refs, strict=True) for o, r in zip(batch, refs_, strict=True)]
    return fidelity.summary(values, precision, "compare inputs")


def _compare_backend(st, precision: str, model: str, scale: float, inputs: dict, ref: dict, opts: dict,
                     log=print) -> dict:
    """One row: the backend's outputs on `inputs` against `ref`, or why it did not run."""
    row = {"backend": st.name, "precision": precision, "scale": scale}
    where = f"  {model} x{scale:g} {st.name:<15} {precision}"
    if not st.available:
        if not st.reason.endswith(B.NEEDS_GPU):  # said once for every row by the caller (no_gpu_line)
            log(f"{where}: unavailable ({st.reason})")
        return {**row, "status": "unavailable", "reason": st.reason}
    t0 = time.perf_counter()
    try:
        be = B.create(st.name, model, precision, weights=opts["weights"], onnx=opts.get("onnx"))
        outs = [be.infer(x, scale) for x in inputs.values()]
        loss = quality.summary(quality.precision_loss(be, log=log))  # bf16/int8: measured once, then stored
    except PipelineError as e:
        log(f"{where}: error ({e})")
        return {**row, "status": "error", "reason": str(e)}
    stats = error_stats(outs, [ref[k] for k in inputs])
    ok, crit = verdict(stats, precision, opts["tol_fp32"], opts["psnr_fp16"], loss)
    ratio = tolerance_ratio(stats, precision, opts["tol_fp32"], opts["psnr_fp16"], loss)[0]
    row.update(status="pass" if ok else "fail", criterion=crit, tolerance_ratio=ratio, describe=be.describe(),
               seconds=round(time.perf_counter() - t0, 3), quality=loss,
               fidelity=row_fidelity(outs, [ref[k] for k in inputs], precision, scale, loss), **stats)
    held_out = f", held-out loss {loss['psnr_loss_db']:.3f} dB" if loss else ""
    if row["fidelity"]:
        held_out += f", fidelity {row['fidelity']['mean_db']:.1f} dB (worst {row['fidelity']['worst_db']:.1f})"
    log(f"{where}: {row['status'].upper():<4} max {stats['max_abs']:.2e} p99 {stats['p99_abs']:.2e} "
        f"PSNR {stats['psnr_db']:.1f} dB{held_out} ({crit})")
    if not ok and opts["bisect"]:
        row["bisect"] = _bisect_row(model, be, inputs, scale, precision, opts["tol_fp32"], opts["weights"], log)
    return row


def _tolerances(tol_fp32: float, psnr_fp16: float) -> dict:
    """The pass criteria a result section states (bf16/int8 rows carry their budget in their `quality`)."""
    return {"fp32_max_abs": tol_fp32, "fp16_psnr_db": psnr_fp16, "rel_floor": REL_FLOOR}


def compare_model(model: str, *, scales: list[float] | None = None, size: int = 96, precisions=GRAPH,
                  backends: list[str] | None = None, tol_fp32: float = DEFAULT_TOL_FP32,
                  psnr_fp16: float = DEFAULT_PSNR_FP16, bisect: bool = False, weights=None, log=print) -> dict:
    """Run the comparison for one model; returns the JSON-able result section."""
    spec = resolve(model)
    scales = scales or [spec.default_scale]
    for scale in scales:  # every scale checked before any work
        spec.check_scale(scale)
    inputs = compare_inputs(size)
    result = {"model": model, "input_size": size, "images": list(inputs), "scales": scales,
              "tolerances": _tolerances(tol_fp32, psnr_fp16),
              "reference": "PyTorch FP32 eager on CPU (models.registry.run)", "rows": []}
    opts = {"weights": weights, "tol_fp32": tol_fp32, "psnr_fp16": psnr_fp16, "bisect": bisect}
    for scale in scales:
        ref = reference_outputs(model, inputs, scale, weights)
        for precision in precisions:
            for st in candidate_statuses(model, precision, backends, weights):
                result["rows"].append(_compare_backend(st, precision, model, scale, inputs, ref, opts, log))
    return result


def compare_onnx(onnx, *, backends: list[str] | None = None, tol_fp32: float = DEFAULT_TOL_FP32,
                 psnr_fp16: float = DEFAULT_PSNR_FP16, log=print) -> dict:
    """Every available backend running the exported file `onnx` against the PyTorch FP32 outputs stored beside
    it at export time: the same rows as compare_model, without PyTorch."""
    ref = read_reference(onnx)
    model = resolve(None, onnx).name
    precision = onnx_metadata(onnx).get("precision", "fp32")
    first = next(iter(ref.inputs.values()))
    result = {"model": model, "onnx": str(onnx), "input_size": int(first.shape[-1]), "images": list(ref.inputs),
              "scales": [ref.scale],
              "tolerances": _tolerances(tol_fp32, psnr_fp16),
              "reference": "PyTorch FP32 outputs stored at export time beside the ONNX file", "rows": []}
    opts = {"weights": None, "onnx": onnx, "tol_fp32": tol_fp32, "psnr_fp16": psnr_fp16, "bisect": False}
    for st in candidate_statuses(None, precision, backends, onnx=onnx):
        result["rows"].append(_compare_backend(st, precision, model, ref.scale, ref.inputs, ref.outputs, opts, log))
    return result


def _bisect_row(model, be, inputs, scale, precision, tol_fp32, weights, log) -> dict:
    onnx_file = be.onnx_file
    if onnx_file is None:
        return {"error": f"{be.name} has no ONNX graph to bisect"}
    from models.registry import size_tensor  # PyTorch: loaded only for a bisection

    spec = resolve(model)
    x = next(iter(inputs.values()))
    feeds = {"input": x}
    extra = ()
    if spec.dynamic_scale:
        size = size_tensor(x.shape[-2], x.shape[-1], scale)
        feeds["size"] = size.numpy()
        extra = (size,)
    tol = tol_fp32 if precision == "fp32" else 1e-2
    try:
        found = bisect_onnx(onnx_file, load_net(model, weights), feeds, extra_args=extra, rtol=tol)
    except Exception as e:  # bisect is diagnostics: report why it could not run rather than abort the report
        return {"error": f"{type(e).__name__}: {first_line(e)}"}
    log(f"    bisect: {found.get('summary')}")
    return found


def runs_passing(models: list[dict]) -> tuple[int, int]:
    """(backend runs that passed, backend runs made) over compare_model results: what `compare` and the demo both
    say, as 'N/M backend runs pass' (unavailable and skipped rows ran nothing)."""
    ran = [r for m in models for r in m["rows"] if r["status"] in ("pass", "fail", "error")]
    return sum(r["status"] == "pass" for r in ran), len(ran)
