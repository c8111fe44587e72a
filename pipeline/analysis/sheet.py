"""A PNG sheet of the same crops side by side: LR (nearest), bicubic, each model or backend, ground truth.

Users would rather look than read: one row per crop, one column per image, each column headed by its name and,
when there is a ground truth, its Y-channel PSNR/SSIM over the whole image (pipeline.quality.metrics, border
cropped by the scale). Crops are shown at 1:1 HR pixels, enlarged by an integer nearest-neighbour `zoom` so
small crops stay visible; pixels are never interpolated, so what you see is what the model wrote.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from pipeline import backends as B
from pipeline.artifacts.atomic import atomic_write
from pipeline.data.degradation import make_pair, upscale_bicubic
from pipeline.data.sample_images import load_rgb
from pipeline.htmlreport import Sheet
from pipeline.images import imageio
from pipeline.images.imageio import ImageError
from pipeline.images.pixels import to_rgb8
from pipeline.quality.metrics import psnr_y, ssim_y

GAP = 4  # px between cells and around the sheet
HEADER = 40  # px for a column's two label lines
BACKGROUND = 255
FONT = cv2.FONT_HERSHEY_SIMPLEX


@dataclass(frozen=True)
class Layout:
    """Where everything is: cell (row, col) top-left corners, cell side, sheet size (all in sheet pixels)."""

    rows: int
    cols: int
    cell: int
    names: tuple[str, ...] = ()  # the columns' names, left to right

    @property
    def width(self) -> int:
        return self.cols * self.cell + (self.cols + 1) * GAP

    @property
    def height(self) -> int:
        return HEADER + self.rows * self.cell + (self.rows + 1) * GAP

    def origin(self, row: int, col: int) -> tuple[int, int]:
        return HEADER + GAP + row * (self.cell + GAP), GAP + col * (self.cell + GAP)


def default_crops(reference: np.ndarray, side: int, count: int = 2) -> list[tuple[int, int]]:
    """Top-left corners of `count` crops of `side` HR pixels: the most detailed (highest gradient energy) cells of
    a coarse grid, where SR methods differ most."""
    h, w = reference.shape[:2]
    side = min(side, h, w)
    gray = reference.astype(np.float32).mean(axis=2)
    energy = np.abs(np.diff(gray, axis=0))[:, :-1] + np.abs(np.diff(gray, axis=1))[:-1, :]
    candidates = [(float(energy[y:y + side, x:x + side].sum()), y, x)
                  for y in range(0, h - side + 1, max(1, side // 2)) for x in range(0, w - side + 1, max(1, side // 2))]
    chosen: list[tuple[int, int]] = []
    for _, y, x in sorted(candidates, reverse=True):
        if all(abs(y - cy) >= side or abs(x - cx) >= side for cy, cx in chosen):  # no overlapping crops
            chosen.append((y, x))
        if len(chosen) == count:
            break
    return chosen


def _label(img: np.ndarray, text: str, x: int, y: int, width: int) -> None:
    scale = 0.4
    while scale > 0.2 and cv2.getTextSize(text, FONT, scale, 1)[0][0] > width:
        scale -= 0.05
    cv2.putText(img, text, (x, y), FONT, scale, (0, 0, 0), 1, cv2.LINE_AA)


def _as_uint8(img: np.ndarray) -> np.ndarray:
    img = np.asarray(img)
    if img.dtype == np.uint8:
        return img
    return (np.clip(img, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)


def _torch_bicubic(lr: np.ndarray, size: tuple[int, int]) -> np.ndarray:

    return upscale_bicubic(lr, size)


def columns(lr: np.ndarray, outputs: dict[str, np.ndarray], reference: np.ndarray | None,
            scale: float, reference_label: str = "ground truth",
            bicubic=_torch_bicubic) -> list[tuple[str, str, np.ndarray]]:
    """(name, metrics line, HR-sized uint8 image) per column, in sheet order. `bicubic(lr uint8, (h, w))` makes
    the baseline column (the sr stage passes its torch-free one)."""
    lr = _as_uint8(lr)
    hr_shape = reference.shape[:2] if reference is not None else next(iter(outputs.values())).shape[:2]
    cols = [("LR (nearest)", cv2.resize(lr, hr_shape[::-1], interpolation=cv2.INTER_NEAREST)),
            ("bicubic", _as_uint8(bicubic(lr, tuple(hr_shape))))]
    cols += [(name, _as_uint8(img)) for name, img in outputs.items()]
    # scikit-image's metrics cost ~0.8 s to import and are not in every install: only when there is a reference

    border = math.ceil(scale)
    result = []
    for name, img in cols:
        if img.shape[:2] != tuple(hr_shape):
            raise ValueError(f"sheet column '{name}' is {img.shape[:2]}, expected {tuple(hr_shape)}")
        line = ""
        if reference is not None:
            line = f"{psnr_y(img, reference, border):.2f} dB / {ssim_y(img, reference, border):.3f}"
        result.append((name, line, img))
    if reference is not None:
        result.append((reference_label, "PSNR / SSIM (Y)", _as_uint8(reference)))
    return result


def render(lr: np.ndarray, outputs: dict[str, np.ndarray], reference: np.ndarray | None = None, *,
           scale: float, side: int = 64, crops: list[tuple[int, int]] | None = None,
           min_cell: int = 128, reference_label: str = "ground truth", bicubic=_torch_bicubic,
           ) -> tuple[np.ndarray, Layout, list[tuple[int, int]]]:
    """The sheet as uint8 HxWx3 RGB, its layout, and the crop corners used (HR pixels). `reference_label` names
    the last column (e.g. "PyTorch FP32" where compare scores backends against it)."""
    cols = columns(lr, outputs, reference, scale, reference_label, bicubic)
    h, w = cols[0][2].shape[:2]
    side = min(side, h, w)
    crops = crops if crops is not None else default_crops(cols[-1][2], side)  # ground truth, else last output
    zoom = max(1, math.ceil(min_cell / side))
    layout = Layout(len(crops), len(cols), side * zoom, tuple(name for name, _, _ in cols))
    sheet = np.full((layout.height, layout.width, 3), BACKGROUND, np.uint8)
    for c, (name, line, img) in enumerate(cols):
        _, x0 = layout.origin(0, c)
        _label(sheet, name, x0, 16, layout.cell)
        _label(sheet, line, x0, 34, layout.cell)
        for r, (cy, cx) in enumerate(crops):
            y0, x0 = layout.origin(r, c)
            patch = img[cy:cy + side, cx:cx + side]
            sheet[y0:y0 + layout.cell, x0:x0 + layout.cell] = np.repeat(np.repeat(patch, zoom, 0), zoom, 1)
    return sheet, layout, crops


def write(path: Path, lr: np.ndarray, outputs: dict[str, np.ndarray], reference: np.ndarray | None = None, *,
          scale: float, side: int = 64, crops: list[tuple[int, int]] | None = None,
          reference_label: str = "ground truth", bicubic=_torch_bicubic) -> Path:
    """Render and write the sheet as PNG (atomically), with its layout as a `.json` twin (columns, cells: what
    pipeline.htmlreport cuts into before/after sliders); returns the PNG's path."""
    sheet, layout, _ = render(lr, outputs, reference, scale=scale, side=side, crops=crops,
                              reference_label=reference_label, bicubic=bicubic)
    ok, png = cv2.imencode(".png", cv2.cvtColor(sheet, cv2.COLOR_RGB2BGR))
    if not ok:
        raise RuntimeError(f"PNG encoding of the sheet for {path} failed")
    origins = [[layout.origin(r, c) for c in range(layout.cols)] for r in range(layout.rows)]
    atomic_write(Path(path).with_suffix(".json"), json.dumps({"columns": list(layout.names), "rows": layout.rows,
                                                              "cell": layout.cell, "origins": origins}) + "\n")
    atomic_write(Path(path), png.tobytes())
    return Path(path)


def _safe_name(model: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in Path(model).name)


def compare_sheet(out_dir: Path, model: str, rows: list[dict], scale: float, *, weights=None, size: int = 192,
                  image: str = "astronaut") -> Path | None:
    """The sheet compare writes: a held-out image's centre crop degraded as in eval, upscaled by every backend
    and precision that passed (so the eye sees what the numbers say), against the original crop."""
    ran = [(r["backend"], r["precision"]) for r in rows if r.get("status") == "pass" and r.get("scale") == scale]
    if not ran:
        return None
    img = load_rgb(image)
    h, w = img.shape[:2]
    s = min(size, h, w)
    lr, hr = make_pair(img[(h - s) // 2:(h - s) // 2 + s, (w - s) // 2:(w - s) // 2 + s], scale)
    x = np.ascontiguousarray(lr.transpose(2, 0, 1)[None], dtype=np.float32) / 255.0
    outputs = {}
    for name, precision in dict.fromkeys(ran):
        y = B.create(name, model, precision, weights=weights).infer(x, scale)[0].transpose(1, 2, 0)
        outputs[f"{name} {precision}"] = y[: hr.shape[0], : hr.shape[1]]
    # "-at-": srcnn at x3 and srcnn-x3 at x3 read apart (sheet-srcnn-x3.png vs sheet-srcnn-x3-x3.png did not)
    return write(Path(out_dir) / f"sheet-{_safe_name(model)}-at-x{scale:g}.png", lr, outputs, hr, scale=scale)


def compare_sheets(out_dir: Path, results: list[dict], weights_for=lambda model: None) -> list[Sheet]:
    """compare_sheet for every model and scale of a compare document's `models` section, each as a report block
    titled by its model and scale."""
    sheets = [(f"{m['model']} x{scale:g}: every backend and precision that passed, against the original",
               compare_sheet(out_dir, m["model"], m["rows"], scale, weights=weights_for(m["model"])))
              for m in results for scale in m["scales"]]
    return [Sheet(title, p) for title, p in sheets if p is not None]


def read_rgb8(path: Path) -> np.ndarray:
    """Any image file the sr stage writes or reads (gray, 16-bit, alpha) as uint8 HxWx3 RGB for the sheet, read as
    sr reads its inputs (imageio.read_image: regular files, the size and pixel limits, orientation applied)."""
    try:
        return to_rgb8(imageio.read_image(path).pixels)
    except ImageError as e:
        raise ValueError(f"cannot read {path} for the sheet: {e}") from None


def from_float(bicubic):
    """A float CHW [0, 1] bicubic (the sr stage's torch-free one) in the sheet's uint8 HxWx3 form."""
    return lambda lr, size: bicubic(lr.transpose(2, 0, 1).astype(np.float32) / 255.0, size).transpose(1, 2, 0)


def for_sr_run(summary, output: Path, bicubic=_torch_bicubic) -> Path | None:
    """The sheet `sr --reference` writes with the outputs (sheet_path): the first scored image's crops, LR /
    bicubic / the model / ground truth. None when no image was scored."""
    scored = [r for r in summary.ok if "psnr" in r.metrics]
    if not scored:
        return None
    r = scored[0]
    lr, sr, hr = read_rgb8(r.job.src), read_rgb8(r.job.dst), read_rgb8(Path(r.metrics["reference"]))
    hr = hr[: sr.shape[0], : sr.shape[1]]  # HR sides not multiples of the scale: cropped as the metrics do
    side = max(16, min(64, sr.shape[0] // 2, sr.shape[1] // 2))
    return write(sheet_path(Path(output), [rec.job.dst for rec in summary.records]), lr,
                 {Path(summary.model).name: sr}, hr, scale=summary.scale, side=side, bicubic=bicubic)


SHEET_NAME = "reference-sheet"


def sheet_path(output: Path, outputs: list[Path]) -> Path:
    """Inside the OUTPUT folder (beside the file for a single-file OUTPUT), under a name no output of the run has."""
    folder, stem = (output.parent, f"{output.stem}.{SHEET_NAME}") if output.suffix else (output, SHEET_NAME)
    taken = {Path(p).resolve() for p in outputs}
    path, n = folder / f"{stem}.png", 1
    while path.resolve() in taken:
        n += 1
        path = folder / f"{stem}-{n}.png"
    return path
