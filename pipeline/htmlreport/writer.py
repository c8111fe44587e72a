"""Writing a report: its blocks as report.md and as report.html beside it (atomic writes)."""
from __future__ import annotations

from pathlib import Path

from pipeline.artifacts.atomic import atomic_write
from pipeline.htmlreport.markdown import to_markdown


def write_html(md_path: Path, blocks, *, title: str | None = None) -> Path:
    """Write `<md_path stem>.html` beside `md_path` (report.md -> report.html) from `blocks`; returns it. Pictures
    are embedded only from inside md_path's folder."""
    from pipeline.htmlreport.page import render  # Jinja2: a bare Python (doctor's) still writes its Markdown

    md_path = Path(md_path)
    out = md_path.with_suffix(".html")
    atomic_write(out, render(list(blocks), md_path.parent, title=title))
    return out


def write_report(md_path: Path, blocks, *, title: str | None = None) -> tuple[Path, Path]:
    """Write report.md and report.html (write_html) from the same blocks; returns both paths."""
    md_path, blocks = Path(md_path), list(blocks)
    atomic_write(md_path, to_markdown(blocks, md_path.parent))
    return md_path, write_html(md_path, blocks, title=title)
