"""Issue 59's report edges, each as a new user hit it: one "needs a CUDA GPU" line from compare, bench rows that
cannot be measured at their size, one number format per quantity, tables that keep key columns in view at 1280 px."""
from __future__ import annotations

import pytest

from pipeline.cli import main
from pipeline.native.cuda_driver import gpu_visible


@pytest.mark.skipif(gpu_visible()[0], reason="a machine with a CUDA GPU runs every backend")
def test_compare_says_needs_a_cuda_gpu_once(capsys, tmp_path):
    """Nine rows (three GPU backends x three precisions, and PyTorch's fp16) said it nine times; now the one line
    before the rows does, and the report's rows keep each reason."""
    code = main(["compare", "--model", "srcnn", "--size", "16", "--precisions", "fp32", "fp16",
                 "--backends", "torch", "ort", "trt", "ort-trt", "--output", str(tmp_path / "cmp")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert sum("CUDA GPU" in line for line in out.splitlines()) == 1, out
    assert "needs a CUDA GPU" in (tmp_path / "cmp" / "report.md").read_text()


def test_bench_error_plot_draws_no_bar_for_an_exact_row():
    """The reference row (error 0) was drawn as a 1e-12 bar on the log axis; it is named in the title instead."""
    from pipeline.report.bench import error_bars

    rows = [{"sweep": "main", "model": "srcnn", "backend": "torch", "max_abs_err": 0.0},
            {"sweep": "main", "model": "srcnn", "backend": "ort", "max_abs_err": 1.4e-6},
            {"sweep": "sizes", "model": "srcnn", "backend": "ort", "max_abs_err": 2e-6},
            {"sweep": "main", "model": "srcnn", "backend": "trt", "max_abs_err": None}]
    drawn, exact = error_bars(rows)
    assert [r["backend"] for r in drawn] == ["ort"] and [r["backend"] for r in exact] == ["torch"]
    assert all(r["max_abs_err"] > 0 for r in drawn)


def test_verdict_columns_come_first_in_wide_tables(tmp_path):
    """At 1280 px a wide table scrolls in its box; the columns that say whether a row passes must not be behind it
    (tests/test_html_reports.py measures it in a browser): compare's criterion right after the status, the bench
    video table's vs fp32 and floor right after fps."""
    from pipeline import report
    from tests.test_report import _bench_doc

    assert report.COMPARE_HEADER.index("criterion") == report.COMPARE_HEADER.index("status") + 1 <= 6
    doc = _bench_doc()
    doc["video"] = [{"model": "m", "backend": "ort", "precision": "int8", "size": "720p", "input": [1280, 720],
                     "output": [3840, 2160], "scale": 3.0, "frames": 4, "fps": 2.0, "inference_fps": 3.0,
                     "vs_fp32": 2.5, "floor": 2.0}]
    md = report.write_bench(doc, tmp_path)["md"].read_text()
    header = next(ln for ln in md.splitlines() if "| vs fp32 |" in ln)
    cells = [c.strip() for c in header.strip("|").split("|")]
    assert cells.index("vs fp32") == cells.index("fps") + 1 and cells.index("floor") == cells.index("fps") + 2 <= 7


def test_a_loss_is_written_one_way_in_every_table(tmp_path):
    """Losses read 7.940e-02 in one table and 0.0794 in the next (each column chose its own form): now every table
    writes a Y-PSNR or SSIM loss with four decimals."""
    from pipeline import report
    from tests.test_report import _bench_doc

    doc = _bench_doc()
    quality = {"psnr_loss_db": 0.0794, "ssim_loss": 0.0091, "budget_db": 0.1, "within_budget": True}
    for r in doc["results"]:
        if r["sweep"] == "main":
            r["quality"] = quality
    doc["precision_auto"] = [{"model": "m", "label": "ort int8", "median_ms": 2.0, "baseline_ms": 30.0,
                              "speedup": 15.0, "floor": 12.0, "meets_floor": True, "quality": quality,
                              "reason": "fastest within budget"}]
    md = report.write_bench(doc, tmp_path)["md"].read_text()
    tables = [report.parse_table(md, "model", has=h) for h in ("SSIM loss", "Y-PSNR loss dB")]
    cells = {row[h] for rows in tables for row in rows for h in ("Y-PSNR loss dB", "SSIM loss")
             if row.get(h, "-") != "-"}
    assert cells == {"0.0794", "0.0091"}, cells
    assert report.loss(0.0794) == "0.0794" and report.loss(None) == "-"


def test_the_roofline_peaks_spread_is_shown(tmp_path):
    """The roofline's peak moved 134 -> 198 GFLOP/s between runs (ort-folded's share 78 % -> 46 %) without a word:
    the report says how far its GEMM measurements ranged, and that the shares move with the highest."""
    from pipeline import report
    from tests.test_report import _bench_doc

    doc = _bench_doc()
    doc["peak"]["samples"] = [134.0, 171.0, 198.0]
    md = report.write_bench(doc, tmp_path)["md"].read_text()
    assert "its 3 GEMM measurements ranged 134-198 GFLOP/s (48 % apart): roofline shares move with the highest" in md
    assert report.peak_spread({"samples": [150.0]}) == "" and report.peak_spread({}) == ""
