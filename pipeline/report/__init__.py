"""Report writers for compare and bench: report.json (every number), and report.md and report.html from the same
blocks (pipeline.htmlreport), plots (PNG with an SVG twin). Files are written atomically.

    machine   the machine facts every report opens with        tables   how values are written (tables, JSON)
    compare   compare's report                                 bench    bench's report (and its Ray/Triton rows)
    plots     matplotlib figures saved as PNG + SVG
"""
from pipeline.report.bench import (
    RESULT_HEADER,
    bench_blocks,
    bench_markdown,
    kernel_markdown,
    peak_spread,
    plot_bench,
    ray_markdown,
    result_row,
    startup_markdown,
    triton_markdown,
    video_markdown,
    write_bench,
)
from pipeline.report.compare import COMPARE_HEADER, compare_blocks, compare_markdown, plot_compare, write_compare
from pipeline.report.machine import env_items, environment
from pipeline.report.tables import db, fmt, loss, parse_table, percent, roofline_share, runs_phrase, speedup, table

__all__ = ["COMPARE_HEADER", "RESULT_HEADER", "bench_blocks", "bench_markdown", "compare_blocks", "compare_markdown",
           "db", "env_items", "environment", "fmt", "kernel_markdown", "loss", "parse_table", "peak_spread",
           "percent", "plot_bench", "plot_compare", "ray_markdown", "result_row", "roofline_share", "runs_phrase",
           "speedup", "startup_markdown", "table", "triton_markdown", "video_markdown", "write_bench",
           "write_compare"]
