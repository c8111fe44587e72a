"""Report pages: a report's content as data, written as report.md (for people and tools) and report.html (for a
browser: self-contained, opens from file:// with no network), both from the same blocks.

    write_report(md_path, blocks, *, title=None) -> (md, html)    report.md and report.html beside it
    write_html(md_path, blocks, *, title=None) -> html             report.html only (its report.md written already)

    document   the blocks a writer makes (Heading, Paragraph, Items, Table, Figure, Sheet; runs: str, Code, Strong)
    markdown   blocks -> Markdown text                   page      blocks -> HTML (Jinja2, autoescaped, CSP)
    embed      reading a picture confined to the folder   sliders   crop sheets -> before/after sliders

No page is made by parsing text: every string a writer passes (a model name, a file name) is escaped as text, and
only files the writer names, inside the report's folder, are embedded.
"""
from __future__ import annotations

from pathlib import Path

from pipeline.artifacts.atomic import atomic_write
from pipeline.htmlreport.document import (
    Code,
    Figure,
    Heading,
    Items,
    Paragraph,
    Sheet,
    Strong,
    Table,
    items,
    para,
    plot_figure,
)
from pipeline.htmlreport.markdown import to_lines, to_markdown

__all__ = ["Code", "Figure", "Heading", "Items", "Paragraph", "Sheet", "Strong", "Table", "items", "para",
           "plot_figure", "to_lines", "to_markdown", "write_html", "write_report"]


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
