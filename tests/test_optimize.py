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
