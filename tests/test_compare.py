"""compare: error math on constructed outputs with known errors, verdicts, and bisect naming a node
broken on purpose in an exported test model."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from pipeline.analysis.compare import REL_FLOOR, compare_inputs, error_stats, verdict
from pipeline.analysis.layer_bisect import bisect_onnx


def test_error_stats_known_errors():
    ref = np.full((1, 3, 10, 10), 0.5, np.float32)
    out = ref.copy()
    out[0, 0, 0, 0] += 0.1          # one big error
    out[0, 1, :, :] += 1e-3         # 100 small ones
    s = error_stats(out, ref)
    assert s["elements"] == 300
    assert s["max_abs"] == pytest.approx(0.1, rel=1e-5)
    assert s["median_abs"] == pytest.approx(0.0, abs=1e-7)   # 199 of 300 are exact
    # 99th percentile of 300 values: 198 zeros, 101 x 1e-3, one 0.1 -> 1e-3
    assert s["p99_abs"] == pytest.approx(1e-3, rel=1e-3)
    assert s["max_rel"] == pytest.approx(0.1 / 0.5, rel=1e-5)
    mse = (0.1**2 + 100 * 1e-6) / 300
    assert s["psnr_db"] == pytest.approx(10 * math.log10(1 / mse), rel=1e-4)


def test_error_stats_pools_lists_and_edge_cases():
    a, b = np.zeros((1, 3, 4, 4)), np.ones((1, 3, 2, 2))
    s = error_stats([a, b], [a, b + 0.5])
    assert s["elements"] == 48 + 12 and s["max_abs"] == pytest.approx(0.5)
    assert error_stats(a, a)["psnr_db"] == math.inf
    # relative error near black uses the floor, not a division by zero
    assert error_stats(np.array([1e-4]), np.array([0.0]))["max_rel"] == pytest.approx(1e-4 / REL_FLOOR)
    bad = error_stats(np.array([np.nan, 0.0]), np.array([0.0, 0.0]))
    assert not bad["finite"] and verdict(bad, "fp32")[0] is False
    with pytest.raises(ValueError, match="shape"):
        error_stats(np.zeros((1, 3, 2, 2)), np.zeros((1, 3, 2, 3)))


def test_verdict_by_precision():
    assert verdict({"max_abs": 5e-5, "psnr_db": 90.0}, "fp32") == (True, "max abs <= 0.0001")
    assert verdict({"max_abs": 2e-4, "psnr_db": 90.0}, "fp32")[0] is False
    assert verdict({"max_abs": 2e-4, "psnr_db": 90.0}, "fp32", tol_fp32=1e-3)[0] is True
    assert verdict({"max_abs": 1e-2, "psnr_db": 55.0}, "fp16")[0] is True
    assert verdict({"max_abs": 1e-2, "psnr_db": 45.0}, "fp16")[0] is False
    assert verdict({"max_abs": 1e-2, "psnr_db": 45.0}, "fp16", psnr_fp16=40)[0] is True
    # bf16/int8: judged by the measured held-out loss against the budget, not by closeness to fp32
    over = {"within_budget": False, "budget_db": 0.1, "psnr_loss_db": 0.22}
    assert verdict({"max_abs": 1e-2, "psnr_db": 55.0}, "int8", loss=over) == (False, "held-out Y-PSNR loss <= 0.1 dB")
    assert verdict({"max_abs": 0.2, "psnr_db": 30.0}, "int8", loss={**over, "within_budget": True})[0] is True
    assert verdict({"max_abs": 1e-2, "psnr_db": 55.0}, "bf16") == (True, "PSNR >= 50 dB")  # nothing measured: torch


def test_compare_inputs_are_real_held_out_crops():
    x = compare_inputs(32)
    assert list(x) and all(v.shape == (1, 3, 32, 32) and v.dtype == np.float32 for v in x.values())
    assert all(v.min() >= 0.0 and v.max() <= 1.0 and v.std() > 0.01 for v in x.values())


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 1)
        self.conv3 = nn.Conv2d(8, 3, 3, padding=1)
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.conv3(self.relu(self.conv2(self.relu(self.conv1(x)))))


def _export(net, x, path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (x,), str(path), input_names=["input"], output_names=["output"], opset_version=17,
                          dynamo=False)
    import onnx

    return onnx.load(str(path))


@pytest.mark.parametrize("broken", [0, 1, 2])
def test_bisect_names_the_broken_node(tmp_path, broken):
    import onnx
    from onnx import numpy_helper

    torch.manual_seed(0)
    net = _Net().eval()
    x = torch.rand(1, 3, 12, 12)
    model = _export(net, x, tmp_path / "net.onnx")
    clean = bisect_onnx(model, net, {"input": x.numpy()})
    assert clean["first_divergent"] is None and len(clean["matches"]) >= 5
    # Break one Conv on purpose: perturb one output channel of its weight.
    conv = [n for n in model.graph.node if n.op_type == "Conv"][broken]
    inits = {i.name: i for i in model.graph.initializer}
    w = numpy_helper.to_array(inits[conv.input[1]]).copy()
    w[0] += 0.25
    inits[conv.input[1]].CopyFrom(numpy_helper.from_array(w, conv.input[1]))
    onnx.save(model, tmp_path / "broken.onnx")
    found = bisect_onnx(tmp_path / "broken.onnx", net, {"input": x.numpy()})
    first = found["first_divergent"]
    assert first is not None and first["node"] == conv.name
    assert first["module"] == f"conv{broken + 1}"
    assert conv.name in found["summary"]
    # every match before it agreed
    idx = [m["node"] for m in found["matches"]].index(conv.name)
    assert all(m["ok"] for m in found["matches"][:idx])
