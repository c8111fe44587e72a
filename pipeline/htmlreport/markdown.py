"""report.md from a report's blocks (pipeline.htmlreport.document): the same content as the page, for people and
for tools that read its tables (pipeline.report.tables.parse_table). Nothing ever parses this text back into a
page. Plain text keeps to one line and cannot open a link, a picture or raw HTML in a Markdown viewer, nor drive a
terminal that prints the file: control characters (line breaks included) are written as escapes
(pipeline.errors.printable), and `[`, `]` and a `<` that could open a tag are escaped; a table cell's `|` too."""
from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import quote

from pipeline.errors import printable
from pipeline.htmlreport.document import Code, Figure, Heading, Items, Link, Paragraph, Sheet, Strong, Table

_SPECIAL = re.compile(r"([\[\]\\`]|<(?=[A-Za-z/!?]))")


def plain(text: str) -> str:
    return _SPECIAL.sub(r"\\\1", printable(text))


def _run(run) -> str:
    if isinstance(run, Code):
        return "`" + printable(run.text).replace("`", "'") + "`"
    if isinstance(run, Strong):
        return f"**{plain(run.text)}**"
    if isinstance(run, Link):  # its href is plain names (checked when made)
        return f"[{plain(run.text)}]({run.href})"
    return plain(run)


def runs(seq) -> str:
    return "".join(_run(r) for r in seq)


def _cell(text: str) -> str:
    return plain(text).replace("|", "\\|")


def _link(path: Path, folder: Path | None) -> str:
    """A picture's address relative to the Markdown file's folder (its name when that is not known),
    percent-encoded: a file name is never written raw inside a link (`<`, `>`, `)`, spaces or a line break in it
    could end the link and let the rest render as HTML); bytes that are not UTF-8 are encoded as they are on disk."""
    link = Path(path).name if folder is None else Path(os.path.relpath(Path(path), folder)).as_posix()
    return quote(link, safe="/", errors="surrogateescape")


def block_lines(b, folder: Path | None = None) -> list[str]:
    if isinstance(b, Heading):
        return ["#" * b.level + " " + plain(b.text)]
    if isinstance(b, Paragraph):
        return [runs(b.runs)]
    if isinstance(b, Items):
        return ["- " + runs(it) for it in b.items]
    if isinstance(b, Table):
        return ["| " + " | ".join(_cell(h) for h in b.header) + " |", "|" + "|".join("---" for _ in b.header) + "|",
                *("| " + " | ".join(_cell(c) for c in r) + " |" for r in b.rows)]
    if isinstance(b, (Figure, Sheet)):
        caption = b.caption if isinstance(b, Figure) else b.title
        return [f"![{plain(caption)}]({_link(b.path, folder)})"]
    raise TypeError(f"not a report block: {type(b).__name__}")


def to_lines(blocks, folder: Path | None = None) -> list[str]:
    """The blocks as Markdown lines, a blank line between blocks."""
    out: list[str] = []
    for b in blocks:
        out += ([""] if out else []) + block_lines(b, folder)
    return out


def to_markdown(blocks, folder: Path | None = None) -> str:
    return "\n".join(to_lines(blocks, folder)) + "\n"
