"""report.html beside a report.md: the same document, for a browser, self-contained (one file, opens from file://
with no network).

    write_html(md_path, md_text=None, *, sheets=(), title=None) -> Path

One source: the HTML is rendered (Jinja2, `page.html.j2`) from the Markdown text the report writer made, so both
say the same; what the Markdown links (plots, pictures) is embedded: an `.svg` twin of a plot inline, pictures as
data URIs. Sheets (pipeline.analysis.sheet: crops side by side, described by their `.json` twin) become
before/after sliders: bicubic vs the first output, and every output column against the sheet's reference column
(the last: the ground truth), with a toggle to the amplified difference. Tables sort by a click on a header.
Pictures past MAX_EMBED_BYTES are left out, and the page says which.
"""
from __future__ import annotations

import base64
import html
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.artifacts.atomic import atomic_write

MAX_EMBED_BYTES = 6 << 20  # pictures embedded per page; the rest are listed as left out
DIFF_GAIN = 8  # the difference view: |a - b| x 8, so a one-level error is visible


@dataclass
class Block:
    kind: str  # heading | paragraph | list | table | image | svg
    text: str = ""
    level: int = 0
    items: list[str] = field(default_factory=list)
    header: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    src: str = ""


@dataclass
class Slider:
    title: str
    before: str  # data URIs
    after: str
    diff: str
    before_label: str
    after_label: str


_INLINE = [(re.compile(r"`([^`]+)`"), r"<code>\1</code>"), (re.compile(r"\*\*([^*]+)\*\*"), r"<strong>\1</strong>")]


def inline(text: str) -> str:
    """Markdown's inline code and bold, on escaped text."""
    out = html.escape(text)
    for pattern, repl in _INLINE:
        out = pattern.sub(repl, out)
    return out


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def parse(md: str) -> list[Block]:
    """The Markdown our writers make (headings, paragraphs, '- ' lists, pipe tables, images) as blocks."""
    blocks: list[Block] = []
    lines = md.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
        elif m := re.match(r"^(#{1,4}) (.*)$", line):
            blocks.append(Block("heading", m.group(2), level=len(m.group(1))))
            i += 1
        elif line.startswith("|") and i + 1 < len(lines) and re.match(r"^\|[-:| ]+\|$", lines[i + 1].strip()):
            header, rows, i = _cells(line), [], i + 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(_cells(lines[i]))
                i += 1
            blocks.append(Block("table", header=header, rows=rows))
        elif m := re.match(r"^!\[([^\]]*)\]\(([^)]+)\)$", line.strip()):
            blocks.append(Block("image", m.group(1), src=m.group(2)))
            i += 1
        elif line.startswith("- "):
            items = []
            while i < len(lines) and lines[i].startswith(("- ", "  ")):
                if lines[i].startswith("- "):
                    items.append(lines[i][2:])
                else:
                    items[-1] += " " + lines[i].strip()
                i += 1
            blocks.append(Block("list", items=items))
        else:
            para = []
            while i < len(lines) and lines[i].strip() and not lines[i].startswith(("#", "|", "- ", "![")):
                para.append(lines[i].strip())
                i += 1
            blocks.append(Block("paragraph", " ".join(para)))
    return blocks


def _png_uri(rgb) -> str:
    import cv2

    ok, png = cv2.imencode(".png", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
    if not ok:
        raise RuntimeError("PNG encoding failed")
    return "data:image/png;base64," + base64.b64encode(png.tobytes()).decode()


def _pairs(names: list[str]) -> list[tuple[int, int]]:
    """(left, right) column pairs of a sheet, per crop: bicubic vs the first output (the before/after an SR user
    looks for), then every output against the reference column (the last). The LR column (nearest) is left out."""
    ref = len(names) - 1
    shown = [c for c, name in enumerate(names[:-1]) if not name.startswith("LR")]
    outputs = [c for c in shown if names[c] != "bicubic"]
    first = [(names.index("bicubic"), outputs[0])] if "bicubic" in names[:-1] and outputs else []
    return first + [(c, ref) for c in shown]


def sheet_sliders(sheet_png: Path) -> list[Slider]:
    """Before/after sliders from a crop sheet and its layout twin (`<sheet>.json`), crop by crop (_pairs)."""
    import cv2  # OpenCV and numpy only for pages with pictures: doctor's page renders on a bare Python
    import numpy as np

    meta = json.loads(Path(sheet_png).with_suffix(".json").read_text())
    img = cv2.imread(str(sheet_png), cv2.IMREAD_COLOR)
    if img is None:
        raise ValueError(f"cannot read {sheet_png}")
    img = cv2.cvtColor(img, cv2.COLOR_BGR2RGB)

    def cell(r: int, c: int):
        y0, x0 = meta["origins"][r][c]
        return img[y0:y0 + meta["cell"], x0:x0 + meta["cell"]]

    names = meta["columns"]
    sliders = []
    for r in range(meta["rows"]):
        for left, right in _pairs(names):
            a, b = cell(r, left), cell(r, right)
            diff = np.clip(np.abs(a.astype(np.int16) - b.astype(np.int16)) * DIFF_GAIN, 0, 255).astype(np.uint8)
            sliders.append(Slider(f"{Path(sheet_png).stem}, crop {r + 1}: {names[left]} vs {names[right]}",
                                  _png_uri(a), _png_uri(b), _png_uri(diff), names[left], names[right]))
    return sliders


def _embed(block: Block, folder: Path) -> tuple[Block, int]:
    """An image block with its picture embedded (an SVG twin inline), and the bytes it took."""
    path = folder / block.src
    svg = path.with_suffix(".svg")
    if svg.is_file():
        text = re.sub(r"<metadata>.*?</metadata>", "", svg.read_text(), flags=re.S)  # matplotlib's RDF block
        return Block("svg", block.text, src=text[text.find("<svg"):]), len(text)
    data = path.read_bytes()
    return Block("image", block.text, src="data:image/png;base64," + base64.b64encode(data).decode()), len(data)


def render(md: str, folder: Path, *, sheets=(), title: str | None = None) -> str:
    from jinja2 import Environment, PackageLoader, select_autoescape

    blocks, left_out, used = [], [], 0
    for b in parse(md):
        if b.kind == "image":
            if not (folder / b.src).is_file():
                left_out.append(f"{b.src} (missing)")
                continue
            b, size = _embed(b, folder)
            if used + size > MAX_EMBED_BYTES:
                left_out.append(f"{b.text or 'picture'} ({size >> 10} KiB)")
                continue
            used += size
        blocks.append(b)
    sliders = []
    for sheet in sheets:
        for s in sheet_sliders(Path(sheet)):
            size = len(s.before) + len(s.after) + len(s.diff)
            if used + size > MAX_EMBED_BYTES:
                left_out.append(s.title)
                continue
            used += size
            sliders.append(s)
    heading = next((b.text for b in blocks if b.kind == "heading"), "Report")
    env = Environment(loader=PackageLoader("pipeline.htmlreport", "."), autoescape=select_autoescape(["j2"]))
    env.filters["inline"] = inline
    return env.get_template("page.html.j2").render(title=title or heading, blocks=blocks, sliders=sliders,
                                                   left_out=left_out)


def write_html(md_path: Path, md_text: str | None = None, *, sheets=(), title: str | None = None) -> Path:
    """Write `<md_path stem>.html` beside `md_path` (report.md -> report.html) from its Markdown; returns it."""
    md_path = Path(md_path)
    md = md_text if md_text is not None else md_path.read_text()
    out = md_path.with_suffix(".html")
    atomic_write(out, render(md, md_path.parent, sheets=sheets, title=title))
    return out
