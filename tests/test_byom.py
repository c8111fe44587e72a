"""Bring your own model, the core: checkpoints of three spandrel families and user factories resolve to a spec and
a module equal to the net itself; bad files are one line naming the file; the receptive field is measured;
any scale runs the net at its own factor then sr::DynamicResize; user deform_conv2d exports as sr::DeformConv2d."""
from __future__ import annotations

import pickle
from pathlib import Path

import byom_nets
import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F

from models import external
from models.external.modules import AnyScale
from models.ops import bicubic_exact
from models.registry import WeightsError, file_sha256
from pipeline.cli import main as cli_main
from pipeline.export import graph

ARCHS = list(byom_nets.NETS)


@pytest.fixture(scope="module")
def ckpt_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("ckpt")
    for name in ARCHS:
        byom_nets.save(name, d, "pth", wrap="params_ema")  # BasicSR's layout
        byom_nets.save(name, d, "safetensors")
    return d


@pytest.mark.parametrize("fmt", ["pth", "safetensors"])
@pytest.mark.parametrize("name", ARCHS)
def test_checkpoint_resolves_to_the_net_itself(ckpt_dir, name, fmt):
    path = ckpt_dir / f"{name}.{fmt}"
    ext = external.load(path, measure=False)
    _, scale, arch = byom_nets.NETS[name]
    s = ext.spec
    assert (s.architecture, s.scale, s.input_channels, s.output_channels) == (arch, scale, 3, 3)
    assert s.sha256 == file_sha256(path) and s.source == str(path.resolve())
    x = torch.rand(1, 3, 20, 24)  # multiple of SwinIR's window: the net alone needs no padding
    with torch.no_grad():
        assert torch.equal(ext.module(x), byom_nets.build(name)(x))


def test_window_net_takes_any_size_by_padding(ckpt_dir):
    ext = external.load(ckpt_dir / "swinir.pth", measure=False)
    assert ext.spec.align == 4 and not ext.spec.describe()["any_size"]
    x = torch.rand(1, 3, 19, 23)
    with torch.no_grad():
        y = ext.module(x)
        # SwinIR pads internally the same way (reflect to the window): identical to the bare net
        assert y.shape == (1, 3, 38, 46) and torch.allclose(y, byom_nets.build("swinir")(x), atol=1e-6)


def _cli(argv, capsys):
    code = cli_main(argv)
    return code, capsys.readouterr()


def test_unknown_architecture_is_one_line_listing_what_loads(tmp_path, capsys):
    path = tmp_path / "mystery.pth"
    torch.save({"encoder.0.weight": torch.zeros(4, 3, 3, 3)}, path)
    code, out = _cli(["models", "--model", str(path)], capsys)
    assert code == 2 and out.err.count("\n") == 1
    assert str(path) in out.err and "Compact" in out.err and "SwinIR" in out.err


@pytest.mark.parametrize("fmt", ["pth", "safetensors"])
def test_truncated_checkpoint_is_one_line_naming_it(ckpt_dir, tmp_path, fmt, capsys):
    data = (ckpt_dir / f"rrdb.{fmt}").read_bytes()
    path = tmp_path / f"cut.{fmt}"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(WeightsError, match=str(path)):
        external.load(path)
    code, out = _cli(["models", "--model", str(path)], capsys)
    assert code == 2 and out.err.startswith("error: ") and out.err.count("\n") == 1 and str(path) in out.err


class _WritesAFile:
    """Unpickling this calls open(target, 'w'): a checkpoint that would run code."""

    def __init__(self, target):
        self.target = str(target)

    def __reduce__(self):
        return (open, (self.target, "w"))


def test_pickle_that_would_run_code_is_refused_and_runs_nothing(tmp_path, capsys):
    target = tmp_path / "pwned.txt"
    path = tmp_path / "evil.pth"
    with open(path, "wb") as f:
        pickle.dump({"body.0.weight": _WritesAFile(target)}, f)
    torch.save({"body.0.weight": _WritesAFile(target)}, tmp_path / "evil2.ckpt")
    for p in (path, tmp_path / "evil2.ckpt"):
        code, out = _cli(["models", "--model", str(p)], capsys)
        assert code == 2 and "refusing" in out.err and str(p) in out.err and out.err.count("\n") == 1
    assert not target.exists()
    # control: the same pickle does write the file when unpickled without weights_only
    with open(path, "rb") as f:
        pickle.load(f).clear()
    assert target.exists()


def test_models_command_lists_ours_and_spandrel_architectures(capsys):
    code, out = _cli(["models"], capsys)
    assert code == 0
    assert all(n in out.out for n in ("srcnn", "srcnn-x3", "deform-srcnn", "Compact", "ESRGAN", "SwinIR"))


def test_models_command_describes_a_checkpoint(ckpt_dir, capsys):
    code, out = _cli(["models", "--model", str(ckpt_dir / "compact.safetensors")], capsys)
    assert code == 0 and "Compact x4" in out.out and "receptive field 4 px" in out.out


@pytest.mark.parametrize("name", ARCHS)
def test_measured_receptive_field_is_the_margin_tiles_need(ckpt_dir, name):
    """A crop with `rf` LR pixels of context on each side reproduces the whole image's output on its
    interior exactly; one pixel less does not: the measurement is tight. (float64, so that exact means 1e-12:
    in float32 convs of different sizes differ by ~1e-7, more than RRDB's farthest reach moves a pixel.)"""
    ext = external.load(ckpt_dir / f"{name}.pth")
    rf, s, a = ext.spec.receptive_field, ext.spec.scale, ext.spec.align
    assert rf is not None and rf > 0
    torch.manual_seed(3)
    x = torch.rand(1, 3, 64, 64, dtype=torch.float64)
    net = ext.module.double()
    with torch.no_grad():
        whole = net(x)

        def interior_error(margin):
            k0, k1 = 24, 40  # kept LR rows/cols, aligned to the window
            c0, c1 = k0 - margin, k1 + margin
            c0 -= c0 % a  # crops start on the window grid
            crop = net(x[..., c0:c1, c0:c1])
            got = crop[..., (k0 - c0) * s:(k1 - c0) * s, (k0 - c0) * s:(k1 - c0) * s]
            return float((got - whole[..., k0 * s:k1 * s, k0 * s:k1 * s]).abs().max())

        exact, short = interior_error(rf), interior_error(rf - 1)
        assert exact <= 1e-12
        if name == "compact":  # RRDB's farthest reach moves a pixel by ~1e-16, SwinIR's crop start snaps down
            assert short > 1e-12


def test_receptive_field_of_known_net_and_factory_contract():
    ext = external.load("byom_nets:two_convs_factory")
    assert ext.spec.receptive_field == 4 and ext.spec.scale == 2  # two 5x5 convs: 2 + 2
    assert ext.spec.architecture == "factory:TwoConvs" and len(ext.spec.sha256) == 64
    with pytest.raises(WeightsError, match="byom_nets:undeclared_scale_factory.*scale"):
        external.load("byom_nets:undeclared_scale_factory")
    with pytest.raises(WeightsError, match="no_such_module_xyz:f"):
        external.load("no_such_module_xyz:f")


USER_FACTORY = """
import torch

class Net(torch.nn.Module):
    scale = 2

    def __init__(self, seed):
        super().__init__()
        torch.manual_seed(seed)
        self.conv = torch.nn.Conv2d(3, 12, 3, padding=1)

    def forward(self, x):
        return torch.nn.functional.pixel_shuffle(self.conv(x), 2)

def factory():  # COMMENT
    return Net(0).eval()

def same_weights():
    return Net(0).eval()

def other_weights():
    return Net(1).eval()
"""


def test_factory_weights_sha256_identifies_the_weights(tmp_path, monkeypatch):
    """A factory's weights hash is its name plus its state-dict tensors: not the hash of its Python source (which
    neither follows the weights it loads nor stays put when a comment changes), stable across processes."""
    import os
    import subprocess
    import sys

    from models.external import resolve
    from pipeline.artifacts.cache import cached_onnx, weights_sha256

    src = tmp_path / "user_factory_mod.py"
    src.write_text(USER_FACTORY)
    monkeypatch.syspath_prepend(str(tmp_path))

    def fresh(ref):
        sys.modules.pop("user_factory_mod", None)
        resolve._load.cache_clear()
        return weights_sha256(ref)

    sha = fresh("user_factory_mod:factory")
    assert sha != file_sha256(src) and len(sha) == 64
    assert f"-w{sha[:16]}-" in cached_onnx("user_factory_mod:factory").name  # the cache key carries it
    assert fresh("user_factory_mod:other_weights") != sha  # other weights
    assert fresh("user_factory_mod:same_weights") != sha  # same tensors, another factory: the name is part of it
    src.write_text(USER_FACTORY.replace("# COMMENT", "# the source changed, the weights did not"))
    assert fresh("user_factory_mod:factory") == sha
    code = "from pipeline.artifacts.cache import weights_sha256; print(weights_sha256('user_factory_mod:factory'))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(Path(__file__).resolve().parents[1])])}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.stdout.strip() == sha, out.stderr[-2000:]  # the same in another process


def _export(module, args, names, exporter):
    from pipeline.export import dynamo, torchscript

    backend = dynamo if exporter == "dynamo" else torchscript
    proto = backend.export(module, args, names, ops="custom", opset=20)
    return graph.finish(graph.normalise_io(proto, names[1] if len(names) > 1 else None))


def _ort(proto, feed):
    return ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)[0]


@pytest.mark.parametrize("exporter", ["dynamo", "torchscript"])
def test_fixed_x4_net_at_x3_runs_x4_then_sr_dynamic_resize(ckpt_dir, exporter):
    ext = external.load(ckpt_dir / "compact.pth", measure=False)
    net3 = ext.module_for(3)
    assert ext.module_for(4) is ext.module and isinstance(net3, AnyScale)
    x = torch.rand(1, 3, 17, 22)
    size = torch.tensor([51, 66])
    with torch.no_grad():
        native = ext.module(x)
        assert torch.equal(net3(x, size), bicubic_exact(native, 51, 66))  # sr::DynamicResize's eager form
        # ... which is F.interpolate's bicubic up to ATen's float source positions
        want = F.interpolate(native, size=(51, 66), mode="bicubic", align_corners=False)
        assert torch.allclose(net3(x, size), want, atol=1e-5)
        proto = _export(net3, (torch.rand(2, 3, 16, 20), torch.tensor([48, 60])), ["input", "size"], exporter)
        assert [n.op_type for n in proto.graph.node if n.domain == "sr"] == ["DynamicResize"]
        for shape, out in (((1, 3, 17, 22), (51, 66)), ((1, 3, 24, 20), (60, 50))):  # x3 and x2.5, one graph
            x = torch.rand(*shape)
            got = _ort(proto, {"input": x.numpy(), "size": np.array(out, dtype=np.int64)})
            ref = net3(x, torch.tensor(out)).numpy()
            assert got.shape == ref.shape and np.abs(got - ref).max() <= 1e-4


@pytest.mark.parametrize("exporter", ["dynamo", "torchscript"])
def test_user_deform_conv2d_exports_as_sr_deform_conv2d(exporter):
    ext = external.load("byom_nets:deform_factory", measure=False)
    proto = _export(ext.module, (torch.rand(2, 3, 16, 20),), ["input"], exporter)
    assert [n.op_type for n in proto.graph.node if n.domain == "sr"] == ["DeformConv2d"]
    assert not any(n.op_type == "DeformConv" for n in proto.graph.node)  # only inside the function body
    onnx.checker.check_model(proto, full_check=True)
    x = torch.rand(1, 3, 13, 18)
    with torch.no_grad():
        ref = ext.module(x).numpy()
    assert np.abs(_ort(proto, {"input": x.numpy()}) - ref).max() <= 1e-4
