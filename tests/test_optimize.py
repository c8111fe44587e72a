"""optimize: the bicubic-folded SRCNN is exact against the reference model (borders included)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from models.srcnn import SRCNN
from pipeline.backends.ort_backend import cpu_session_options
from pipeline.export.fold import (
    FoldedSRCNN,
    bicubic_phase_taps,
    export_folded_onnx,
    fold_srcnn,
    srcnn_macs_per_output_pixel,
)


def test_phase_taps_sum_to_one_and_match_half_pixel_bicubic():
    for s in (2, 3, 4):
        taps = bicubic_phase_taps(s)
        for row in taps.values():
            assert sum(row.values()) == pytest.approx(1.0, abs=1e-12)
            assert len(row) <= 4
    assert bicubic_phase_taps(3)[1] == {0: pytest.approx(1.0)}  # centre phase is the LR pixel itself


@pytest.mark.parametrize("scale", [2, 3, 4])
@pytest.mark.parametrize("conv3_on_lr", [True, False])
def test_folded_srcnn_is_exact(scale, conv3_on_lr):
    torch.manual_seed(scale)
    ref = SRCNN(upscale_factor=scale).eval()
    folded = fold_srcnn(ref, scale, conv3_on_lr=conv3_on_lr)
    for shape in [(1, 3, 13, 21), (2, 3, 24, 17)]:  # odd sizes, batch > 1
        x = torch.rand(*shape)
        with torch.inference_mode():
            a, b = ref(x), folded(x)
        assert a.shape == b.shape
        assert float((a - b).abs().max()) < 1e-5


def test_folded_small_input_falls_back_and_bad_scale_rejected():
    ref = SRCNN(upscale_factor=3).eval()
    folded = fold_srcnn(ref, 3)
    x = torch.rand(1, 3, 4, 5)  # smaller than the border strips
    with torch.inference_mode():
        assert float((ref(x) - folded(x)).abs().max()) < 1e-5
    with pytest.raises(ValueError, match="integer scale"):
        FoldedSRCNN(ref, 2.5)


def test_folding_cuts_macs_at_x3():
    ref = SRCNN(upscale_factor=3)
    assert srcnn_macs_per_output_pixel(ref) == 3 * 64 * 81 + 64 * 32 + 32 * 3 * 25
    assert srcnn_macs_per_output_pixel(ref, 3) == 3 * 64 * 49 + 64 * 32 + 32 * 3 * 25


def test_folded_onnx_in_onnxruntime_is_exact(tmp_path):
    import onnxruntime as ort

    torch.manual_seed(0)
    ref = SRCNN(upscale_factor=3).eval()
    p = tmp_path / "folded.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        export_folded_onnx(fold_srcnn(ref, 3), p, 16, 16)
    sess = ort.InferenceSession(str(p), cpu_session_options(1), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).random((1, 3, 19, 26), dtype=np.float32)  # another size: dynamic axes
    y = sess.run(None, {"input": x})[0]
    with torch.inference_mode():
        r = ref(torch.from_numpy(x)).numpy()
    assert y.shape == r.shape and float(np.abs(y - r).max()) < 1e-4


@pytest.mark.parametrize("scale", [2, 3, 4])
def test_the_folded_graph_split_per_phase_is_exact_and_does_fewer_macs(tmp_path, scale):
    """pipeline.export.phases: the folded file's fold1 -> fold2 -> fold3 as one chain per output phase, crops folded
    into one Slice of the image, summed by Adds (the form its int8 file is made from): the same function on odd
    sizes down to the smallest input the folded graph takes, batch > 1; a graph of another shape is left alone."""
    import onnx
    import onnxruntime as ort

    from pipeline.export.phases import split_phases

    torch.manual_seed(scale)
    ref = SRCNN(upscale_factor=scale).eval()
    folded, p = fold_srcnn(ref, scale), tmp_path / "folded.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        export_folded_onnx(folded, p, 16, 16)
    model = onnx.load(str(p))
    assert split_phases(model) and not split_phases(model)  # split once; the split graph is not a folded one
    onnx.checker.check_model(model)
    assert sum(n.name.startswith("/fold") for n in model.graph.node if n.op_type == "Conv") == 3 * scale * scale
    assert "Concat" not in {n.op_type for n in model.graph.node if n.name.startswith("/fold")}
    macs = lambda m: sum(int(np.prod(t.dims)) for t in m.graph.initializer if t.name.startswith("fold")  # noqa: E731
                         and t.name.endswith("weight"))
    assert macs(model) < 0.85 * macs(onnx.load(str(p)))  # cropped: 16 % (x2), 25 % (x3), 40 % (x4)
    run = lambda m, x: ort.InferenceSession(m, providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]  # noqa: E731
    for shape in [(1, 3, folded.min_lr, folded.min_lr + 1), (2, 3, 23, 17)]:
        x = np.random.default_rng(0).random(shape, dtype=np.float32)
        a, b = run(str(p), x), run(model.SerializeToString(), x)
        assert a.shape == b.shape and float(np.abs(a - b).max()) < 1e-5
