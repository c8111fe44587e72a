"""Tiles for big nets (issue 66, item 4): the measured overlap and memory model stored beside the weights
(models/weights/tiles.json), the margin and tile size the run takes from them, and the plan line it prints."""
from __future__ import annotations

import struct
import zlib

import cv2

from models import tile_data
from models.lookup import get_spec
from pipeline.cli import main
from pipeline.data.sample_images import load_rgb
from pipeline.images import tiling
from pipeline.sr.runner.worker import first_sizes

X4PLUS = "realesrgan-x4plus"
GB = 1 << 30


def test_stored_data_says_how_where_and_when_each_figure_was_measured():
    data = tile_data._data()
    for name, row in data["overlap"].items():
        assert row["measured"] and row["runs"], name  # the machine and date, and every run the search made
        assert row["exact_lr"] * int(get_spec(name).default_scale) >= get_spec(name).receptive_radius
    for name, rows in data["memory"].items():
        for key, row in rows.items():
            assert row["measured"] and row["bytes_per_input_pixel"] > 0 and len(row["call_peak"]) == 2, (name, key)


def test_compact_keeps_its_exact_margin_and_rrdbnet_takes_the_measured_one_only_where_smaller():
    assert tile_data.overlap_lr("realesr-animevideov3") is None  # exact, verified 100 % identical
    av3 = get_spec("realesr-animevideov3")
    assert tiling.model_margin(av3.receptive_radius, 4.0, None) == tiling.context_margin(av3.receptive_radius, 4.0)
    spec = get_spec(X4PLUS)
    exact = tiling.context_margin(spec.receptive_radius, 4.0)
    assert tiling.model_margin(spec.receptive_radius, 4.0, 20, 4.0) == tiling.measured_margin(20, 4.0, 4.0) < exact
    assert tiling.model_margin(spec.receptive_radius, 4.0, 10_000, 4.0) == exact  # the exact one when cheaper


def test_a_2000x1500_photo_through_x4plus_is_planned_within_the_budget_of_a_24_gb_machine():
    """The plan arithmetic, not a 20-minute run: 20 GB available, the default 1 GiB cap."""
    spec = get_spec(X4PLUS)
    per_input = tile_data.bytes_per_input_pixel(X4PLUS, "torch", "fp32")
    assert per_input is not None
    margin = tiling.model_margin(spec.receptive_radius, 4.0, tile_data.overlap_lr(X4PLUS), 4.0)
    budget = tiling.host_budget(available_bytes=20 * GB)
    assert budget == tiling.TILE_MEMORY
    tile = tiling.measured_tile(4.0, margin, per_input, budget)
    assert tiling.crop_input_pixels(tile, margin, 4.0) * per_input <= budget  # fits ...
    assert tiling.crop_input_pixels(tile + 1, margin, 4.0) * per_input > budget  # ... and is the largest that does
    plan = tiling.plan(1500, 2000, 4.0, tile, margin)
    assert plan.count > 1 and (plan.out_height, plan.out_width) == (6000, 8000)
    context = -(-margin // 4)
    assert all((t.crop_shape[0]) * (t.crop_shape[1]) <= (tile + 2 * context + 1) ** 2 for t in plan.tiles)
    # a machine with less free memory gets smaller tiles from the same model, never a crop over its share
    small = tiling.measured_tile(4.0, margin, per_input, tiling.host_budget(available_bytes=GB))
    assert small < tile and tiling.crop_input_pixels(small, margin, 4.0) * per_input <= GB // 2


def test_an_unmeasured_backend_takes_the_models_largest_measured_cost():
    rows = tile_data._data()["memory"][X4PLUS]
    assert tile_data.bytes_per_input_pixel(X4PLUS, "no-such-backend", "fp32") == max(
        float(r["bytes_per_input_pixel"]) for r in rows.values())
    assert tile_data.bytes_per_input_pixel("srcnn", "ort", "fp32") is None  # ours: the spec's per-output figure


def test_the_first_lines_say_the_tile_plan(tmp_path, capsys):
    src = tmp_path / "in.png"
    cv2.imwrite(str(src), load_rgb("chelsea")[:60, :90])
    assert main(["sr", str(src), str(tmp_path / "out.png"), "--model", "srcnn", "--backend", "torch",
                 "--tile", "32"]) == 0
    lines = capsys.readouterr().err.splitlines()
    plan = next(i for i, ln in enumerate(lines) if ln.startswith("tile plan:"))
    assert lines[0].startswith("sr: srcnn") and plan < next(i for i, ln in enumerate(lines) if ln.startswith("in.png"))
    assert "32 input px tiles" in lines[plan] and "px overlap (exact: the receptive field)" in lines[plan]
    assert "90x60: 6 tiles" in lines[plan] and "MiB (budget" in lines[plan]


def test_the_plan_line_of_an_image_that_fits_says_one_tile(tmp_path, capsys):
    src = tmp_path / "in.png"
    cv2.imwrite(str(src), load_rgb("chelsea")[:20, :24])
    assert main(["sr", str(src), str(tmp_path / "out.png"), "--model", "srcnn", "--backend", "torch"]) == 0
    line = next(ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("tile plan:"))
    assert "24x20: 1 tile" in line and "peak ~" in line


def test_the_plan_line_never_plans_a_hostile_headers_size(tmp_path):
    """A header claiming 10^12 pixels would make the plan line loop over millions of tiles: it is left out (the image
    is refused in its own line when read)."""
    def png(w, h):
        chunk = b"IHDR" + struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
        return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + chunk + struct.pack(">I", zlib.crc32(chunk))

    (tmp_path / "big.png").write_bytes(png(1_000_000, 1_000_000))
    (tmp_path / "ok.png").write_bytes(png(90, 60))
    assert first_sizes([tmp_path / "big.png", tmp_path / "ok.png", tmp_path / "missing.png"]) == [(60, 90)]
