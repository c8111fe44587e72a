"""demo: the end-to-end run on embedded defaults (shrunk: one image, random weights, no bench)."""
from __future__ import annotations

import json

import cv2
import pytest
import torch

from pipeline.cli import main
from pipeline.errors import PipelineError


@pytest.fixture()
def weights_dir(tmp_path):
    from models.registry import get_spec

    d = tmp_path / "w"
    d.mkdir()
    torch.manual_seed(0)  # same files every run -> cached ONNX exports are reused
    for name in ("srcnn", "srcnn-x3"):
        torch.save(get_spec(name).build().state_dict(), d / f"{name}.pt")
    return d


def test_demo_writes_images_and_report(tmp_path, weights_dir, capsys, monkeypatch):
    import pipeline.cli.sr

    def no_cli(args):
        raise AssertionError("the demo must call the sr stage's API (pipeline.sr.upscale), not its CLI")

    monkeypatch.setattr(pipeline.cli.sr, "run", no_cli)
    out = tmp_path / "outputs"
    rc = main(["demo", "--output", str(out), "--weights-dir", str(weights_dir), "--images", "astronaut",
               "--max-side", "48", "--no-bench"])
    assert rc == 0
    demo = out / "demo"
    lr = cv2.imread(str(demo / "input" / "astronaut.png"))
    hr = cv2.imread(str(demo / "hr" / "astronaut.png"))
    sr = cv2.imread(str(demo / "sr" / "astronaut.png"))
    assert lr.shape == (16, 16, 3) and hr.shape == (48, 48, 3) and sr.shape == hr.shape
    md = (demo / "report.md").read_text()
    assert "# Demo" in md and "astronaut" in md and "PSNR-Y" in md and "Backends vs PyTorch FP32" in md
    # the compare section links its own report, and the page shows the auto reason's command as code (issue 51)
    assert "[compare/report.md](compare/report.md)" in md
    page = (demo / "report.html").read_text()
    assert '<a href="compare/report.html">compare/report.html</a>' in page and "`" not in page
    cmp = json.loads((demo / "compare" / "report.json").read_text())
    assert {m["model"] for m in cmp["models"]} == {"srcnn", "srcnn-x3"}
    assert all(r["status"] == "pass" for m in cmp["models"] for r in m["rows"] if r["status"] in ("pass", "fail"))
    printed = capsys.readouterr().out
    assert str(demo / "report.md") in printed and str(demo / "sr") in printed
    steps = [ln.split(" ")[0] for ln in printed.splitlines() if ln.startswith(("[", "sr: "))]
    assert steps[:3] == ["[1/4]", "sr:", "[2/4]"], printed  # the sr stage's first line with the steps, in order
    # Real-ESRGAN beside it (or one line saying how to fetch it), then compare: it says it started, then what it found
    assert steps[3:] == ["[2/4]", "[3/4]", "[3/4]"], printed
    if "realesr-animevideov3 not shown" not in printed:
        assert "Beside a Real-ESRGAN model (realesr-animevideov3)" in md and "GAN-trained" in md


def test_demo_rejects_training_images(tmp_path):
    with pytest.raises(PipelineError, match="not held-out"):
        from argparse import Namespace

        from pipeline.cli import demo

        demo.run(Namespace(output=str(tmp_path), model="srcnn", backend="auto", images=["camera"], max_side=48,
                           weights_dir=None, no_bench=True, no_compare=True))


@pytest.mark.parametrize("side", ["0", "5"])
def test_demo_max_side_too_small_is_one_line(tmp_path, capsys, side):
    rc = main(["demo", "--output", str(tmp_path), "--max-side", side, "--no-bench", "--no-compare"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: --max-side must be at least 24"), err
    assert not (tmp_path / "demo").exists()
