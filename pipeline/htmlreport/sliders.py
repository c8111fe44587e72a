"""Before/after sliders from a crop sheet (pipeline.analysis.sheet: a PNG and its `.json` layout twin, both read
confined to the report's folder): per crop, bicubic vs the first output (the before/after an SR user looks for),
then every output column against the sheet's reference column (the last: the ground truth). An output whose crop
is within VISIBLE_LEVELS of 255 everywhere of an output already shown (backends that agree) has its slider folded
away, not shown as one more slider that looks the same."""
from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.htmlreport.embed import NotEmbedded, read_confined

DIFF_GAIN = 8  # the difference view: |a - b| x 8, so a one-level error is visible
VISIBLE_LEVELS = 2  # largest per-pixel difference (of 255) the eye does not see between two crops


@dataclass
class Slider:
    title: str
    before: str  # data URIs
    after: str
    diff: str
    before_label: str
    after_label: str

    @property
    def size(self) -> int:
        return len(self.before) + len(self.after) + len(self.diff)


@dataclass
class SheetGroup:
    """One sheet's sliders under its heading: `shown`, and `alike` (outputs that look the same as one shown)."""

    title: str
    shown: list[Slider] = field(default_factory=list)
    alike: list[Slider] = field(default_factory=list)


JPEG_QUALITY = 92  # a sheet embedded as JPEG (many sliders on one page): close to the eye, a fifth of PNG's bytes


def _png_uri(rgb, picture: str = "png") -> str:
    import cv2

    bgr = cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)
    if picture == "jpeg":
        ok, data = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
    else:
        ok, data = cv2.imencode(".png", bgr)
    if not ok:
        raise RuntimeError(f"{picture.upper()} encoding failed")
    return f"data:image/{picture};base64," + base64.b64encode(data.tobytes()).decode()


def pairs(names: list[str], each_vs_bicubic: bool = False) -> list[tuple[int, int]]:
    """(left, right) column pairs of a sheet, per crop: bicubic vs the first output (vs every output with
    `each_vs_bicubic`), then every output against the reference column (the last). The LR column (nearest) is left
    out."""
    ref = len(names) - 1
    shown = [c for c, name in enumerate(names[:-1]) if not name.startswith("LR")]
    outputs = [c for c in shown if names[c] != "bicubic"]
    against = outputs if each_vs_bicubic else outputs[:1]
    first = [(names.index("bicubic"), c) for c in against] if "bicubic" in names[:-1] else []
    return first + [(c, ref) for c in shown]


def _layout(folder: Path, png: Path, limit: int) -> tuple[dict, object]:
    import cv2  # OpenCV and numpy only for pages with pictures: doctor's page renders on a bare Python
    import numpy as np

    try:
        meta = json.loads(read_confined(folder, png.with_suffix(".json"), 1 << 20))
        names, rows, cell = [str(n) for n in meta["columns"]], int(meta["rows"]), int(meta["cell"])
        origins = [[(int(y), int(x)) for y, x in row] for row in meta["origins"]]
    except (ValueError, KeyError, TypeError) as e:
        raise NotEmbedded(f"its layout is unreadable ({type(e).__name__})") from None
    img = cv2.imdecode(np.frombuffer(read_confined(folder, png, limit), np.uint8), cv2.IMREAD_COLOR)
    if img is None:
        raise NotEmbedded("not a PNG OpenCV reads")
    return {"names": names, "rows": rows, "cell": cell, "origins": origins}, cv2.cvtColor(img, cv2.COLOR_BGR2RGB)


def _alike(a, b) -> bool:
    import numpy as np

    return a.shape == b.shape and int(np.abs(a.astype(np.int16) - b.astype(np.int16)).max(initial=0)) <= VISIBLE_LEVELS


def sheet_group(folder: Path, title: str, png: Path, limit: int, picture: str = "png",
                each_vs_bicubic: bool = False) -> SheetGroup:
    """The sliders of one sheet (NotEmbedded when its files cannot be read confined); `picture`: how the crops are
    embedded (png, jpeg)."""
    import numpy as np

    meta, img = _layout(folder, Path(png), limit)

    def cell(r: int, c: int):
        y0, x0 = meta["origins"][r][c]
        return img[y0:y0 + meta["cell"], x0:x0 + meta["cell"]]

    names, group = meta["names"], SheetGroup(title)
    for r in range(meta["rows"]):
        seen = []  # output crops of this row already shown against the reference
        for left, right in pairs(names, each_vs_bicubic):
            a, b = cell(r, left), cell(r, right)
            delta = np.abs(a.astype(np.int16) - b.astype(np.int16))
            diff = np.clip(delta * DIFF_GAIN, 0, 255).astype(np.uint8)
            s = Slider(f"crop {r + 1}: {names[left]} vs {names[right]}", _png_uri(a, picture), _png_uri(b, picture),
                       _png_uri(diff, picture), names[left], names[right])
            if right != len(names) - 1 or names[left] == "bicubic":
                group.shown.append(s)
            elif any(_alike(a, other) for other in seen):
                group.alike.append(s)
            else:
                seen.append(a)
                group.shown.append(s)
    return group
