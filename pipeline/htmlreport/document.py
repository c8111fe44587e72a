"""A report's content as data: the blocks a writer makes (headings, paragraphs, lists, tables, figures, crop
sheets), rendered to report.md (pipeline.htmlreport.markdown) and to report.html (pipeline.htmlreport.page) from the
same objects. Every string here is text: no renderer ever reads markup out of it, so a model name or a file name
from a user's file stays a name, whatever characters it holds.

A paragraph or list item is a sequence of runs: `str` (plain), `Code` (monospace), `Strong` (bold) or `Link` (to a
sub-report beside it).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Code:
    text: str
    kind = "code"


@dataclass(frozen=True)
class Strong:
    text: str
    kind = "strong"


@dataclass(frozen=True)
class Link:
    """A link to another file the run wrote beside the report (a sub-report): `href` is a relative path of plain
    names, checked here, so no page ever links out of its folder tree or to another scheme."""

    text: str
    href: str
    kind = "link"

    def __post_init__(self):
        parts = self.href.split("/")
        if not self.href or self.href.startswith("/") or any(p in ("", ".", "..") or not _PLAIN_NAME.fullmatch(p)
                                                             for p in parts):
            raise ValueError(f"a report link is a relative path of plain names, not {self.href!r}")


_PLAIN_NAME = re.compile(r"[A-Za-z0-9._-]+")


def said(text: str) -> tuple:
    """One of our own messages as runs: what it marks as a command with backticks (`python -m pipeline ...`)
    becomes Code, the rest stays text (report.md writes the same backticks; the page shows code, not backticks).
    Only for messages this project writes: a user's string is passed as it is."""
    parts = text.split("`")
    if len(parts) % 2 == 0:  # an odd number of backticks: no pairs to trust
        return (text,)
    return tuple(Code(p) if i % 2 else p for i, p in enumerate(parts) if p)


Run = str | Code | Strong | Link


@dataclass(frozen=True)
class Heading:
    text: str
    level: int = 2
    kind = "heading"


@dataclass(frozen=True)
class Paragraph:
    runs: tuple[Run, ...]
    kind = "paragraph"


@dataclass(frozen=True)
class Items:
    """A bullet list; each item a sequence of runs."""

    items: tuple[tuple[Run, ...], ...]
    kind = "items"


@dataclass(frozen=True)
class Table:
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    kind = "table"


@dataclass(frozen=True)
class Figure:
    """A picture this run wrote inside the report's folder: `path` (PNG), and `twin` (its SVG drawing) when the
    writer made one; the page embeds the twin as an image."""

    caption: str
    path: Path
    twin: Path | None = None
    kind = "figure"


@dataclass(frozen=True)
class Sheet:
    """A crop sheet this run wrote (pipeline.analysis.sheet: PNG plus its `.json` layout), shown as before/after
    sliders under `title`."""

    title: str
    path: Path
    picture: str = "png"          # how its crops are embedded: "png" (exact) or "jpeg" (a page of many sliders)
    each_vs_bicubic: bool = False  # every output column against bicubic too (not only the first)
    kind = "sheet"


Block = Heading | Paragraph | Items | Table | Figure | Sheet


def para(*runs: Run) -> Paragraph:
    return Paragraph(tuple(runs))


def items(*entries) -> Items:
    """A list from entries that are each a string or a sequence of runs."""
    return Items(tuple((e,) if isinstance(e, (str, Code, Strong, Link)) else tuple(e) for e in entries))


def plot_figure(caption: str, png: str | Path) -> Figure:
    """A plot saved by pipeline.report.plots.save_fig: the PNG and its SVG twin."""
    png = Path(png)
    return Figure(caption, png, png.with_suffix(".svg"))


def title_of(blocks) -> str:
    """The page's title: its first heading's text."""
    return next((b.text for b in blocks if isinstance(b, Heading)), "Report")
