"""`python -m pipeline compare`: every available backend/precision vs PyTorch FP32 on the same real images.

Per backend: max / median / p99 absolute error, max relative error, PSNR (data range 1) against the
PyTorch FP32 output, and pass/fail with tolerances by precision (FP32: max abs <= --tol-fp32;
FP16: PSNR >= --psnr-fp16 dB). `--bisect` names the first ONNX node whose output diverges for each
failing ONNX-based backend (pipeline.analysis.layer_bisect). Writes report.md, report.json and error.png to --output.
"""
from __future__ import annotations

import math
import time

import numpy as np

from pipeline.errors import PipelineError

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
    for o, r in zip(outs, refs):
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
            psnr_fp16: float = DEFAULT_PSNR_FP16) -> tuple[bool, str]:
    """(passed, criterion text) for one backend's error stats at its precision."""
    if not stats.get("finite", True):
        return False, "non-finite output"
    if precision == "fp16":
        return stats["psnr_db"] >= psnr_fp16, f"PSNR >= {psnr_fp16:g} dB"
    return stats["max_abs"] <= tol_fp32, f"max abs <= {tol_fp32:g}"


# -- inputs --------------------------------------------------------------------------------------------
def compare_inputs(size: int = 96, names: tuple[str, ...] | None = None) -> dict[str, np.ndarray]:
    """Held-out skimage photos, centre-cropped to size x size, as float32 [1, 3, H, W] in [0, 1]."""
    from pipeline.data.sample_images import HELD_OUT, load_rgb

    out = {}
    for name in names or HELD_OUT:
        img = load_rgb(name)
        h, w = img.shape[:2]
        s = min(size, h, w)
        y0, x0 = (h - s) // 2, (w - s) // 2
        crop = img[y0:y0 + s, x0:x0 + s]
        out[name] = np.ascontiguousarray(crop.transpose(2, 0, 1)[None], dtype=np.float32) / 255.0
    return out


def load_net(model: str, weights=None):
    """models.registry.load_model with its weight errors as one-line PipelineErrors."""
    from models.registry import WeightsError, load_model

    try:
        return load_model(model, weights)
    except WeightsError as e:
        raise PipelineError(str(e)) from None


def _reference(model: str, inputs: dict, scale: float, weights=None) -> dict[str, np.ndarray]:
    import torch

    from models.registry import get_spec, run

    spec = get_spec(model)
    net = load_net(model, weights)
    with torch.inference_mode():
        return {k: run(net, spec, torch.from_numpy(x), scale).numpy() for k, x in inputs.items()}


def _candidates(model: str, precisions: list[str], backends: list[str] | None, weights=None, log=print):
    """(name, precision, factory or None, reason) for every backend/precision to try."""
    from pipeline import backends as B

    out = []
    for precision in precisions:
        statuses = B.available(model, precision, weights)
        for st in statuses:
            if backends and st.name not in backends:
                continue
            if st.name == "ort-cpu" and not backends:
                continue  # same session as "ort" on a machine whose best provider is the CPU one
            if not st.available:
                out.append((st.name, precision, None, st.reason))
                continue
            out.append((st.name, precision,
                        (lambda n=st.name, p=precision: B.create(n, model, p, weights=weights)), st.reason))
    return out


def compare_model(model: str, *, scales: list[float] | None = None, size: int = 96, precisions=("fp32", "fp16"),
                  backends: list[str] | None = None, tol_fp32: float = DEFAULT_TOL_FP32,
                  psnr_fp16: float = DEFAULT_PSNR_FP16, bisect: bool = False, weights=None,
                  include_folded: bool = True, log=print) -> dict:
    """Run the comparison for one model; returns the JSON-able result section."""
    from models.registry import get_spec

    spec = get_spec(model)
    scales = scales or [spec.default_scale]
    inputs = compare_inputs(size)
    result = {"model": model, "input_size": size, "images": list(inputs), "scales": scales,
              "tolerances": {"fp32_max_abs": tol_fp32, "fp16_psnr_db": psnr_fp16, "rel_floor": REL_FLOOR},
              "reference": "PyTorch FP32 eager on CPU (models.registry.run)", "rows": []}
    for scale in scales:
        spec.check_scale(scale)
        ref = _reference(model, inputs, scale, weights)
        cands = _candidates(model, list(precisions), backends, weights, log)
        if include_folded and "ort-folded" not in {c[0] for c in cands} and model in ("srcnn", "srcnn-x3") and float(scale).is_integer() and scale >= 3 \
                and (not backends or "ort-folded" in backends):
            cands.append(("ort-folded", "fp32", lambda s=scale: folded_backend(model, int(s), weights), "optimize.py"))
        for name, precision, factory, reason in cands:
            row = {"backend": name, "precision": precision, "scale": scale}
            if factory is None:
                row.update(status="unavailable", reason=reason)
                result["rows"].append(row)
                log(f"  {model} x{scale:g} {name:<15} {precision}: unavailable ({reason})")
                continue
            t0 = time.perf_counter()
            try:
                be = factory()
                outs = {k: be.infer(x, scale) for k, x in inputs.items()}
            except PipelineError as e:
                row.update(status="error", reason=str(e))
                result["rows"].append(row)
                log(f"  {model} x{scale:g} {name:<15} {precision}: error ({e})")
                continue
            stats = error_stats([outs[k] for k in inputs], [ref[k] for k in inputs])
            ok, crit = verdict(stats, precision, tol_fp32, psnr_fp16)
            row.update(status="pass" if ok else "fail", criterion=crit, describe=be.describe(),
                       seconds=round(time.perf_counter() - t0, 3), **stats)
            log(f"  {model} x{scale:g} {name:<15} {precision}: {row['status'].upper():<4} max {stats['max_abs']:.2e} "
                f"p99 {stats['p99_abs']:.2e} PSNR {stats['psnr_db']:.1f} dB ({crit})")
            if not ok and bisect:
                row["bisect"] = _bisect_row(model, be, inputs, scale, precision, tol_fp32, weights, log)
            result["rows"].append(row)
    return result


def _bisect_row(model, be, inputs, scale, precision, tol_fp32, weights, log) -> dict:
    onnx_file = getattr(be, "onnx_file", None)
    if onnx_file is None:
        return {"error": f"{be.name} has no ONNX graph to bisect"}
    from models.registry import get_spec, size_tensor
    from pipeline.analysis.layer_bisect import bisect_onnx

    spec = get_spec(model)
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
        return {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
    log(f"    bisect: {found.get('summary')}")
    return found


class _FoldedOrt:
    """ONNX Runtime on the exact folded SRCNN (pipeline.export.fold) -- a candidate for the backends' auto."""

    name, precision, device = "ort-folded", "fp32", "cpu"

    def __init__(self, model: str, scale: int, weights=None, threads: int | None = None):
        import onnxruntime as ort

        from pipeline.export.fold import folded_onnx, ort_session_options

        self.model_name, self.scale = model, scale
        from models.registry import WeightsError

        try:
            graph = folded_onnx(model, scale, str(weights) if weights else None)
        except WeightsError as e:
            raise PipelineError(str(e)) from None
        self.session = ort.InferenceSession(graph, ort_session_options(threads), providers=["CPUExecutionProvider"])
        self.threads = threads

    def infer(self, batch: np.ndarray, scale: float) -> np.ndarray:
        if float(scale) != self.scale:
            raise PipelineError(f"ort-folded was built for x{self.scale}, not x{scale:g}")
        return self.session.run(None, {"input": np.ascontiguousarray(batch, np.float32)})[0]

    def describe(self) -> str:
        return f"ort-folded (bicubic folded into conv1, ORT CPU, x{self.scale})"


def folded_backend(model: str, scale: int, weights=None, threads: int | None = None) -> _FoldedOrt:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _FoldedOrt(model, scale, weights, threads)


# -- CLI -------------------------------------------------------------------------------------------------


