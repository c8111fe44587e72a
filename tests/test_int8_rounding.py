"""The int8 weights' width (from the CPU's flags, in one place) and their error-compensated rounding."""
from __future__ import annotations

import numpy as np
import pytest

from pipeline.export import quantize
from pipeline.export.rounding import patch_covariance, round_weights
from pipeline.native import cpu


@pytest.mark.parametrize(("flags", "bits"), [({"avx2", "fma"}, 7), ({"avx512f", "avx512bw"}, 7),
                                             ({"avx512f", "avx512_vnni"}, 8), ({"avx2", "avx_vnni"}, 8),
                                             ({"amx_int8", "amx_bf16", "avx512_vnni"}, 8)])
def test_the_weight_width_follows_vnni(flags, bits, monkeypatch, tmp_path):
    """Without VNNI two u8 x s8 products meet in a saturating int16 (255 x 127 x 2 > 32767): 7 bits there, and the
    int8 file is cached per width, so a cache shared by two kinds of CPU never hands one the other's file."""
    monkeypatch.setattr(cpu, "_cpu_flags", lambda: frozenset(flags))
    monkeypatch.setenv("SRDEPLOY_CACHE", str(tmp_path))
    monkeypatch.delenv(cpu.VNNI_ENV, raising=False)
    assert cpu.int8_weight_bits() == bits
    assert 255 * 2 ** 6 * 2 <= 32767 < 255 * 127 * 2  # 7 bits ([-64, 63]) cannot saturate, 8 can
    fp32 = tmp_path / "m.onnx"
    fp32.write_bytes(b"model")
    path, recipe = quantize.int8_path(fp32), quantize.recipe_id()
    monkeypatch.setenv(cpu.VNNI_ENV, "0")  # acts as a CPU without VNNI
    assert cpu.int8_weight_bits() == 7
    assert (quantize.int8_path(fp32) == path) == (bits == 7)
    assert (quantize.recipe_id() == recipe) == (bits == 7)


@pytest.mark.parametrize("bits", [7, 8])
def test_error_compensated_rounding_moves_the_output_less_than_rounding_to_nearest(bits):
    """On smooth (correlated) inputs, as images and feature maps are, GPTQ's rule leaves a smaller output error
    than each weight rounded to nearest, with the same per-channel steps and within the width's range."""
    rng = np.random.default_rng(0)
    smooth = [np.cumsum(np.cumsum(rng.random((1, 3, 40, 40)), axis=2), axis=3) / 400 for _ in range(4)]
    h = patch_covariance(smooth, 3, 3)
    w = rng.normal(size=(8, 3, 3, 3))
    q, step = round_weights(w, h, bits)
    top = 2 ** (bits - 1) - 1
    nearest = np.clip(np.rint(w / step[:, None, None, None]), -top - 1, top)
    assert q.dtype == np.int8 and -top - 1 <= q.min() and q.max() <= top
    assert np.allclose(step, np.abs(w).reshape(8, -1).max(axis=1) / top)

    def output_error(levels):
        d = (levels * step[:, None, None, None] - w).reshape(8, -1)
        return np.einsum("oi,ij,oj->", d, h, d)

    assert output_error(q) < 0.5 * output_error(nearest)
