"""report.html from a report's blocks (pipeline.htmlreport.document): one self-contained file that opens from
file:// with no network. Jinja2 (`page.html.j2`) autoescapes every string; the only markup not escaped is the
page's own style sheet and script (page.css, page.js, shipped with this package), and a Content-Security-Policy
meta tag lets the page load nothing from anywhere and run no script or style but those two (by their SHA-256).
Figures and sheets are embedded from the files the writer names (pipeline.htmlreport.embed: inside the report's
folder, no links) as data: URIs, an SVG drawing as an <img> (a picture, never inline markup, so nothing in it runs);
pictures past MAX_EMBED_BYTES are left out and the page says which."""
from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from pipeline.errors import printable
from pipeline.htmlreport.document import Figure, Sheet, title_of
from pipeline.htmlreport.embed import NotEmbedded, data_uri
from pipeline.htmlreport.sliders import VISIBLE_LEVELS, SheetGroup, sheet_group

MAX_EMBED_BYTES = 6 << 20  # pictures embedded per page; the rest are listed as left out


@dataclass
class Picture:
    caption: str
    src: str  # a data: URI
    kind = "picture"


@dataclass
class SheetView:
    group: SheetGroup
    kind = "sheets"


class _Budget:
    def __init__(self, folder: Path):
        self.folder, self.used, self.left_out = Path(folder), 0, []

    def take(self, size: int, what: str) -> bool:
        if self.used + size > MAX_EMBED_BYTES:
            self.left_out.append(f"{what} ({size >> 10} KiB)")
            return False
        self.used += size
        return True

    def figure(self, fig: Figure) -> Picture | None:
        why = ""
        for path in [p for p in (fig.twin, fig.path) if p is not None]:
            try:
                uri = data_uri(self.folder, path, MAX_EMBED_BYTES - self.used)
            except NotEmbedded as e:
                why = str(e)
                continue
            self.used += len(uri)
            return Picture(fig.caption, uri)
        self.left_out.append(f"{fig.caption or 'picture'} ({why})")
        return None

    def sheet(self, sheet: Sheet) -> SheetView | None:
        try:
            group = sheet_group(self.folder, sheet.title, sheet.path, MAX_EMBED_BYTES, sheet.picture,
                                sheet.each_vs_bicubic)
        except NotEmbedded as e:
            self.left_out.append(f"{sheet.title} ({e})")
            return None
        group.shown = [s for s in group.shown if self.take(s.size, f"{sheet.title}, {s.title}")]
        group.alike = [s for s in group.alike if self.take(s.size, f"{sheet.title}, {s.title}")]
        return SheetView(group)


def _asset(name: str) -> str:
    return resources.files("pipeline.htmlreport").joinpath(name).read_text(encoding="utf-8")


def _hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def policy(style: str, script: str) -> str:
    """The page's Content-Security-Policy: nothing fetched, no plugin, no form, no base change; pictures only from
    data: URIs; only the page's own style sheet and script."""
    return (f"default-src 'none'; img-src data:; style-src {_hash(style)}; script-src {_hash(script)}; "
            "base-uri 'none'; form-action 'none'; object-src 'none'")


def render(blocks, folder: Path, *, title: str | None = None) -> str:
    from jinja2 import Environment, PackageLoader
    from markupsafe import Markup

    budget, views = _Budget(folder), []
    for b in blocks:
        view = budget.figure(b) if isinstance(b, Figure) else budget.sheet(b) if isinstance(b, Sheet) else b
        if view is not None:
            views.append(view)
    style, script = _asset("page.css"), _asset("page.js")
    # every string shown has its control characters written as escapes, as report.md and the terminal do (raw ESC
    # and BEL bytes from a file's metadata or name reached the page); line breaks and tabs are plain layout there
    env = Environment(loader=PackageLoader("pipeline.htmlreport", "."), autoescape=True,
                      finalize=lambda v: printable(v, keep="\n\t") if type(v) is str else v)
    # Markup only for this package's own page.css and page.js, never a user string
    return env.get_template("page.html.j2").render(
        title=title or title_of(blocks), blocks=views, left_out=budget.left_out, visible=VISIBLE_LEVELS,
        csp=policy(style, script), style=Markup(style), script=Markup(script))
