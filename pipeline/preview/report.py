"""A preview's report: report.json (every number), report.md and report.html from the same blocks (the project's
page: CSP, nothing loaded; each sample's crops as before/after sliders, embedded as JPEG), and the terminal's
table and command."""
from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import numpy as np

from pipeline import report, sr
from pipeline.analysis import sheet
from pipeline.artifacts.atomic import atomic_write
from pipeline.htmlreport import Code, Heading, Sheet, Strong, Table, items, para, said, write_report
from pipeline.images.pixels import to_rgb8
from pipeline.preview.inputs import CROP, shown
from pipeline.preview.run import Outcome
from pipeline.preview.verdict import Judged, rule_line

HEADER = ("backend", "precision", "verdict", "est. time", "load", "ms/Mpix", "est. size", "fidelity mean/worst dB",
          "non-finite", "why")


def candidate_dict(j: Judged) -> dict:
    m, e = j.measured, j.estimate
    return {"backend": m.candidate.backend, "precision": m.candidate.precision, "fidelity_db": j.fidelity,
            "nonfinite": m.nonfinite, "ms_per_mpix": None if e.ms_per_mpix is None else round(e.ms_per_mpix, 1),
            "host_ms_per_mpix": None if e.host_ms_per_mpix is None else round(e.host_ms_per_mpix, 1),
            "setup_s": round(m.setup_s, 3), "load_s": None if e.load_s is None else round(e.load_s, 3),
            "est_seconds": None if e.seconds is None else round(e.seconds, 2),
            "est_bytes": e.bytes, "verdict": j.verdict, "why": j.why, "built_now": m.built,
            "failures": m.failures}


def document(o: Outcome) -> dict:
    p = o.prep
    images, frames = p.survey.out_mpix(p.model.scale)
    return {"kind": "preview", "input": shown(str(p.opts.input)), "model": p.model.name, "scale": p.model.scale,
            "environment": report.environment(),
            "job": {"images": len(p.survey.pictures), "clips": len(p.survey.clips),
                    "frames": sum(c.frames for c in p.survey.clips), "out_mpix_images": round(images, 3),
                    "out_mpix_frames": round(frames, 3), "copied_bytes": sum(c.audio_bytes for c in p.survey.clips),
                    "unreadable": p.survey.unreadable, "header_lies": p.survey.header_lies},
            "samples": [{"name": s.name, "from": s.source, "cropped": s.cropped} for s in o.samples],
            "sample_frames": o.clip_frames, "crop": CROP,
            "reference": None if p.reference is None else {"backend": p.reference.backend,
                                                           "precision": p.reference.precision},
            "gate_rule": rule_line(p.model.spec),
            "candidates": [candidate_dict(j) for j in o.judged], "unavailable": p.unavailable,
            "recommended": o.command(), "seconds": round(o.seconds, 2)}


def _time(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{s:.1f} s" if s < 120 else f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.1f} h"


def _size(b: int | None) -> str:
    if b is None:
        return "-"
    for unit, n in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= n:
            return f"{b / n:.1f} {unit}"
    return f"{b} B"


def row(j: Judged) -> tuple[str, ...]:
    f, e = j.fidelity, j.estimate
    fid = "-" if f is None else f"{f['mean']:.1f} / {f['worst']:.1f}"
    rate = "-" if e.ms_per_mpix is None else f"{e.ms_per_mpix:.0f}"
    load = "-" if e.load_s is None else f"{e.load_s:.1f} s"
    return (j.measured.candidate.backend, j.measured.candidate.precision, j.verdict, _time(e.seconds), load, rate,
            _size(e.bytes), fid, str(j.measured.nonfinite), j.why)


_NOT_RUN = re.compile(r"runs [\w, ]+, not \w+")  # a backend asked for a precision it has no form of


def unavailable_lines(unavailable: list[dict]) -> list[str]:
    """One line per reason, naming the backends it holds for (with their precisions, unless it holds for every
    precision asked): a few lines, not one per backend x precision."""
    asked = list(dict.fromkeys(u["precision"] for u in unavailable))
    by_reason: dict[str, dict[str, list[str]]] = {}
    for u in unavailable:
        reason = "not a precision it runs" if _NOT_RUN.fullmatch(u["reason"]) else u["reason"]
        by_reason.setdefault(reason, {}).setdefault(u["backend"], []).append(u["precision"])
    return [f"{reason}: " + ", ".join(b if len(asked) > 1 and ps == asked else f"{b} {'/'.join(ps)}"
                                      for b, ps in names.items()) for reason, names in by_reason.items()]


def command_line(argv: list[str] | None) -> str | None:
    return None if argv is None else "python -m pipeline " + shlex.join(argv)


SHEET_LR = 96  # LR pixels of each sample's centre region a sheet shows (its crops are picked inside it)


def _region(lr: np.ndarray, scale: float) -> tuple[slice, slice, slice, slice]:
    """The centre region of a sample (LR rows, cols) and of its outputs (HR rows, cols): the sheets' crops and
    their metrics come from it, not from whole outputs (SSIM on every output of every sample would take seconds)."""
    h, w = lr.shape[:2]
    sy, sx = min(SHEET_LR, h), min(SHEET_LR, w)
    y0, x0 = (h - sy) // 2, (w - sx) // 2
    hy, hx = round(y0 * scale), round(x0 * scale)
    return (slice(y0, y0 + sy), slice(x0, x0 + sx), slice(hy, hy + round(sy * scale)),
            slice(hx, hx + round(sx * scale)))


def _sheets(o: Outcome, folder: Path) -> list[Sheet]:
    """Per sample: bicubic, every candidate that wrote it, fp32's output last (the sliders' reference)."""
    ref = o.prep.reference
    reference = next((j.measured.outputs for j in o.judged if j.measured.candidate == ref), None)
    if reference is None:
        return []
    sheets = []
    for s in o.samples:
        if s.name not in reference:
            continue
        ly, lx, hy, hx = _region(s.pixels, o.prep.model.scale)
        ref_hr = to_rgb8(reference[s.name])[hy, hx]
        outputs = {j.measured.candidate.label: to_rgb8(j.measured.outputs[s.name])[hy, hx] for j in o.judged
                   if s.name in j.measured.outputs and j.measured.candidate != ref}
        outputs = {k: v for k, v in outputs.items() if v.shape == ref_hr.shape}
        if not outputs:
            continue
        path = sheet.write(folder / "sheets" / f"{s.name}.png", to_rgb8(s.pixels)[ly, lx], outputs, ref_hr,
                           scale=o.prep.model.scale, side=64, reference_label=f"{ref.label} (fp32 reference)",
                           bicubic=sheet.from_float(sr.bicubic))
        sheets.append(Sheet(f"{s.name} (from {s.source})", path, picture="jpeg", each_vs_bicubic=True))
    return sheets


def blocks(o: Outcome, doc: dict, folder: Path) -> list:
    p, cmd = o.prep, command_line(doc["recommended"])
    top = para(Strong("Recommended: "), Code(cmd)) if cmd else \
        para(Strong("No candidate passes"), ": every one failed or is over its quality budget (see why below).")
    built = sorted({f for j in o.judged for f in j.measured.built})
    job = doc["job"]
    out = [Heading(f"preview: {p.model.name} x{p.model.scale:g} on {shown(str(p.opts.input))}", 1), top,
           para(f"Whole job: {job['images']} image(s), {job['clips']} clip(s) ({job['frames']} frames); "
                f"{job['out_mpix_images'] + job['out_mpix_frames']:.1f} output megapixels. Samples: "
                f"{len(o.samples)} picture(s)" + (f" and {o.clip_frames} frames in runs" if o.clip_frames else "")
                + f"; samples larger than {CROP}x{CROP} are cropped to a centred {CROP}x{CROP} window."),
           Heading("Candidates, fastest first"), para(doc["gate_rule"] + "."),
           Table(HEADER, tuple(row(j) for j in o.judged)),
           para(*said("est. time estimates the `wall_s` of `sr --summary` for the whole input, the same formula on "
                      "every row: load + output megapixels (from the headers) x ms/Mpix. load: the load with files "
                      "cached (for the recommended row, plus the sample run's fixed part, measured apart); ms/Mpix: "
                      "the rate sr reached on the samples (decoding, inference and encoding overlapped as sr runs "
                      "them). est. size: the sample outputs encoded as sr writes them, scaled to the whole input, "
                      "plus the copied audio."))]
    left_out = p.survey.unreadable + p.survey.header_lies
    if left_out:
        out += [Heading("Left out, and headers that lie"), items(*left_out)]
    if p.unavailable:
        out += [Heading("Not available here"), items(*unavailable_lines(p.unavailable))]
    out += [Heading("Built now"),
            items(*built) if built else para("Nothing: every file the candidates run was already cached.")]
    sheets = _sheets(o, folder)
    if sheets:
        out += [Heading("Pictures: before / after"),
                para("Per sample, each candidate against the input's bicubic upscale and against the fp32 output.")]
        out += sheets
    return out


def write(o: Outcome) -> dict:
    folder = o.prep.out_dir
    doc = document(o)
    atomic_write(folder / "report.json", json.dumps(doc, indent=2) + "\n")
    md, html = write_report(folder / "report.md", blocks(o, doc, folder))
    return {"json": folder / "report.json", "md": md, "html": html, "doc": doc}


def terminal(o: Outcome, paths: dict) -> list[str]:
    """The table and the command, as printed."""
    rows = [HEADER[:-1]] + [row(j)[:-1] for j in o.judged]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [paths["doc"]["gate_rule"]]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    cmd = command_line(paths["doc"]["recommended"])
    lines.append(f"recommended: {cmd}" if cmd else "recommended: none (every candidate failed or is over budget)")
    lines.append(f"report: {paths['md']}  html: {paths['html']}")
    return lines
