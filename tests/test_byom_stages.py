"""Bring your own model through every stage, for three spandrel families (compact SRVGG, RRDB, SwinIR) saved as
checkpoints: export (identity in the ONNX metadata, sr::DynamicResize for other scales), ONNX Runtime vs PyTorch
FP32 <= 1e-4, compare, a tiled folder run equal to the whole-image run at the measured margin, a quick bench."""
from __future__ import annotations

import json

import byom_nets
import cv2
import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from skimage import data

from models.external import resolve
from models.registry import file_sha256, get_spec, size_tensor
from pipeline.cli import main as cli_main
from pipeline.images import tiling

# name -> checkpoint format: both formats are exercised across the three families
FORMATS = {"compact": "pth", "rrdb": "safetensors", "swinir": "pth"}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    d = tmp_path_factory.mktemp("byom")
    return {name: byom_nets.save(name, d, fmt) for name, fmt in FORMATS.items()}


@pytest.fixture(scope="module")
def exported(checkpoints, tmp_path_factory):
    out = tmp_path_factory.mktemp("onnx")
    paths = {}
    for name, ckpt in checkpoints.items():
        paths[name] = out / f"{name}.onnx"
        assert cli_main(["export", "--model", str(ckpt), "--output", str(paths[name])]) == 0
    return paths


@pytest.mark.parametrize("name", list(FORMATS))
def test_export_carries_identity_and_runs_in_ort_like_pytorch(name, checkpoints, exported):
    ckpt, path = checkpoints[name], exported[name]
    proto = onnx.load(str(path))
    meta = {p.key: p.value for p in proto.metadata_props}
    _, scale, arch = byom_nets.NETS[name]
    assert (meta["architecture"], meta["native_scale"]) == (arch, str(scale))
    assert meta["weights_sha256"] == meta["checkpoint_sha256"] == file_sha256(ckpt)
    assert meta["identity"] == f"{arch}-x{scale}-{file_sha256(ckpt)[:16]}"
    assert int(meta["receptive_field"]) > 0
    assert [n.op_type for n in proto.graph.node if n.domain == "sr"] == ["DynamicResize"]
    net = resolve.build_module(str(ckpt))
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for s, shape in ((float(scale), (1, 3, 21, 26)), (1.5, (2, 3, 24, 17))):  # own factor and a smaller one
        x = torch.rand(*shape)  # sides off SwinIR's window grid: the padding is in the graph
        size = size_tensor(shape[2], shape[3], s)
        with torch.no_grad():
            ref = net(x, size).numpy()
        got = session.run(["output"], {"input": x.numpy(), "size": size.numpy()})[0]
        assert got.shape == ref.shape and np.abs(got - ref).max() <= 1e-4


@pytest.mark.parametrize("name", list(FORMATS))
def test_compare_passes_fp32(name, checkpoints, exported, tmp_path, capsys):
    out = tmp_path / "compare"
    code = cli_main(["compare", "--model", str(checkpoints[name]), "--output", str(out), "--precisions", "fp32",
                     "--backends", "ort", "--size", "32"])
    assert code == 0
    rows = [r for m in json.loads((out / "report.json").read_text())["models"] for r in m["rows"]]
    assert rows and all(r["status"] == "pass" for r in rows if r["status"] in ("pass", "fail"))
    assert any(r["status"] == "pass" for r in rows)
    ran = sum(r["status"] in ("pass", "fail", "error") for r in rows)  # said as the demo says it (issue 51)
    assert f"({ran}/{ran} backend runs pass)" in capsys.readouterr().out


def _folder(tmp_path, sizes=((64, 64), (45, 59))):
    src = tmp_path / "in"
    src.mkdir()
    img = data.astronaut()
    for i, (h, w) in enumerate(sizes):
        crop = img[100 + 7 * i:100 + 7 * i + h, 150:150 + w].astype(np.uint16) * 257  # 16-bit: 1.5e-5 steps
        cv2.imwrite(str(src / f"im{i}.png"), cv2.cvtColor(crop, cv2.COLOR_RGB2BGR))
    return src


@pytest.mark.parametrize("name", list(FORMATS))
def test_tiled_folder_run_equals_whole_image_run(name, checkpoints, exported, tmp_path):
    src = _folder(tmp_path)
    ckpt = str(checkpoints[name])
    scale = str(byom_nets.NETS[name][1])
    base = ["sr", str(src), "--model", ckpt, "--scale", scale, "--backend", "ort", "--quiet"]
    assert cli_main(base[:2] + [str(tmp_path / "whole")] + base[2:] + ["--tile", "0"]) == 0
    summary = tmp_path / "tiled.json"
    assert cli_main(base[:2] + [str(tmp_path / "tiled")] + base[2:] + ["--tile", "16", "--summary", str(summary)]) == 0
    spec = get_spec(ckpt)
    run = json.loads(summary.read_text())
    assert run["tile_margin_hr"] == tiling.context_margin(spec.receptive_radius, float(scale))  # the measured field
    assert all(im["tiles"] > 1 for im in run["images"])
    for f in sorted(src.iterdir()):
        whole = cv2.imread(str(tmp_path / "whole" / f.name), cv2.IMREAD_UNCHANGED).astype(np.float64) / 65535
        tiled = cv2.imread(str(tmp_path / "tiled" / f.name), cv2.IMREAD_UNCHANGED).astype(np.float64) / 65535
        assert whole.shape == tiled.shape
        assert np.abs(whole - tiled).max() <= 1e-4 + 1 / 65535


def test_quick_bench_times_a_checkpoint(checkpoints, exported, tmp_path):
    out = tmp_path / "bench"
    ckpt = str(checkpoints["compact"])
    code = cli_main(["bench", "--model", ckpt, "--output", str(out), "--quick", "--sizes", "32", "--batches", "1",
                     "--threads", "1", "--backends", "ort", "--no-folder", "--no-video", "--iters", "3"])
    assert code == 0
    doc = json.loads((out / "report.json").read_text())
    assert ckpt in json.dumps(doc)


def test_factory_with_deform_conv2d_through_export_and_our_kernels(tmp_path, cpu_kernels):
    """A user's nn.Module calling torchvision's deform_conv2d: sr::DeformConv2d + sr::DynamicResize in the file,
    and the same numbers from ONNX Runtime, from ONNX Runtime on our CPU kernels (what TensorRT's plugins run)
    and from PyTorch."""
    out = tmp_path / "deform.onnx"
    assert cli_main(["export", "--model", "byom_nets:deform_factory", "--output", str(out)]) == 0
    proto = onnx.load(str(out))
    assert sorted(n.op_type for n in proto.graph.node if n.domain == "sr") == ["DeformConv2d", "DynamicResize"]
    meta = {p.key: p.value for p in proto.metadata_props}
    assert meta["architecture"] == "factory:TinyDeform" and meta["native_scale"] == "2"
    code = cli_main(["compare", "--model", "byom_nets:deform_factory", "--output", str(tmp_path / "cmp"),
                     "--precisions", "fp32", "--backends", "ort", "ort-sr-kernels", "torch", "--size", "32"])
    rows = [r for m in json.loads((tmp_path / "cmp" / "report.json").read_text())["models"] for r in m["rows"]]
    assert code == 0 and {r["backend"] for r in rows if r["status"] == "pass"} == {"ort", "ort-sr-kernels", "torch"}


@pytest.mark.parametrize("stage", ["export", "sr", "compare"])
def test_bad_checkpoint_is_one_line_and_writes_nothing(stage, tmp_path, capsys):
    bad = tmp_path / "mystery.safetensors"
    byom_nets.save_file({"encoder.0.weight": torch.zeros(4, 3, 3, 3)}, str(bad))
    out = tmp_path / "out"
    argv = {"export": ["export", "--model", str(bad), "--output", str(out / "m.onnx")],
            "sr": ["sr", str(_folder(tmp_path)), str(out), "--model", str(bad)],
            "compare": ["compare", "--model", str(bad), "--output", str(out)]}[stage]
    code = cli_main(argv)
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1
    assert str(bad) in err and "Compact" in err  # names the file and what loads
    assert not out.exists() or not any(out.rglob("*"))  # export makes its output folder first, nothing in it


def test_onnx_of_a_user_model_runs_tiled_without_torch(exported, tmp_path):
    """The exported file carries what tiling needs (receptive radius, window grid): a process that cannot import
    torch runs it tiled, equal to the whole-image run."""
    import subprocess
    import sys
    from pathlib import Path

    src = _folder(tmp_path, sizes=((64, 64),))
    onnx_file = str(exported["swinir"])
    assert cli_main(["sr", str(src), str(tmp_path / "whole"), "--onnx", onnx_file, "--backend", "ort", "--tile", "0",
                     "--quiet"]) == 0
    blocker = ("import runpy, sys\nfor m in ('torch', 'torchvision', 'onnxscript'): sys.modules[m] = None\n"
               "sys.argv = ['pipeline', *sys.argv[1:]]\nrunpy.run_module('pipeline', run_name='__main__')\n")
    proc = subprocess.run([sys.executable, "-c", blocker, "sr", str(src), str(tmp_path / "tiled"), "--onnx", onnx_file,
                           "--backend", "ort", "--tile", "16", "--summary", str(tmp_path / "s.json"), "--quiet"],
                          cwd=Path(__file__).resolve().parent.parent, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads((tmp_path / "s.json").read_text())["images"][0]["tiles"] > 1
    whole = cv2.imread(str(tmp_path / "whole" / "im0.png"), cv2.IMREAD_UNCHANGED).astype(np.float64) / 65535
    tiled = cv2.imread(str(tmp_path / "tiled" / "im0.png"), cv2.IMREAD_UNCHANGED).astype(np.float64) / 65535
    assert np.abs(whole - tiled).max() <= 1e-4 + 1 / 65535


def test_first_line_of_a_user_models_onnx_says_it_runs_at_its_own_factor_then_resizes(exported, tmp_path, capsys):
    """From the ONNX file's metadata alone (issue 23: the line lacked it with --onnx)."""
    src = _folder(tmp_path, sizes=((24, 24),))
    capsys.readouterr()
    code = cli_main(["sr", str(src), str(tmp_path / "o"), "--onnx", str(exported["compact"]), "--backend", "ort",
                     "--scale", "3", "--quiet"])
    err = capsys.readouterr().err
    first = err.splitlines()[0]
    assert code == 0 and " x3 (Compact runs at x4, then resizes to x3) on ort (requested); 1 image -> " in first
    assert "bicubic" not in err  # trained on its own degradation: our held-out protocol says nothing of its gain
