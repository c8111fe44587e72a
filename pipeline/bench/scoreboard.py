"""The GPU scoreboard's document (`make gpu-check`: outputs/gpu-check/scoreboard.json) and its table.

Sections run one after another (pipeline.bench.gpu_scoreboard measures them); each writes its part as it finishes,
the whole file replaced atomically, so a call cut short (device time is rare and short) still leaves every number
measured until then. A section that cannot run records "skipped: <reason>", one that fails "error: <first line>",
and the rest still run. The goals are decided here, from the numbers, for the JSON and the table alike:
folder run >= 85 % of pure inference (each model and precision), video >= 85 % of the slower of inference alone and
the encoder alone, the device output check <= 2 % of the bare net, 0 FAIL lines from the plugin harness run 4 times
at once. No torch here: this module is tested on the CPU.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from pipeline.artifacts.atomic import atomic_write
from pipeline.errors import first_line

FOLDER_GOAL = 0.85  # folder run / pure inference (the GPU goal of pipeline.bench.folder)
VIDEO_GOAL = 0.85  # video fps / the slower of inference alone and the encoder alone
CHECK_GOAL_PCT = 2.0  # the device output check, % of the bare net's time
HARNESS_COPIES = 4  # plugin harness copies run at once; the goal is 0 FAIL lines


class Skip(Exception):
    """A section that cannot run here: its reason is recorded as "skipped: <reason>"."""


class Scoreboard:
    """The scoreboard at `path`: `record(name, part)` puts a section's part in and rewrites the file atomically."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.doc: dict = {"schema": 1, "started": time.strftime("%Y-%m-%d %H:%M:%S"), "sections": {}, "goals": []}

    def record(self, name: str, part: dict) -> None:
        self.doc["sections"][name] = part
        self.doc["goals"] = goals(self.doc)
        self.doc["written"] = time.strftime("%Y-%m-%d %H:%M:%S")
        atomic_write(self.path, json.dumps(self.doc, indent=1, default=str) + "\n")

    def run(self, name: str, section: Callable[[], Iterable[dict]], log=print) -> None:
        """Runs one section (a generator of its growing part: each yield is written); records why it did not."""
        t0 = time.perf_counter()
        part: dict = {}
        try:
            for part in section():
                self.record(name, part | {"seconds": round(time.perf_counter() - t0, 1)})
        except Skip as e:
            self.record(name, {"skipped": str(e)})
            log(f"gpu scoreboard: {name}: skipped: {e}")
            return
        except Exception as e:  # a measuring tool: one section's failure must not cost the others their numbers
            self.record(name, part | {"error": f"{type(e).__name__}: {first_line(e)}"})
            log(f"gpu scoreboard: {name}: error: {type(e).__name__}: {first_line(e)}")
            return
        log(f"gpu scoreboard: {name} done in {time.perf_counter() - t0:.0f} s")


def _goal(what: str, value, goal: str, met: bool | None) -> dict:
    return {"what": what, "value": value, "goal": goal, "met": met}


def _model_goals(rows: list[dict]) -> list[dict]:
    out = []
    for r in rows:
        who = f"{r['model']} {r['precision']}"
        if r.get("folder_share") is not None:
            out.append(_goal(f"folder run, {who}", round(r["folder_share"], 3), f">= {FOLDER_GOAL:g}",
                             r["folder_share"] >= FOLDER_GOAL))
        if r.get("check_pct") is not None:
            out.append(_goal(f"output check, {who} (% of the net)", round(r["check_pct"], 2),
                             f"<= {CHECK_GOAL_PCT:g}", r["check_pct"] <= CHECK_GOAL_PCT))
    return out


def video_share(v: dict) -> float | None:
    """The video run's fps over the slower of inference alone and the encoder alone; None when one is missing."""
    slower = min((f for f in (v.get("inference_fps"), v.get("encode_fps")) if f), default=None)
    return None if not v.get("fps") or slower is None else v["fps"] / slower


def goals(doc: dict) -> list[dict]:
    """Each goal the sections measured so far: what, the value, the goal, whether it is met."""
    s = doc["sections"]
    out = _model_goals(s.get("models", {}).get("rows", []))
    share = video_share(s.get("video", {}))
    if share is not None:
        out.append(_goal("video, of the slower of inference and encoder alone", round(share, 3), f">= {VIDEO_GOAL:g}",
                         share >= VIDEO_GOAL))
    h = s.get("harness", {})
    if "fail_lines" in h:
        out.append(_goal(f"plugin harness x{h.get('copies', HARNESS_COPIES)} at once, FAIL lines", h["fail_lines"],
                         "0", h["fail_lines"] == 0 and all(rc == 0 for rc in h.get("exit_codes", []))))
    return out


# -- the table -----------------------------------------------------------------------------------------------

def _num(v, digits: int = 2) -> str:
    if v is None:
        return "-"
    return f"{v:.{digits}f}" if isinstance(v, float) else str(v)


def _grid(header: list[str], rows: list[list]) -> list[str]:
    cells = [header] + [[_num(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]


def _not_run(part: dict) -> str | None:
    if "skipped" in part:
        return f"skipped: {part['skipped']}"
    return f"error: {part['error']}" if "error" in part else None


def _machine_lines(s: dict) -> list[str]:
    m, g = s.get("machine", {}), s.get("gemm", {})
    lines = [] if not m else [f"machine: {_not_run(m)}" if _not_run(m) else
                              f"machine: {m.get('gpu')}, driver {m.get('driver')}, torch {m.get('torch')} "
                              f"(CUDA {m.get('torch_cuda')})"]
    if _not_run(g):
        lines.append(f"GEMM: {_not_run(g)}")
    elif g:
        lines.append("GEMM: " + ", ".join(f"{p} {_num(t, 1)} TFLOP/s" for p, t in g.get("tflops", {}).items())
                     + f" ({g.get('shape', '')})")
    return lines


def _model_lines(part: dict) -> list[str]:
    if not part:  # not run (yet)
        return []
    head = [f"models: {_not_run(part)}"] if _not_run(part) else ["models (512^2 input, x3):"]
    rows = [[r["model"], r["precision"], r.get("net_ms"), r.get("net_tflops"), r.get("infer_pixels_ms"),
             None if r.get("folder_share") is None else round(100 * r["folder_share"], 1), r.get("check_ms"),
             r.get("check_pct"), r.get("error", "")] for r in part.get("rows", [])]
    if not rows:
        return head
    return head + _grid(["model", "precision", "net ms", "TFLOP/s", "infer_pixels ms", "folder %", "check ms",
                         "check %", "note"], rows)


def _deform_lines(part: dict) -> list[str]:
    if _not_run(part):
        return [f"DeformConv2d: {_not_run(part)}"]
    rows = [[r["precision"], r["size"], r.get("fused_ms"), r.get("im2col_ms"), r.get("torchvision_ms"),
             r.get("fused_speedup"), r.get("im2col_speedup")] for r in part.get("rows", [])]
    if not rows:
        return []
    return ["DeformConv2d (deform-srcnn's layer; speed-ups vs torchvision):"] + _grid(
        ["precision", "size", "fused ms", "im2col ms", "torchvision ms", "fused x", "im2col x"], rows)


def _video_lines(v: dict) -> list[str]:
    if _not_run(v) or not v:
        return [f"video: {_not_run(v)}"] if v else []
    share = video_share(v)
    return [f"video {v.get('size')} -> {v.get('output')} ({v.get('precision')}): {_num(v.get('fps'))} fps; inference "
            f"alone {_num(v.get('inference_fps'))}, encoder alone {_num(v.get('encode_fps'))}: "
            f"{'-' if share is None else f'{100 * share:.0f} %'} of the slower (goal >= {100 * VIDEO_GOAL:.0f} %)"]


def _harness_lines(h: dict) -> list[str]:
    if _not_run(h) or not h:
        return [f"plugin harness: {_not_run(h)}"] if h else []
    return [f"plugin harness x{h.get('copies')} at once: {h.get('fail_lines')} FAIL lines, exit codes "
            f"{h.get('exit_codes')}, {_num(h.get('wall_s'), 0)} s"]


def table(doc: dict) -> str:
    """The scoreboard as text: the machine, each section's numbers, then every goal met or missed."""
    s = doc["sections"]
    lines = ["GPU scoreboard", *_machine_lines(s), *_model_lines(s.get("models", {})),
             *_video_lines(s.get("video", {})), *_deform_lines(s.get("deform", {})),
             *_harness_lines(s.get("harness", {}))]
    lines.append("goals:" if doc["goals"] else "goals: none measured")
    lines += [f"  {'met   ' if g['met'] else 'MISSED'} {g['what']}: {_num(g['value'])} (goal {g['goal']})"
              for g in doc["goals"]]
    return "\n".join(lines)
