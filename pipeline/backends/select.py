"""Where a backend and a precision are chosen, for choice.choose: `pick(backend, model, precision)` with either or
both 'auto'. `--backend auto` ranks by the descriptors' expected order or this machine's measurement (auto);
`--precision auto` (here) loads and times each candidate, a lower precision counting only within its measured quality
budget (pipeline.quality), and keeps its pick.

    pick(backend, model, precision="fp32", scale=None, **opts) -> loaded Backend (why: its selection_reason)
    pick_precision(backend, model, **opts) -> (Backend, why)    `--precision auto`: the fastest within budget
    stored_pick(backend, model, precision, scale, opts) -> Reused | None   its stored pick while it holds, read
                                                               from the stores alone (choice.choose's first look)
    faster_line(model, backend, loaded) -> str | None          an fp32 run's hint that auto measured faster here
"""
from __future__ import annotations

import contextlib
import json
import os
import stat
import time
from pathlib import Path
from typing import NamedTuple

from pipeline.artifacts.atomic import atomic_write
from pipeline.artifacts.cache import cache_dir, weights_path, weights_sha256
from pipeline.artifacts.confine import file_token
from pipeline.artifacts.identity import resolve
from pipeline.artifacts.stamp import content_sha256
from pipeline.backends.auto import create_fixed, measured, pick_auto, time_backend
from pipeline.backends.base import Backend, check_auto_engine
from pipeline.backends.decide import Candidate, Facts, decide, size, why
from pipeline.backends.registry import backend_class, descriptors, settled
from pipeline.errors import PipelineError
from pipeline.precisions import ARTIFACTS, AUTO, BUDGET_DB, DEFAULT, GAIN_KEPT_MIN, GATE_VERSION, LOWER
from pipeline.quality import (
    FIDELITY_RULE,
    WHEN,
    finite_number,
    gate,
    kept_text,
    machine,
    record_key,
    run_scale,
    stored_for,
    within_budget,
)

SIZE = 256  # the side of the one image each candidate is timed on


def pick(backend: str, model: str | None, precision: str = DEFAULT, *, scale: float | None = None,
         **opts) -> Backend:
    """The backend the request names, loaded to decide (choice.choose turns it into the Choice; choice.create and
    every caller go through there): 'auto' backend by auto.pick_auto, 'auto' precision by pick_precision.

    Raises:
        PipelineError: one line, for an unknown name or precision, an option the backend does not take, a scale
            that is not a positive number, 'auto' with an engine (check_auto_engine), or a backend that cannot run.
    """
    check_request(precision, scale, opts)
    if precision == AUTO:
        return pick_precision(backend, model, scale=scale, **opts)[0]
    return create_fixed(backend, model, precision, **opts)


def check_request(precision: str, scale: float | None, opts: dict) -> None:
    """Refuses a scale that is not a positive number, and 'auto' with an engine (check_auto_engine): one line."""
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, int | float) or not scale > 0):
        raise PipelineError(f"scale must be a number above 0, got {scale!r}")
    check_auto_engine(precision, opts.get("engine"))


class Reused(NamedTuple):
    """A stored `--precision auto` pick that still holds, read from the stores alone: the record (select's, with the
    picked backend's files, run file and settled fields), why it runs, in a few words, and its quality record."""

    pick: dict
    why: str
    brief: str
    quality: dict | None


def stored_pick(backend: str, model: str | None, precision: str, scale: float | None, opts: dict) -> Reused | None:
    """`--precision auto`'s stored pick for this request while it holds (_reuse), nothing loaded; None for a fixed
    precision or a pick to time (again). Raises PipelineError (one line) for a request check_request refuses."""
    check_request(precision, scale, opts)
    if precision != AUTO:
        return None
    scale = float(resolve(model, opts.get("onnx")).default_scale if scale is None else scale)
    return _reuse(_pick_store(model, backend, scale, opts), scale, opts)


def candidates(backend: str) -> list[tuple[str, str]]:
    """(backend, precision) pairs `--precision auto` weighs: the backend at fp32 and at each lower precision it runs
    (pipeline.precisions.LOWER); 'auto' at each lower precision some backend runs (the expected fastest of those
    that run it here, as for fp32)."""
    runs = [p for d in descriptors() for p in d.precisions] if backend == AUTO \
        else backend_class(backend).DESCRIPTOR.precisions
    return [(backend, DEFAULT)] + [(backend, p) for p in LOWER if p in runs]


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
    reused = _reuse(path, scale, opts)
    if reused is not None:  # the caller wants it loaded
        b = create_fixed(reused.pick["backend"], model, reused.pick["precision"], **hooks,
                         **{**opts, **reused.pick["decided"]})
        return b.selected(reused.why, reused.brief), reused.why
    facts, loaded = measure_candidates(backend, model, scale, hooks, opts)
    best = decide(facts)
    if best is None:
        raise PipelineError("--precision auto: nothing can run: " + "; ".join(facts.notes))
    fp32 = next((c for c in facts.timed() if c.precision == "fp32"), None)
    times = ", ".join(f"{c.runs} {c.cost:.0f} ms" for c in sorted(facts.timed(), key=lambda c: c.cost or 0.0))
    chosen = loaded[best.runs]
    judged = gate(chosen, scale, measure=False)
    run_file = chosen.run_file(scale)
    pick = {"model": chosen.model_name, "request": backend, "scale": scale, "machine": machine(),
            "backend": best.backend, "precision": best.precision, "ms": round(best.cost or 0.0, 2), "size": SIZE,
            "run_sha256": content_sha256(run_file), "times": times,
            # what its Choice names, so a later run reuses it from the stores without loading anything (_reuse)
            "run_file": os.fspath(run_file), "files": [os.fspath(f) for f in chosen.files(scale)],
            "decided": chosen.decided(),
            "notes": list(facts.notes),
            "gain_kept": judged.gain_kept if judged else None,
            "fp32_ms": round(fp32.cost or 0.0, 2) if fp32 else None,
            "fp32_sha256": content_sha256(loaded[fp32.runs].run_file(scale)) if fp32 else None,
            "when": time.strftime(WHEN)}
    atomic_write(path, json.dumps(pick, indent=2) + "\n")
    reason = why(pick)
    return chosen.selected(reason, f"precision auto: {best.precision}, fastest within budget"), reason


def measure_candidates(backend: str, model: str | None, scale: float, hooks: dict, opts: dict) -> tuple[Facts, dict]:
    """The facts `--precision auto` decides on, and the backends loaded to make them (by 'backend precision'): each
    candidate loaded (its files made), judged by the quality gate (its loss measured once and stored) and, within
    budget, timed on one SIZE² image at `scale`. Where fp32 is at or below bicubic at `scale` the gate judges the
    lower precisions by fidelity to fp32 (its fidelity rule)."""
    weighed: list[Candidate] = []
    loaded: dict[str, Backend] = {}
    notes = []
    for name, precision in candidates(backend):
        try:
            b = create_fixed(name, model, precision, **hooks, **opts)
        except PipelineError as e:
            what = f"{name} {precision}"
            notes.append(str(e) if str(e).startswith(what) else f"{what}: {e}")
            continue
        judged = gate(b, scale, log=hooks["log"], progress=hooks["progress"])
        if judged is not None and not judged.within_budget:
            notes.append(f"{precision} not used: {judged.line}")
            weighed.append(Candidate(b.name, b.precision, None, refused=notes[-1]))
            continue
        if judged is not None and judged.rule == FIDELITY_RULE:
            notes.append(judged.line)  # says the rule that let it through
        loaded[f"{b.name} {b.precision}"] = b
        weighed.append(Candidate(b.name, b.precision, time_backend(b, SIZE, scale=scale, repeats=5, warmup=2)))
    return Facts(tuple(weighed), tuple(notes)), loaded


def age(when: str, now: float | None = None) -> str:
    """'3 h ago': how long since a stored measurement's time (WHEN's format, local time)."""
    try:
        s = max(0.0, (time.time() if now is None else now) - time.mktime(time.strptime(when, WHEN)))
    except (ValueError, OverflowError):
        return "at an unknown time"
    for unit, span in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= span:
            return f"{s / span:.0f} {unit} ago"
    return f"{s:.0f} s ago"


def stored_label(pick: dict) -> str:
    """'stored pick of 2026-11-27 10:02:11, 3 h ago, timed at 256x256 by an earlier run': a reused pick's figures
    are that run's, not this one's."""
    return f"stored pick of {pick['when']}, {age(pick['when'])}, timed at {size(pick)} by an earlier run"


def _pick_problem(pick) -> str | None:
    """Why a stored pick is not one (its shape), or None."""
    if not isinstance(pick, dict):
        return "not a record"
    if not all(isinstance(pick.get(k), str) for k in ("backend", "precision", "run_sha256", "times", "when")):
        return "fields missing"
    if not isinstance(pick.get("size"), int) or isinstance(pick["size"], bool) or pick["size"] < 1:
        return "fields missing"
    if not finite_number(pick.get("ms")) or not pick["ms"] > 0 or not isinstance(pick.get("notes"), list):
        return "fields damaged"
    if pick.get("fp32_ms") is not None and not (finite_number(pick["fp32_ms"]) and pick["fp32_ms"] > 0):
        return "fields damaged"
    return None


def _reuse(path: Path, scale: float, opts: dict) -> Reused | None:
    """The stored pick when it still holds, checked from the stores alone (nothing loaded): same machine and scale
    (and key: model, --backend, given file or the model's weights, artifact versions, gate rule); every file it
    names still a regular file under the artifact cache or the request's own; the file it runs at `scale` the same
    (its content hash); and a lower precision's quality record, looked up by that file, within budget. None: time
    them again (a record from an older version, without the files, too)."""
    pick = _load_pick(path)
    if pick is None or pick["machine"] != machine() or pick.get("scale") != scale or _files_problem(pick, opts) \
            or pick["decided"] != settled(pick["backend"], pick["precision"], opts):
        return None
    try:
        if content_sha256(pick["run_file"]) != pick["run_sha256"]:
            return None
    except OSError:
        return None
    record = None
    if pick["precision"] in BUDGET_DB:
        record = stored_for(pick["model"], pick["backend"], pick["precision"], scale, pick["run_sha256"])
        if record is None or not within_budget(record):
            return None
    reason = why(pick, f"{stored_label(pick)}, reused: same file, scale and machine (delete {path} to time them "
                       "again)")
    return Reused(pick, reason, f"precision auto: {pick['precision']}, fastest within budget; {stored_label(pick)}",
                  record)


def _files_problem(pick: dict, opts: dict) -> str | None:
    """Why the files a stored pick names may not be run without loading, or None: each must still be a regular
    file (not a link) under the artifact cache, one the request gives (--onnx, --weights, --engine), or the model's
    own weights."""
    files, decided = pick.get("files"), pick.get("decided")
    if not isinstance(files, list) or not isinstance(pick.get("run_file"), str) or not isinstance(decided, dict) \
            or not all(k in ("provider", "float_parts") and isinstance(v, str) for k, v in decided.items()):
        return "made by an older version"
    root = Path(os.path.abspath(cache_dir()))  # by name: the cache's own folders may be links (a shared onnx/)
    own = {os.path.abspath(os.fspath(opts[k])) for k in ("onnx", "weights", "engine") if opts.get(k) is not None}
    if opts.get("weights") is None and opts.get("onnx") is None and pick.get("model"):
        with contextlib.suppress(PipelineError):  # the model's own weights (torch runs them)
            own.add(os.path.abspath(weights_path(pick["model"])))
    for name in [*files, pick["run_file"]]:
        if not isinstance(name, str) or not name:
            return "a file name is damaged"
        try:
            regular = stat.S_ISREG(os.lstat(name).st_mode)
        except OSError:
            return f"{name} is gone"
        if not regular or not (Path(os.path.abspath(name)).is_relative_to(root) or os.path.abspath(name) in own):
            return f"{name} is not a cache file nor the request's"
    return None


def auto_line(backend: str, model: str | None, scale: float | None = None, **opts) -> str:
    """What `--precision auto` runs here, in one line naming backend and precision together and why: the stored
    pick while it holds (its file loaded and checked, nothing timed), else what it would time and measure."""
    scale = float(resolve(model, opts.get("onnx")).default_scale if scale is None else scale)
    path = _pick_store(model, backend, scale, opts)
    reused = _reuse(path, scale, opts)
    if reused is not None:
        p = reused.pick
        return f"auto: {p['backend']} {p['precision']} ({stored_label(p)}): {reused.why}"
    weighs = []
    for name, precision in candidates(backend):
        try:
            name = pick_auto(model, precision, weights=opts.get("weights"), onnx=opts.get("onnx")).name \
                if name == AUTO else name
        except PipelineError:
            continue  # nothing runs that precision here
        weighs.append(f"{name} {precision}")
    return (f"auto: not chosen on this machine yet for {resolve(model, opts.get('onnx')).name} at x{scale:g}: the "
            f"first run times {', '.join(weighs)} on one 256x256 image, measures each lower precision's loss on the "
            "held-out images once, and runs the fastest within its budget")


def _load_pick(path: Path) -> dict | None:
    """A stored pick of the right shape, or None (missing, unreadable, damaged: a damaged one is timed again)."""
    try:
        pick = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return None
    return pick if _pick_problem(pick) is None and isinstance(pick.get("machine"), dict) else None


def _source(model: str | None, opts: dict) -> str:
    """The given file a pick is for: an --onnx file's SHA-256, a --weights file's, or the model's own weights' (a
    re-run `make weights` is a new pick: the reused one would name the old weights' export)."""
    for key in ("onnx", "weights"):
        if opts.get(key) is not None:
            try:
                return f"{key}:{content_sha256(opts[key])}"
            except OSError:
                return f"{key}:{os.fspath(opts[key])}"
    try:
        return f"model:{weights_sha256(model)}" if model is not None else "model"
    except PipelineError:  # no weights here: the pick is for what runs instead (a failing run says so)
        return "model"


def _pick_store(model: str | None, backend: str, scale: float, opts: dict) -> Path:
    """Where the pick for this model, --backend, scale, given file and machine is kept. The artifact versions are
    part of its key: a new int8 recipe (or graph) changes a candidate's speed even when the picked one's file is
    the same, so the candidates are timed again (a bf16 pick had outlived recipe 8's faster int8 file); so is the
    gate's rule (GATE_VERSION): a pick made under an older one is weighed again."""
    key = record_key({"model": model, "request": backend, "scale": scale, "source": _source(model, opts),
                      "machine": machine(), "artifacts": {a.name: a.version for a in ARTIFACTS.values()},
                      "gate": GATE_VERSION})
    name = file_token(model or "onnx")
    return cache_dir() / "quality" / f"auto-{name}-{file_token(backend)}-x{scale:g}-{key}.json"


def faster_line(model: str, backend: str, loaded: Backend, scale: float | None = None, onnx=None,
                weights=None) -> str | None:
    """For an fp32 run: the line saying `--precision auto` measured a faster precision within budget on this
    machine (its last pick for this model, --backend, file and scale, while the fp32 file it timed is the one that
    runs now), or None when none was measured, fp32 won, or the stored pick does not hold: made under another gate
    rule (its key), or not keeping GAIN_KEPT_MIN of the model's gain over bicubic in both (the rule auto picks by)."""
    if loaded.precision != "fp32":
        return None
    scale = run_scale(loaded, scale)
    opts = {"onnx": onnx, "weights": weights}
    pick = _load_pick(_pick_store(model, backend, scale, opts))
    if pick is None or pick["precision"] == "fp32" or not pick.get("fp32_ms") or pick["machine"] != machine() \
            or not _keeps_enough(pick.get("gain_kept")):
        return None
    try:
        same = content_sha256(loaded.run_file(scale)) == pick.get("fp32_sha256")
    except (OSError, TypeError):
        return None
    if not same:
        return None
    later = measured(model, "fp32")  # `backends --measure` since the pick: quote that, and say the pick is older
    keeps = kept_text(pick["gain_kept"])
    if later and later.get("when", "") > pick["when"] and loaded.name in later.get("ms", {}):
        return (f"hint: --precision auto ran {pick['backend']} {pick['precision']} here in {pick['ms']:.0f} ms at "
                f"{size(pick)} ({pick['when']}), within its quality budget ({keeps}); `backends --measure` timed "
                f"{loaded.name} fp32 since: {later['ms'][loaded.name]:.0f} ms ({later['when']}); --precision "
                "auto re-weighs them")
    speedup = pick["fp32_ms"] / pick["ms"]
    return (f"hint: --precision auto runs {pick['backend']} {pick['precision']} here, {speedup:.1f}x fp32's speed"
            f" ({pick['ms']:.0f} against {pick['fp32_ms']:.0f} ms at {size(pick)}, measured {pick['when']}, "
            f"{age(pick['when'])}), within its quality budget ({keeps})")


def _keeps_enough(kept) -> bool:
    """A pick's `gain_kept` as the gate requires it: both shares given and at least GAIN_KEPT_MIN."""
    return isinstance(kept, dict) and all(finite_number(kept.get(k)) and kept[k] >= GAIN_KEPT_MIN
                                          for k in ("psnr_y", "ssim_y"))

