"""Property-based checks of libsr_kernels_cpu.so (hypothesis, a test extra: this module skips with the reason where it
is missing, e.g. `pytest -m gpu` on a GPU machine's bare Python)."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("hypothesis", reason="hypothesis is not installed (the `test` extra: pip install -e '.[test]')")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from test_kernels_cpu import assert_close, make_deform_case, torch_resize, tv_ref  # noqa: E402

from pipeline.native import kernels_cpu  # noqa: E402

pytestmark = pytest.mark.usefixtures("cpu_kernels")


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 2), c=st.integers(1, 3), h=st.integers(1, 24), w=st.integers(1, 24),
       ho=st.integers(1, 48), wo=st.integers(1, 48), scale=st.floats(1e-3, 1e3), seed=st.integers(0, 2**31))
def test_property_dynamic_resize(n, c, h, w, ho, wo, scale, seed):
    x = (np.random.default_rng(seed).standard_normal((n, c, h, w)) * scale).astype(np.float32)
    assert_close(kernels_cpu.dynamic_resize(x, (ho, wo)), torch_resize(x, ho, wo))


@st.composite
def deform_configs(draw):
    groups, offset_groups = draw(st.sampled_from([1, 2, 3])), draw(st.sampled_from([1, 2, 4]))
    c = int(np.lcm(groups, offset_groups)) * draw(st.integers(1, 2))
    kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    dh, dw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    ph, pw = draw(st.integers(0, 3)), draw(st.integers(0, 3))
    h = draw(st.integers(max(1, dh * (kh - 1) + 1 - 2 * ph), 14))
    w = draw(st.integers(max(1, dw * (kw - 1) + 1 - 2 * pw), 14))
    return dict(n=draw(st.integers(1, 3)), c=c, h=h, w=w, c_out=groups * draw(st.integers(1, 3)), k=(kh, kw),
                stride=(draw(st.integers(1, 3)), draw(st.integers(1, 3))), pad=(ph, pw), dil=(dh, dw),
                groups=groups, offset_groups=offset_groups, bias=draw(st.booleans()), mask=draw(st.booleans()),
                off_scale=draw(st.sampled_from([0.0, 0.7, 4.0, 100.0])))


@settings(max_examples=60, deadline=None)
@given(cfg=deform_configs(), budget=st.sampled_from([0, 1, 500, 5000, 50000]), seed=st.integers(0, 2**31))
def test_property_deform_conv2d(cfg, budget, seed):
    case, geo = make_deform_case(np.random.default_rng(seed), **cfg)
    out = kernels_cpu.deform_conv2d(**case, **geo, groups=cfg["groups"], offset_groups=cfg["offset_groups"],
                                    column_budget=budget)
    assert_close(out, tv_ref(case, geo))


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 64), c=st.integers(1, 512), k=st.integers(1, 7), ho=st.integers(1, 4096),
       wo=st.integers(1, 4096), elem=st.sampled_from([2, 4]), budget=st.integers(1, 1 << 28))
def test_property_chunk_rule(n, c, k, ho, wo, elem, budget):
    images, rows = kernels_cpu.deform_conv2d_chunk(n, c, k, k, ho, wo, elem, budget)
    row_bytes = c * k * k * wo * elem
    assert 1 <= images <= n and 1 <= rows <= ho
    assert images == 1 or rows == ho  # multi-image chunks hold whole images
    assert images * rows * row_bytes <= max(budget, row_bytes)  # bounded workspace
    if images * ho * row_bytes <= budget:  # never smaller than needed: as many whole images as fit
        assert rows == ho and (images == n or (images + 1) * ho * row_bytes > budget)
    elif images == 1 and rows < ho:
        assert rows == max(1, budget // row_bytes)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 60), c0=st.integers(0, 40), length=st.integers(4, 40), p=st.integers(1, 9),
       q=st.integers(1, 9), seed=st.integers(0, 2**31))
def test_property_dynamic_resize_crop_equals_whole(n, c0, length, p, q, seed):
    """Exact source positions: resizing a crop whose size ratio is the image's gives the whole image's pixels bit
    for bit away from the crop's clamped borders (ATen's float positions differ by an ulp: tiles would not)."""
    h = q * (n + 1)
    c0, c1 = q * min(c0, n), q * min(c0 + length, n + 1)  # crop rows on the q grid: out rows on the p grid
    if c1 - c0 < 6 * q:
        return
    x = np.random.default_rng(seed).standard_normal((1, 2, h, 5)).astype(np.float32)
    whole = kernels_cpu.dynamic_resize(x, (h * p // q, 7))
    crop = kernels_cpu.dynamic_resize(x[:, :, c0:c1], ((c1 - c0) * p // q, 7))
    inner = slice(3 * p, (c1 - c0) * p // q - 3 * p)  # 2 LR pixels of bicubic taps + 1 from the crop's ends
    assert np.array_equal(crop[:, :, inner], whole[:, :, c0 * p // q:c1 * p // q][:, :, inner])
