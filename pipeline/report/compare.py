"""`compare`'s report: report.json, its plot, and report.md and report.html from the same blocks."""
from __future__ import annotations

import json
import math
from pathlib import Path

from pipeline.artifacts.atomic import atomic_write
from pipeline.errors import printable
from pipeline.htmlreport import Heading, Paragraph, Strong, items, para, plot_figure, to_markdown, write_report
from pipeline.report.machine import env_items
from pipeline.report.plots import plt_, save_fig
from pipeline.report.tables import budgets, fidelity_cell, fmt, json_default, loss, sanitize, table

# The verdict and what it was judged by first: at 1280 px the measured columns may scroll, those may not.
COMPARE_HEADER = ["model", "scale", "backend", "precision", "status", "criterion", "max abs", "median abs",
                  "p99 abs", "max rel", "PSNR dB", "held-out loss dB", "fidelity dB (worst)"]


def _model_note(m: dict) -> Paragraph:
    tol = m["tolerances"]
    return para("Model ", Strong(m["model"]), f": {len(m['images'])} held-out images ({', '.join(m['images'])}), "
                f"centre crop {m['input_size']}x{m['input_size']}; reference: {m['reference']}. "
                f"Pass: FP32 max abs <= {tol['fp32_max_abs']:g}, FP16 PSNR >= {tol['fp16_psnr_db']:g} dB, "
                "bf16/int8 a held-out Y-PSNR loss against the backend's own fp32 (measured once per file and "
                f"machine) within its budget ({budgets(m['rows'])}) and a fidelity to that fp32 output at or above "
                "its floor. Fidelity dB: Y-PSNR of every lower precision's 8-bit output against fp32's, mean "
                "(worst image): bf16/int8 on the held-out photos, others on these crops against the reference. "
                f"Relative error denominators are clamped at {tol['rel_floor']:g}.")


def compare_blocks(doc: dict, *, plot: Path | None = None, sheets=()) -> list:
    """compare's report as blocks (pipeline.htmlreport.document): the machine, per model what was compared, the
    table, what was not compared, the error plot and the crop sheets."""
    blocks = [Heading("Backend comparison vs PyTorch FP32", 1), env_items(doc["environment"])]
    blocks += [_model_note(m) for m in doc["models"]]
    rows, notes = [], []
    for m in doc["models"]:
        for r in m["rows"]:
            if r["status"] in ("pass", "fail"):
                rows.append([m["model"], r["scale"], r["backend"], r["precision"], r["status"].upper(),
                             r["criterion"], r["max_abs"], r["median_abs"], r["p99_abs"], r["max_rel"], r["psnr_db"],
                             loss((r.get("quality") or {}).get("psnr_loss_db")), fidelity_cell(r.get("fidelity"))])
            else:
                notes.append(f"{m['model']} x{fmt(r['scale'])} {r['backend']} {r['precision']}: "
                             f"{r['status']} ({r.get('reason', '')})")
            if "bisect" in r:
                b = r["bisect"]
                notes.append(f"bisect {m['model']} {r['backend']} {r['precision']}: "
                             f"{b.get('summary') or b.get('error')}")
    blocks.append(table(COMPARE_HEADER, rows))
    if notes:
        blocks += [para("Not compared / diagnostics:"), items(*notes)]
    if plot is not None:
        blocks += [Heading("Plot"), plot_figure("max abs error by backend", plot)]
    if sheets:
        blocks += [Heading("Pictures: before / after"), *sheets]
    return blocks


def compare_markdown(doc: dict) -> str:
    return to_markdown(compare_blocks(doc))


def error_bars(doc: dict) -> list[tuple[str, float, str, str]]:
    """(label, error / its precision's tolerance, status, criterion) of every row that ran: 1.0 is each row's own
    tolerance line (pipeline.analysis.compare.tolerance_ratio), so a pass is at or under it."""
    return [(f"{printable(m['model'])}\n{r['backend']} {r['precision']}",
             r.get("tolerance_ratio", r["max_abs"] / m["tolerances"]["fp32_max_abs"]), r["status"],
             r.get("criterion", ""))
            for m in doc["models"] for r in m["rows"] if r["status"] in ("pass", "fail")]


def plot_compare(doc: dict, path: Path) -> None:
    plt = plt_()
    rows = error_bars(doc)
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(rows) + 2), 4))
    if rows:
        vals = [max(v, 1e-9) if math.isfinite(v) else 1e3 for _, v, _, _ in rows]
        ax.bar(range(len(rows)), vals, color=["tab:green" if s == "pass" else "tab:red" for _, _, s, _ in rows])
        ax.set_xticks(range(len(rows)), [r[0] for r in rows], rotation=60, ha="right", fontsize=7)
        ax.set_yscale("log")
        for i, (_, v, _, _) in enumerate(rows):
            if v == 0:
                ax.text(i, 1e-9, "exact", ha="center", va="bottom", fontsize=7)
        criteria = "; ".join(dict.fromkeys(c for *_, c in rows if c))
        ax.axhline(1.0, color="gray", ls="--", lw=0.8, label=f"each precision's tolerance ({criteria})")
        ax.legend(fontsize=7)
    ax.set_ylabel("error / its precision's tolerance")
    ax.set_title("Error by backend vs PyTorch FP32 (green: pass, red: fail)")
    save_fig(fig, path)
    plt.close(fig)


def write_compare(doc: dict, out_dir: Path, sheets=()) -> dict[str, Path]:
    """report.json, the error plot, report.md and report.html (with `sheets`: pipeline.htmlreport.Sheet blocks of
    crop sheets written into out_dir)."""
    out_dir = Path(out_dir)
    paths = {"json": out_dir / "report.json", "md": out_dir / "report.md", "error_png": out_dir / "error.png"}
    atomic_write(paths["json"], json.dumps(sanitize(doc), indent=2, default=json_default) + "\n")
    plot_compare(doc, paths["error_png"])
    _, paths["html"] = write_report(paths["md"], compare_blocks(doc, plot=paths["error_png"], sheets=sheets))
    return paths

