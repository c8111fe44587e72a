"""What a lower precision costs, measured: the Y-PSNR and SSIM change against fp32 on the held-out images.

    precision_loss(backend) -> dict   from the store, or measured now (a few seconds) and stored
    loss_line(record) -> str          one line: the loss, its budget, and whether it is within it
    summary(record) -> dict           the loss as a report row carries it (bench, compare)
    pick_precision(backend, model, **opts) -> (Backend, reason)   `--precision auto`: the fastest within budget

The same backend runs the held-out images (degraded as in training, at the model's default scale) at fp32 and at
its precision; both outputs are rounded to 8 bits and scored against the originals, border cropped
(pipeline.analysis.evaluate's protocol). A record is kept per model file (its SHA-256), backend, precision and
machine (pipeline.backends.auto.machine_fingerprint: CPU, cores, library versions) under the artifact cache.
"""
from __future__ import annotations

import hashlib
import json
import time

import numpy as np

from pipeline.analysis.evaluate import crop_border_for
from pipeline.artifacts.atomic import atomic_write
from pipeline.artifacts.cache import cache_dir
from pipeline.artifacts.confine import file_token
from pipeline.backends import Backend, backend_class, create, create_named, time_backend
from pipeline.backends.auto import machine_fingerprint, measured
from pipeline.errors import PipelineError

# The most Y-PSNR a precision may lose against fp32 on the held-out set (dB).
BUDGET_DB = {"bf16": 0.02, "int8": 0.10}


def _file_sha(backend: Backend) -> str:
    h = hashlib.sha256()
    with open(backend.model_file(), "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _store(backend: Backend) -> tuple:
    key = hashlib.sha256(f"{_file_sha(backend)} {machine_fingerprint()}".encode()).hexdigest()[:16]
    name = f"{file_token(backend.model_name)}-{backend.name}-{backend.precision}-{key}.json"
    return cache_dir() / "quality" / name


def _scores(backend: Backend, pairs, scale: float) -> tuple[float, float]:
    from pipeline.analysis.metrics import psnr_y, ssim_y

    psnr, ssim = [], []
    for lr, hr in pairs:
        x = np.ascontiguousarray((lr.astype(np.float32) / 255).transpose(2, 0, 1)[None])
        y = backend.infer(x, scale)[0].transpose(1, 2, 0)
        out = np.clip(np.round(y * 255), 0, 255).astype(np.uint8)
        psnr.append(psnr_y(out, hr, crop_border_for(scale)))
        ssim.append(ssim_y(out, hr, crop_border_for(scale)))
    return float(np.mean(psnr)), float(np.mean(ssim))


def measure(backend: Backend, threads: int | None = None) -> dict:
    """Score `backend` and the same backend at fp32 on the held-out set; the record of the difference."""
    from pipeline.data import sample_images
    from pipeline.data.degradation import make_pair

    scale = backend.spec.default_scale
    pairs = [make_pair(hr, scale) for hr in sample_images.held_out().values()]
    reference = create_named(backend.name, backend.model_name, "fp32", threads=threads, **backend.model_options())
    psnr32, ssim32 = _scores(reference, pairs, scale)
    psnr, ssim = _scores(backend, pairs, scale)
    return {"model": backend.model_name, "backend": backend.name, "precision": backend.precision, "scale": scale,
            "images": len(pairs), "psnr_fp32": round(psnr32, 4), "psnr": round(psnr, 4),
            "psnr_loss_db": round(psnr32 - psnr, 4), "ssim_fp32": round(ssim32, 5), "ssim": round(ssim, 5),
            "ssim_loss": round(ssim32 - ssim, 5), "budget_db": BUDGET_DB.get(backend.precision),
            "file": str(backend.model_file()), "when": time.strftime("%Y-%m-%d %H:%M:%S"),
            "machine": json.loads(machine_fingerprint())}


def precision_loss(backend: Backend, log=None) -> dict | None:
    """The stored record for a loaded backend running a lower precision (measured now on a miss); None for fp32 and
    fp16 (a graph precision, checked by `compare`) or a backend that runs no ONNX file."""
    if backend.precision not in BUDGET_DB or backend.model_file() is None:
        return None
    record = stored(backend)
    if record is not None:
        return record
    if log is not None:
        log(f"measuring what {backend.precision} costs on the held-out images, once for this file and machine")
    record = measure(backend)
    atomic_write(_store(backend), json.dumps(record, indent=2) + "\n")
    return record


def stored(backend: Backend) -> dict | None:
    """The record measured earlier for this file, backend, precision and machine, or None."""
    if backend.precision not in BUDGET_DB or backend.model_file() is None:
        return None
    try:
        return json.loads(_store(backend).read_text())
    except (OSError, ValueError):
        return None


def budget(record: dict) -> float:
    """The budget a record is held to: today's for its precision (a stored record keeps its measured loss; the
    budget is policy, read now)."""
    return BUDGET_DB[record["precision"]]


def within_budget(record: dict) -> bool:
    return record["psnr_loss_db"] <= budget(record)


def summary(record: dict | None) -> dict | None:
    """The measured loss as a report row carries it (bench, compare), or None (fp32, or nothing measured)."""
    if record is None:
        return None
    return {"psnr_loss_db": record["psnr_loss_db"], "ssim_loss": record["ssim_loss"], "budget_db": budget(record),
            "within_budget": within_budget(record), "images": record["images"]}


def loss_line(record: dict, advice: bool = True) -> str:
    """'bf16 loses 0.007 dB Y-PSNR (SSIM 0.0001) against fp32 on the 4 held-out images, within its 0.02 dB budget'.
    `advice`: an over-budget line tells a run of that precision to use fp32 (not where it was already left out)."""
    p = record["precision"]
    verdict = (f"within its {budget(record):g} dB budget" if within_budget(record)
               else f"OVER its {budget(record):g} dB budget" + (": use fp32 for exact output" if advice else ""))
    return (f"{p} loses {record['psnr_loss_db']:.3f} dB Y-PSNR (SSIM {record['ssim_loss']:.4f}) against fp32 on the "
            f"{record['images']} held-out images, {verdict}")


LOWER = ("bf16", "int8")  # the precisions `auto` may trade quality for speed with, each within its budget


def _candidates(backend: str) -> list[tuple[str, str]]:
    """(backend, precision) pairs `--precision auto` weighs: the backend at fp32 ('auto': the one auto picks), and
    each lower precision of it ('auto': of openvino, the backend that runs them)."""
    lower = "openvino" if backend == "auto" else backend
    return [(backend, "fp32")] + [(lower, p) for p in LOWER if p in backend_class(lower).PRECISIONS]


def pick_precision(backend: str, model: str | None, log=None, **opts) -> tuple[Backend, str]:
    """`--precision auto`: every candidate is loaded and timed on one 256x256 image (median of 5, this machine),
    a lower precision counts only if its measured held-out loss is within its budget (measured once and stored);
    the fastest wins. Returns the loaded backend and a line saying why."""
    timed: list[tuple[float, Backend]] = []
    notes = []
    for name, precision in _candidates(backend):
        try:
            b = create(name, model, precision, log=log, **opts)
        except PipelineError as e:
            notes.append(f"{name} {precision}: {e}")
            continue
        record = precision_loss(b, log=log)
        if record is not None and not within_budget(record):
            notes.append(f"{precision} not used: {loss_line(record, advice=False)}")
            continue
        timed.append((time_backend(b, 256, repeats=5, warmup=2), b))
    if not timed:
        raise PipelineError("--precision auto: nothing can run: " + "; ".join(notes))
    ms, best = min(timed, key=lambda t: t[0])
    fp32_ms = next((t for t, b in timed if b.precision == "fp32"), None)
    ratio = f", {fp32_ms / ms:.1f}x fp32's {fp32_ms:.0f} ms" if fp32_ms and best.precision != "fp32" else ""
    times = ", ".join(f"{b.name} {b.precision} {t:.0f} ms" for t, b in sorted(timed, key=lambda t: t[0]))
    why = (f"precision auto: {best.name} {best.precision} is the fastest within budget here ({ms:.0f} ms at 256x256"
           f"{ratio}; timed: {times})" + "".join(f"; {n}" for n in notes))
    if fp32_ms:
        atomic_write(_pick_store(best.model_name, backend), json.dumps(
            {"model": best.model_name, "request": backend, "backend": best.name, "precision": best.precision,
             "ms": round(ms, 2), "fp32_ms": round(fp32_ms, 2), "when": time.strftime(WHEN)}) + "\n")
    return best.selected(why, f"precision auto: {best.precision}, fastest within budget"), why


def _pick_store(model: str, backend: str):
    key = hashlib.sha256(f"{model} {backend} {machine_fingerprint()}".encode()).hexdigest()[:16]
    return cache_dir() / "quality" / f"auto-{file_token(model)}-{file_token(backend)}-{key}.json"


WHEN = "%Y-%m-%d %H:%M:%S"  # a measurement's time, as pipeline.backends.auto.measure writes it: they sort as text


def faster_line(model: str, backend: str, loaded: Backend) -> str | None:
    """For an fp32 run: the line saying `--precision auto` measured a faster precision within budget on this
    machine (from its last pick for this model and --backend), or None when none was measured or fp32 won."""
    if loaded.precision != "fp32":
        return None
    try:
        pick = json.loads(_pick_store(model, backend).read_text())
    except (OSError, ValueError):
        return None
    if pick.get("precision") == "fp32" or not pick.get("ms") or not pick.get("fp32_ms"):
        return None
    later = measured(model, "fp32")  # `backends --measure` since the pick: quote that, and say the pick is older
    if later and later.get("when", "") > pick["when"] and loaded.name in later.get("ms", {}):
        return (f"hint: --precision auto ran {pick['backend']} {pick['precision']} here in {pick['ms']:.0f} ms at "
                f"256x256 ({pick['when']}), within its quality budget; `backends --measure` timed {loaded.name} "
                f"fp32 since: {later['ms'][loaded.name]:.0f} ms ({later['when']}); --precision auto re-weighs them")
    speedup = pick["fp32_ms"] / pick["ms"]
    return (f"hint: --precision auto runs {pick['backend']} {pick['precision']} here, {speedup:.1f}x fp32's speed"
            f" ({pick['ms']:.0f} against {pick['fp32_ms']:.0f} ms at 256x256, measured {pick['when']}), "
            "within its quality budget")
