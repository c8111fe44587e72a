"""What a lower precision costs, measured: the Y-PSNR and SSIM change against fp32 on the held-out images.

    precision_loss(backend, scale) -> dict   from the store, or measured now (a few seconds) and stored
    loss_line(record) -> str          one line: the loss, its budget, and whether it is within it
    summary(record) -> dict           the loss as a report row carries it (bench, compare)
    pick_precision(backend, model, **opts) -> (Backend, reason)   `--precision auto`: the fastest within budget

The same backend runs the held-out images (degraded as in training, at the run's scale) at fp32 and at its
precision; both outputs are rounded to 8 bits and scored against the originals, border cropped
(pipeline.analysis.evaluate's protocol). A record holds for exactly what ran (identity()): the SHA-256 of the file
the backend runs at that scale (Backend.run_file: openvino's folded sibling at an integer scale, its Q/DQ file for
int8), the backend, precision and scale, and the machine (machine(): CPU, cores, library versions, OpenVINO's
version, whether bf16 arithmetic is used). It is kept under the artifact cache's quality/ folder, checked field by
field on read, and measured again (once, under a lock) when anything differs or it is not a well-formed record.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import time
from pathlib import Path

import numpy as np

from pipeline.analysis.evaluate import crop_border_for
from pipeline.artifacts.atomic import atomic_write
from pipeline.artifacts.cache import cache_dir
from pipeline.artifacts.confine import file_token
from pipeline.artifacts.identity import resolve
from pipeline.artifacts.stamp import file_sha256, made_once
from pipeline.backends import Backend, backend_class, create, create_named, time_backend
from pipeline.backends.auto import machine_fingerprint, measured
from pipeline.backends.openvino_backend import version as openvino_version
from pipeline.errors import PipelineError
from pipeline.native.cpu import BF16_ENV, bf16_problem

WHEN = "%Y-%m-%d %H:%M:%S"  # a measurement's time, as pipeline.backends.auto.measure writes it: they sort as text

# The most Y-PSNR a precision may lose against fp32 on the held-out set (dB).
BUDGET_DB = {"bf16": 0.02, "int8": 0.10}


def machine() -> dict:
    """The machine a measured loss or timing holds for: CPU, cores, GPU and library versions
    (auto.machine_fingerprint), OpenVINO's version and the bf16 switch (int8's float parts run bf16 or f32)."""
    return {**json.loads(machine_fingerprint()), "openvino": openvino_version(), "bf16": bf16_problem() is None,
            "bf16_env": os.environ.get(BF16_ENV)}


def identity(backend: Backend, scale: float) -> dict:
    """What a quality record holds for: the file that runs at `scale` (its SHA-256), backend, precision, scale
    and machine."""
    return {"model": backend.model_name, "backend": backend.name, "precision": backend.precision,
            "scale": float(scale), "file_sha256": file_sha256(backend.run_file(scale)), "machine": machine()}


def _key(fields: dict) -> str:
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def _store(ident: dict) -> Path:
    name = (f"{file_token(ident['model'])}-{ident['backend']}-{ident['precision']}-x{ident['scale']:g}-"
            f"{_key(ident)}.json")
    return cache_dir() / "quality" / name


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def record_problem(record, ident: dict) -> str | None:
    """Why a stored record does not describe `ident` or is not a well-formed record, or None."""
    if not isinstance(record, dict):
        return "it is not a record"
    for k, v in ident.items():
        if record.get(k) != v:
            return f"its {k.replace('_', ' ')} differs"
    if not all(_number(record.get(k)) for k in ("psnr_loss_db", "ssim_loss", "psnr", "psnr_fp32")):
        return "its losses are not numbers"
    images = record.get("images")
    if not isinstance(images, int) or isinstance(images, bool) or images < 1:
        return "its image count is not a positive number"
    return None


def _scores(backend: Backend, pairs, scale: float, bar=None) -> tuple[float, float]:
    from pipeline.analysis.metrics import psnr_y, ssim_y

    psnr, ssim = [], []
    for lr, hr in pairs:
        x = np.ascontiguousarray((lr.astype(np.float32) / 255).transpose(2, 0, 1)[None])
        y = backend.infer(x, scale)[0].transpose(1, 2, 0)
        out = np.clip(np.round(y * 255), 0, 255).astype(np.uint8)
        psnr.append(psnr_y(out, hr, crop_border_for(scale)))
        ssim.append(ssim_y(out, hr, crop_border_for(scale)))
        if bar is not None:
            bar.update(1)
    return float(np.mean(psnr)), float(np.mean(ssim))


def _applies(backend: Backend) -> bool:
    """Whether a loss is measured for this loaded backend: bf16 and int8 (fp16 is a graph precision, checked by
    `compare`) on a backend that runs a file."""
    return backend.precision in BUDGET_DB and backend.model_file() is not None


def _scale(backend: Backend, scale: float | None) -> float:
    return float(backend.spec.default_scale if scale is None else scale)


def measure(backend: Backend, threads: int | None = None, scale: float | None = None, progress=None) -> dict:
    """Score `backend` and the same backend at fp32 on the held-out set at `scale` (default: the model's); the
    record of the difference, with identity()'s fields. `progress(total, unit, desc)` makes a bar."""
    from pipeline.data import sample_images
    from pipeline.data.degradation import make_pair

    scale = _scale(backend, scale)
    ident = identity(backend, scale)
    pairs = [make_pair(hr, scale) for hr in sample_images.held_out().values()]
    reference = create_named(backend.name, backend.model_name, "fp32", threads=threads, **backend.model_options())
    bar = progress(2 * len(pairs), "image", f"measuring {backend.precision}'s loss") if progress else None
    try:
        psnr32, ssim32 = _scores(reference, pairs, scale, bar)
        psnr, ssim = _scores(backend, pairs, scale, bar)
    finally:
        if bar is not None:
            bar.close()
    return {**ident, "images": len(pairs), "psnr_fp32": round(psnr32, 4), "psnr": round(psnr, 4),
            "psnr_loss_db": round(psnr32 - psnr, 4), "ssim_fp32": round(ssim32, 5), "ssim": round(ssim, 5),
            "ssim_loss": round(ssim32 - ssim, 5), "budget_db": BUDGET_DB.get(backend.precision),
            "file": str(backend.run_file(scale)), "when": time.strftime(WHEN)}


def precision_loss(backend: Backend, log=None, scale: float | None = None, progress=None) -> dict | None:
    """The stored record for a loaded backend running a lower precision at `scale` (default: the model's), measured
    now when none holds for the file that runs, the scale and this machine (once: a second process waits for it);
    None for fp32 and fp16 or a backend that runs no file."""
    if not _applies(backend):
        return None
    scale = _scale(backend, scale)
    ident = identity(backend, scale)
    path = _store(ident)
    record, problem = _read(path, ident)
    if record is not None:
        return record
    with made_once(path):
        record, problem = _read(path, ident)  # measured by another process while this one waited
        if record is not None:
            return record
        if log is not None:
            again = "" if problem is None else f" (the stored record is not used: {problem})"
            log(f"measuring what {backend.precision} costs on the held-out images at x{scale:g}, once for this "
                f"file, scale and machine{again}")
        record = measure(backend, scale=scale, progress=progress)
        atomic_write(path, json.dumps(record, indent=2) + "\n")
    return record


def _read(path: Path, ident: dict) -> tuple[dict | None, str | None]:
    """(the record at `path` when it holds for `ident`, else None; why not, None when there is none)."""
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError, RecursionError):
        return None, "it is not readable JSON"
    problem = record_problem(record, ident)
    return (record, None) if problem is None else (None, problem)


def stored(backend: Backend, scale: float | None = None) -> dict | None:
    """The record measured earlier for the file this backend runs at `scale`, its precision and this machine, or
    None (nothing stored, or a record that does not hold)."""
    if not _applies(backend):
        return None
    ident = identity(backend, _scale(backend, scale))
    return _read(_store(ident), ident)[0]


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


def pick_precision(backend: str, model: str | None, log=None, scale: float | None = None, progress=None,
                   chatter=None, **opts) -> tuple[Backend, str]:
    """`--precision auto`: every candidate is loaded and timed on one 256x256 image at `scale` (median of 5, this
    machine), a lower precision counts only if its measured held-out loss at that scale is within its budget
    (measured once and stored); the fastest wins. The pick and its timings are stored (_pick_store: model, --backend,
    scale, the given file and machine) and reused while the file the pick runs is the same and its loss still
    within budget. Returns the loaded backend and a line saying why."""
    scale = float(resolve(model, opts.get("onnx")).default_scale if scale is None else scale)
    hooks = {"log": log, "progress": progress, "chatter": chatter}
    path = _pick_store(model, backend, scale, opts)
    reused = _reuse(path, model, scale, hooks, opts)
    if reused is not None:
        return reused
    timed, notes = _time_candidates(backend, model, scale, hooks, opts)
    if not timed:
        raise PipelineError("--precision auto: nothing can run: " + "; ".join(notes))
    ms, best = min(timed, key=lambda t: t[0])
    fp32 = next(((t, b) for t, b in timed if b.precision == "fp32"), None)
    times = ", ".join(f"{b.name} {b.precision} {t:.0f} ms" for t, b in sorted(timed, key=lambda t: t[0]))
    pick = {"model": best.model_name, "request": backend, "scale": scale, "machine": machine(),
            "backend": best.name, "precision": best.precision, "ms": round(ms, 2),
            "run_sha256": file_sha256(best.run_file(scale)), "times": times, "notes": notes,
            "fp32_ms": round(fp32[0], 2) if fp32 else None,
            "fp32_sha256": file_sha256(fp32[1].run_file(scale)) if fp32 else None, "when": time.strftime(WHEN)}
    atomic_write(path, json.dumps(pick, indent=2) + "\n")
    why = _why(pick, "")
    return best.selected(why, f"precision auto: {best.precision}, fastest within budget"), why


def _time_candidates(backend: str, model: str | None, scale: float, hooks: dict, opts: dict):
    """[(ms, loaded backend)] of the candidates within budget, and why the others are not."""
    timed: list[tuple[float, Backend]] = []
    notes = []
    for name, precision in _candidates(backend):
        try:
            b = create(name, model, precision, **hooks, **opts)
        except PipelineError as e:
            what = f"{name} {precision}"
            notes.append(str(e) if str(e).startswith(what) else f"{what}: {e}")
            continue
        record = precision_loss(b, log=hooks["log"], scale=scale, progress=hooks["progress"])
        if record is not None and not within_budget(record):
            notes.append(f"{precision} not used: {loss_line(record, advice=False)}")
            continue
        timed.append((time_backend(b, 256, scale=scale, repeats=5, warmup=2), b))
    return timed, notes


def _why(pick: dict, reused: str) -> str:
    ratio = (f", {pick['fp32_ms'] / pick['ms']:.1f}x fp32's {pick['fp32_ms']:.0f} ms"
             if pick["fp32_ms"] and pick["precision"] != "fp32" else "")
    return (f"precision auto: {pick['backend']} {pick['precision']} is the fastest within budget here "
            f"({pick['ms']:.0f} ms at 256x256{ratio}; timed: {pick['times']})"
            + "".join(f"; {n}" for n in pick["notes"]) + reused)


def _pick_problem(pick) -> str | None:
    """Why a stored pick is not one (its shape), or None."""
    if not isinstance(pick, dict):
        return "not a record"
    if not all(isinstance(pick.get(k), str) for k in ("backend", "precision", "run_sha256", "times", "when")):
        return "fields missing"
    if not _number(pick.get("ms")) or not pick["ms"] > 0 or not isinstance(pick.get("notes"), list):
        return "fields damaged"
    if pick.get("fp32_ms") is not None and not (_number(pick["fp32_ms"]) and pick["fp32_ms"] > 0):
        return "fields damaged"
    return None


def _reuse(path: Path, model: str | None, scale: float, hooks: dict, opts: dict) -> tuple[Backend, str] | None:
    """The stored pick, loaded, when it still holds: same machine (its key), the picked backend runs the same
    file at `scale`, and a lower precision's loss there is stored and within budget. None: time them again."""
    pick = _load_pick(path)
    if pick is None or pick["machine"] != machine() or pick.get("scale") != scale:
        return None
    try:
        b = create(pick["backend"], model, pick["precision"], **hooks, **opts)
        if file_sha256(b.run_file(scale)) != pick["run_sha256"]:
            return None
    except (PipelineError, OSError):
        return None
    if _applies(b) and ((record := stored(b, scale)) is None or not within_budget(record)):
        return None
    why = _why(pick, f"; the pick of {pick['when']}, reused: same file, scale and machine (delete {path} to time "
                     "them again)")
    return b.selected(why, f"precision auto: {b.precision}, fastest within budget (stored pick)"), why


def _load_pick(path: Path) -> dict | None:
    """A stored pick of the right shape, or None (missing, unreadable, damaged: a damaged one is timed again)."""
    try:
        pick = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return None
    return pick if _pick_problem(pick) is None and isinstance(pick.get("machine"), dict) else None


def _source(opts: dict) -> str:
    """The given file a pick is for: an --onnx file's SHA-256, a --weights file's, or the model's own."""
    for key in ("onnx", "weights"):
        if opts.get(key) is not None:
            try:
                return f"{key}:{file_sha256(os.fspath(opts[key]))}"
            except OSError:
                return f"{key}:{os.fspath(opts[key])}"
    return "model"


def _pick_store(model: str | None, backend: str, scale: float, opts: dict) -> Path:
    key = _key({"model": model, "request": backend, "scale": scale, "source": _source(opts), "machine": machine()})
    name = file_token(model or "onnx")
    return cache_dir() / "quality" / f"auto-{name}-{file_token(backend)}-x{scale:g}-{key}.json"


def faster_line(model: str, backend: str, loaded: Backend, scale: float | None = None, onnx=None,
                weights=None) -> str | None:
    """For an fp32 run: the line saying `--precision auto` measured a faster precision within budget on this
    machine (its last pick for this model, --backend, file and scale, while the fp32 file it timed is the one that
    runs now), or None when none was measured, fp32 won, or the stored pick does not hold."""
    if loaded.precision != "fp32":
        return None
    scale = _scale(loaded, scale)
    opts = {"onnx": onnx, "weights": weights}
    pick = _load_pick(_pick_store(model, backend, scale, opts))
    if pick is None or pick["precision"] == "fp32" or not pick.get("fp32_ms") or pick["machine"] != machine():
        return None
    try:
        same = file_sha256(loaded.run_file(scale)) == pick.get("fp32_sha256")
    except (OSError, TypeError):
        return None
    if not same:
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
