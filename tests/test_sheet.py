"""The PNG crop sheet: read back, every cell is the same crop of its image at 1:1 (nearest zoom), columns in order
LR, bicubic, outputs, ground truth, headed by labels; metrics are those of pipeline.quality.metrics."""
from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch
from skimage import data

from models.registry import load_model, size_tensor
from pipeline.analysis import sheet
from pipeline.data.degradation import downscale, to_tensor, to_uint8, upscale_bicubic
from pipeline.quality.metrics import psnr_y


@pytest.fixture(scope="module")
def images():
    hr = data.astronaut()[100:196, 160:256].copy()  # 96x96, the face
    lr = downscale(hr, (32, 32))
    model = load_model("srcnn")
    with torch.no_grad():
        sr = to_uint8(model(to_tensor(lr), size_tensor(32, 32, 3.0)))
    return lr, hr, {"srcnn (torch)": sr}


def test_sheet_png_layout_and_cells(images, tmp_path):
    lr, hr, outputs = images
    path = sheet.write(tmp_path / "sheet.png", lr, outputs, hr, scale=3, side=40, crops=[(0, 0), (50, 30)])
    got = cv2.cvtColor(cv2.imread(str(path), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    _, layout, _ = sheet.render(lr, outputs, hr, scale=3, side=40, crops=[(0, 0), (50, 30)])
    assert (layout.rows, layout.cols) == (2, 4) and layout.cell == 40 * 4  # zoom 4 makes a 40 px crop >= 128
    assert got.shape == (layout.height, layout.width, 3)
    columns = [cv2.resize(lr, (96, 96), interpolation=cv2.INTER_NEAREST), upscale_bicubic(lr, (96, 96)),
               outputs["srcnn (torch)"], hr]
    for r, (cy, cx) in enumerate([(0, 0), (50, 30)]):
        for c, img in enumerate(columns):
            y0, x0 = layout.origin(r, c)
            cell = got[y0:y0 + layout.cell, x0:x0 + layout.cell]
            assert np.array_equal(cell[::4, ::4], img[cy:cy + 40, cx:cx + 40]), (r, c)
            assert np.array_equal(cell, np.repeat(np.repeat(cell[::4, ::4], 4, 0), 4, 1))
    for c in range(4):  # every column has a label drawn in its header
        _, x0 = layout.origin(0, c)
        assert (got[:sheet.HEADER, x0:x0 + layout.cell] < 128).any()


def test_column_metrics_are_the_pipeline_metrics(images):
    lr, hr, outputs = images
    cols = sheet.columns(lr, outputs, hr, scale=3)
    assert [c[0] for c in cols] == ["LR (nearest)", "bicubic", "srcnn (torch)", "ground truth"]
    assert cols[2][1].startswith(f"{psnr_y(outputs['srcnn (torch)'], hr, 3):.2f} dB")
    assert cols[1][1] != cols[2][1]


def test_default_crops_pick_detail_without_overlap(images):
    _, hr, _ = images
    flat = np.full_like(hr, 128)
    flat[60:80, 10:30] = hr[60:80, 10:30]  # detail only here
    (y, x), _ = sheet.default_crops(flat, 32)
    assert y <= 60 < y + 32 and x <= 10 < x + 32


def test_mismatched_output_is_refused(images):
    lr, hr, _ = images
    with pytest.raises(ValueError, match="'odd'"):
        sheet.render(lr, {"odd": hr[:90]}, hr, scale=3)


def test_compare_sheet_shows_each_passing_backend(tmp_path):
    rows = [{"backend": "torch", "precision": "fp32", "status": "pass", "scale": 3.0},
            {"backend": "ort", "precision": "fp32", "status": "pass", "scale": 3.0},
            {"backend": "trt", "precision": "fp32", "status": "unavailable", "scale": 3.0}]
    path = sheet.compare_sheet(tmp_path, "srcnn-x3", rows, 3.0)
    got = cv2.imread(str(path), cv2.IMREAD_COLOR)
    layout = sheet.Layout(2, 5, 64 * 2)  # LR, bicubic, torch, ort, ground truth; two 64 px crops zoomed x2
    assert path.name == "sheet-srcnn-x3-at-x3.png" and got.shape == (layout.height, layout.width, 3)
    torch_cell, ort_cell = (got[layout.origin(0, c)[0]:layout.origin(0, c)[0] + layout.cell,
                                layout.origin(0, c)[1]:layout.origin(0, c)[1] + layout.cell] for c in (2, 3))
    assert np.abs(torch_cell.astype(int) - ort_cell.astype(int)).max() <= 1  # backends agree to a level
    assert sheet.compare_sheet(tmp_path, "srcnn-x3", rows[2:], 3.0) is None  # nothing passed: no sheet


def test_sr_with_reference_writes_its_sheet_inside_the_output_folder(images, tmp_path):
    from pipeline.cli import main as cli_main

    lr, hr, _ = images
    (tmp_path / "lr").mkdir()
    (tmp_path / "hr").mkdir()
    cv2.imwrite(str(tmp_path / "lr" / "face.png"), cv2.cvtColor(lr, cv2.COLOR_RGB2BGR))
    cv2.imwrite(str(tmp_path / "hr" / "face.png"), cv2.cvtColor(hr, cv2.COLOR_RGB2BGR))
    cv2.imwrite(str(tmp_path / "lr" / "reference-sheet.png"), cv2.cvtColor(lr, cv2.COLOR_RGB2BGR))  # a name clash
    out = tmp_path / "out"
    assert cli_main(["sr", str(tmp_path / "lr"), str(out), "--model", "srcnn", "--scale", "3", "--backend", "ort",
                     "--reference", str(tmp_path / "hr"), "--quiet"]) == 0
    # inside OUTPUT, under a name no output has (an input called reference-sheet.png keeps its output)
    assert sorted(p.name for p in out.iterdir()) == ["face.png", "reference-sheet-2.html", "reference-sheet-2.json",
                                                     "reference-sheet-2.png", "reference-sheet.png"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hr", "lr", "out"]
    got = cv2.imread(str(out / "reference-sheet-2.png"), cv2.IMREAD_COLOR)
    layout = sheet.Layout(2, 4, 48 * 3)  # 96 px output: two 48 px crops, zoomed x3
    assert got.shape == (layout.height, layout.width, 3)
    y0, x0 = layout.origin(0, 3)
    truth = cv2.cvtColor(got[y0:y0 + layout.cell:3, x0:x0 + layout.cell:3], cv2.COLOR_BGR2RGB)
    assert any(np.array_equal(truth, hr[y:y + 48, x:x + 48]) for y in range(0, 49, 24) for x in range(0, 49, 24))
