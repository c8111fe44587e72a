"""libsr_kernels_cpu.so (via pipeline.native.kernels_cpu) against torch F.interpolate bicubic and torchvision
deform_conv2d."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from skimage import data as skdata

from pipeline.errors import PipelineError
from pipeline.native import kernels_cpu
from pipeline.native import libraries as native

tv_deform_conv2d = pytest.importorskip("torchvision.ops", reason="torchvision: the reference").deform_conv2d

torch.set_num_threads(1)


pytestmark = pytest.mark.usefixtures("cpu_kernels")


def assert_close(out: np.ndarray, ref: np.ndarray, rel: float = 1e-5) -> float:
    """|out - ref| <= rel * max(1, max|ref|) elementwise; returns the max abs error."""
    assert out.shape == ref.shape
    err = float(np.abs(out - ref).max()) if out.size else 0.0
    tol = rel * max(1.0, float(np.abs(ref).max()) if ref.size else 1.0)
    assert err <= tol, f"max abs error {err:.3g} > {tol:.3g}"
    return err


def torch_resize(x: np.ndarray, h: int, w: int) -> np.ndarray:
    return F.interpolate(torch.from_numpy(x), size=(h, w), mode="bicubic", align_corners=False).numpy()


# ---------------------------------------------------------------------------------------------------------- resize
RESIZE_CASES = [
    (5, 7, 15, 21),    # x3
    (8, 8, 16, 16),    # x2
    (7, 9, 17, 23),    # non-integer up
    (16, 16, 5, 7),    # down, non-integer
    (33, 20, 11, 10),  # down, odd
    (10, 13, 23, 5),   # up one axis, down the other
    (1, 1, 3, 4),      # 1-pixel image
    (1, 5, 4, 9),      # 1-pixel edge
    (6, 1, 2, 3),
    (20, 20, 1, 1),    # extreme down
    (9, 11, 9, 11),    # identity
    (3, 4, 64, 70),    # large factor: src far outside the centre grid at the borders
]


@pytest.mark.parametrize("h,w,ho,wo", RESIZE_CASES)
def test_dynamic_resize_matches_torch(h, w, ho, wo):
    x = np.random.default_rng(h * 100 + w).standard_normal((2, 3, h, w)).astype(np.float32)
    assert_close(kernels_cpu.dynamic_resize(x, (ho, wo)), torch_resize(x, ho, wo))


def test_dynamic_resize_random_sweep():
    # Seeded property sweep: any sizes 1..40 in and out, any batch/channels.
    rng = np.random.default_rng(7)
    for _ in range(60):
        n, c = rng.integers(1, 3), rng.integers(1, 4)
        h, w, ho, wo = (int(v) for v in rng.integers(1, 41, size=4))
        x = (rng.standard_normal((n, c, h, w)) * rng.uniform(0.1, 100)).astype(np.float32)
        assert_close(kernels_cpu.dynamic_resize(x, np.array([ho, wo], np.int64)), torch_resize(x, ho, wo))


@pytest.mark.parametrize("name,scale", [("astronaut", 3.0), ("camera", 0.37), ("coffee", 2.5)])
def test_dynamic_resize_real_images(name, scale):
    img = getattr(skdata, name)()
    img = img[..., None] if img.ndim == 2 else img
    x = np.ascontiguousarray(img[:96, :128].transpose(2, 0, 1)[None], dtype=np.float32) / 255.0
    ho, wo = int(96 * scale + 0.5), int(128 * scale + 0.5)
    out = kernels_cpu.dynamic_resize(torch.from_numpy(x), torch.tensor([ho, wo]))
    assert_close(out, torch_resize(x, ho, wo))


def test_dynamic_resize_emulated_fp16():
    x = np.random.default_rng(1).random((1, 3, 13, 17), dtype=np.float32) * 4 - 2
    out = kernels_cpu.dynamic_resize(x, (29, 40), emulate_fp16=True)
    assert np.array_equal(out, out.astype(np.float16).astype(np.float32)), "outputs must be FP16 values"
    ref = torch_resize(x.astype(np.float16).astype(np.float32), 29, 40)
    # Same math on FP16-rounded inputs; only the output rounding (<= 1 FP16 ulp) may differ.
    assert np.all(np.abs(out - ref) <= np.abs(ref) * 2.0**-10 + 2.0**-24 + 1e-6)
    # torch's own half bicubic (CPU) agrees within FP16 resolution
    ref_half = F.interpolate(torch.from_numpy(x).half(), size=(29, 40), mode="bicubic", align_corners=False)
    assert np.abs(out - ref_half.float().numpy()).max() <= 4e-3


def test_round_to_half_matches_numpy():
    rng = np.random.default_rng(3)
    vals = np.concatenate([
        rng.standard_normal(20000).astype(np.float32) * np.float32(10) ** rng.integers(-9, 6, 20000).astype(np.float32),
        np.array([0.0, -0.0, 65504, 65519.99, 65520, -70000, 2.0**-24, 2.0**-25, 2.0**-25 * 1.0001, 2.0**-14,
                  1 + 2.0**-11, 1 + 3 * 2.0**-11, np.inf, -np.inf], np.float32)])
    ours = kernels_cpu.round_to_half(vals)
    with np.errstate(over="ignore"):
        ref = vals.astype(np.float16).astype(np.float32)
    assert np.array_equal(ours, ref)


def test_dynamic_resize_rejects_bad_input():
    with pytest.raises(PipelineError, match="4-D"):
        kernels_cpu.dynamic_resize(np.zeros((3, 4, 4), np.float32), (8, 8))
    with pytest.raises(PipelineError, match="size"):
        kernels_cpu.dynamic_resize(np.zeros((1, 1, 4, 4), np.float32), (8,))
    with pytest.raises(PipelineError, match="positive"):
        kernels_cpu.dynamic_resize(np.zeros((1, 1, 4, 4), np.float32), (0, 8))
    with pytest.raises(PipelineError, match="floating"):
        kernels_cpu.dynamic_resize(np.zeros((1, 1, 4, 4), np.int32), (8, 8))


# ---------------------------------------------------------------------------------------------------- deform conv
def make_deform_case(rng, n, c, h, w, c_out, k, stride, pad, dil, groups, offset_groups, bias, mask, off_scale=2.0):
    kh, kw = (k, k) if isinstance(k, int) else k
    sh, sw = (stride, stride) if isinstance(stride, int) else stride
    ph, pw = (pad, pad) if isinstance(pad, int) else pad
    dh, dw = (dil, dil) if isinstance(dil, int) else dil
    ho = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    wo = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    t = lambda *s: torch.from_numpy(rng.standard_normal(s).astype(np.float32))  # noqa: E731
    case = dict(input=t(n, c, h, w), weight=t(c_out, c // groups, kh, kw) * 0.3,
                offset=t(n, 2 * offset_groups * kh * kw, ho, wo) * off_scale,
                bias=t(c_out) if bias else None,
                mask=(torch.from_numpy(rng.random((n, offset_groups * kh * kw, ho, wo), dtype=np.float32))
                      if mask else None))
    return case, dict(stride=(sh, sw), padding=(ph, pw), dilation=(dh, dw))


def tv_ref(case, geo):
    return tv_deform_conv2d(case["input"], case["offset"], case["weight"], case["bias"], mask=case["mask"],
                            **geo).numpy()


DEFORM_CASES = [
    # n, c, h, w, c_out, k, stride, pad, dil, groups, offset_groups, bias, mask
    (2, 4, 9, 11, 6, 3, 1, 1, 1, 1, 1, True, True),
    (1, 4, 9, 11, 6, 3, 1, 1, 1, 1, 1, False, False),
    (3, 6, 8, 7, 4, 3, 2, 0, 1, 2, 3, False, True),
    (1, 4, 12, 10, 8, (2, 3), 1, 2, 2, 4, 2, True, False),
    (2, 8, 10, 10, 4, 3, (2, 1), (0, 2), (1, 3), 1, 4, True, True),
    (2, 2, 1, 1, 3, 1, 1, 0, 1, 1, 1, True, True),      # 1x1 image, 1x1 kernel
    (1, 3, 1, 1, 2, 3, 1, 1, 1, 1, 1, True, True),      # 1x1 image, 3x3 kernel (all taps but centre padded)
    (1, 6, 7, 5, 6, 3, 3, 3, 2, 6, 2, False, True),     # depthwise, stride 3
    (2, 4, 6, 6, 4, 5, 1, 2, 1, 2, 4, True, False),
]


@pytest.mark.parametrize("cfg", DEFORM_CASES)
def test_deform_conv2d_matches_torchvision(cfg):
    *shape, bias, mask = cfg
    rng = np.random.default_rng(sum(hash(str(v)) % 1000 for v in cfg))
    case, geo = make_deform_case(rng, *shape, bias, mask)
    out = kernels_cpu.deform_conv2d(**case, **geo, groups=shape[9], offset_groups=shape[10])
    assert_close(out, tv_ref(case, geo))


@pytest.mark.parametrize("off_scale", [0.0, 1.0, 25.0, 1e4])
def test_deform_conv2d_offsets_inside_and_far_outside(off_scale):
    rng = np.random.default_rng(11)
    case, geo = make_deform_case(rng, 2, 4, 8, 9, 5, 3, 1, 1, 1, 1, 2, True, True, off_scale=off_scale)
    out = kernels_cpu.deform_conv2d(**case, **geo)
    assert_close(out, tv_ref(case, geo))
    if off_scale >= 1e4:  # every sample out of the image: output is the bias
        assert np.allclose(out, case["bias"].numpy()[None, :, None, None], atol=1e-6)


def test_deform_conv2d_sampling_on_the_border_rule():
    # Offsets that put samples exactly on -1, H-1, H and between: torchvision's (y <= -1 or y >= H) -> 0 rule.
    rng = np.random.default_rng(5)
    case, geo = make_deform_case(rng, 1, 2, 5, 6, 3, 3, 1, 1, 1, 1, 1, True, True)
    grid = np.array([-2.0, -1.0, -0.999, -0.5, 0.0, 3.5, 4.0, 4.999, 5.0, 6.0, 0.25], np.float32)
    off = rng.choice(grid, size=case["offset"].shape).astype(np.float32)
    case["offset"] = torch.from_numpy(off)
    assert_close(kernels_cpu.deform_conv2d(**case, **geo), tv_ref(case, geo))


def test_deform_conv2d_random_sweep():
    # Seeded property sweep over shapes and attributes.
    rng = np.random.default_rng(2024)
    for _ in range(40):
        groups, offset_groups = int(rng.choice([1, 2])), int(rng.choice([1, 2]))
        c = int(np.lcm(groups, offset_groups) * rng.integers(1, 3))
        k = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
        dil, stride = int(rng.integers(1, 3)), (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
        pad = int(rng.integers(0, 3))
        h = int(rng.integers(max(1, dil * (k[0] - 1) + 1 - 2 * pad), 12))
        w = int(rng.integers(max(1, dil * (k[1] - 1) + 1 - 2 * pad), 12))
        case, geo = make_deform_case(rng, int(rng.integers(1, 3)), c, h, w, groups * int(rng.integers(1, 3)), k, stride,
                                     pad, dil, groups, offset_groups, bool(rng.integers(2)), bool(rng.integers(2)),
                                     off_scale=float(rng.choice([0.5, 3.0, 20.0])))
        budget = int(rng.choice([0, 64, 4096]))  # also exercises row bands / multi-image chunks
        assert_close(kernels_cpu.deform_conv2d(**case, **geo, column_budget=budget), tv_ref(case, geo))


@pytest.mark.parametrize("budget,expect", [(0, None), (1, "rows"), (3000, "rows"), (40_000, "images")])
def test_deform_conv2d_chunking(budget, expect):
    rng = np.random.default_rng(9)
    n, c, h, w, k = 5, 4, 10, 12, 3
    case, geo = make_deform_case(rng, n, c, h, w, 6, k, 1, 1, 1, 2, 2, True, True)
    images, rows = kernels_cpu.deform_conv2d_chunk(n, c, k, k, h, w, 4, budget)
    row_bytes = c * k * k * w * 4
    if expect == "rows":
        assert images == 1 and rows == max(1, budget // row_bytes) and rows < h
    elif expect == "images":
        assert rows == h and images == min(n, budget // (row_bytes * h)) and 1 < images < n  # batch > chunk
    else:
        assert (images, rows) == (n, h)
    assert_close(kernels_cpu.deform_conv2d(**case, **geo, column_budget=budget), tv_ref(case, geo))


def test_deform_conv2d_default_chunk_bounds_workspace():
    # deform-srcnn's layer on a 1080p-ish output: columns must stay within the 64 MiB budget (row bands).
    images, rows = kernels_cpu.deform_conv2d_chunk(1, 64, 3, 3, 1080, 1920, 2)
    assert images == 1 and 0 < rows < 1080 and rows * 64 * 9 * 1920 * 2 <= 64 << 20


@pytest.mark.parametrize("name", ["camera", "chelsea"])
def test_deform_conv2d_real_image(name):
    img = getattr(skdata, name)()
    img = img[..., None] if img.ndim == 2 else img
    x = torch.from_numpy(np.ascontiguousarray(img[100:140, 150:198].transpose(2, 0, 1)[None], dtype=np.float32) / 255)
    rng = np.random.default_rng(0)
    c = x.shape[1]
    weight = torch.from_numpy(rng.standard_normal((4, c, 3, 3)).astype(np.float32))
    offset = torch.from_numpy(rng.standard_normal((1, 18, 40, 48)).astype(np.float32) * 1.5)
    mask = torch.sigmoid(torch.from_numpy(rng.standard_normal((1, 9, 40, 48)).astype(np.float32)))
    bias = torch.zeros(4)
    out = kernels_cpu.deform_conv2d(x, weight, offset, bias, mask, padding=1)
    assert_close(out, tv_deform_conv2d(x, offset, weight, bias, padding=1, mask=mask).numpy())


def test_deform_conv2d_emulated_fp16():
    rng = np.random.default_rng(4)
    case, geo = make_deform_case(rng, 2, 8, 9, 9, 6, 3, 1, 1, 1, 2, 2, True, True)
    out = kernels_cpu.deform_conv2d(**case, **geo, emulate_fp16=True)
    assert np.array_equal(out, out.astype(np.float16).astype(np.float32)), "outputs must be FP16 values"
    rounded = {k: (None if v is None else v.half().float()) for k, v in case.items()}
    ref = tv_ref(rounded, geo)
    # Columns and output rounded to FP16, accumulation in FP32: error ~ sqrt(K) * ulp of the terms.
    err = np.abs(out - ref).max()
    assert err <= 2e-3 * max(1.0, np.abs(ref).max()), err
    assert err > 0  # the rounding really happens
    exact = kernels_cpu.deform_conv2d(**case, **geo)
    assert np.abs(out - exact).max() < 2e-2 * max(1.0, np.abs(exact).max())


def test_deform_conv2d_rejects_bad_shapes():
    rng = np.random.default_rng(0)
    case, geo = make_deform_case(rng, 1, 4, 6, 6, 4, 3, 1, 1, 1, 1, 1, True, True)
    with pytest.raises(PipelineError, match="offset shape"):
        kernels_cpu.deform_conv2d(**{**case, "offset": case["offset"][:, :, :-1]}, **geo)
    with pytest.raises(PipelineError, match="mask shape"):
        kernels_cpu.deform_conv2d(**{**case, "mask": case["mask"][:, :4]}, **geo)
    with pytest.raises(PipelineError, match="bias"):
        kernels_cpu.deform_conv2d(**{**case, "bias": torch.zeros(3)}, **geo)
    with pytest.raises(PipelineError, match="groups=3"):
        kernels_cpu.deform_conv2d(**case, **geo, groups=3)
    with pytest.raises(PipelineError, match="offset_groups"):
        kernels_cpu.deform_conv2d(**case, **geo, offset_groups=2)
    with pytest.raises(PipelineError, match="empty"):
        kernels_cpu.deform_conv2d(**{**case, "weight": torch.zeros(4, 4, 9, 9)}, **geo)


def test_batch_zero_is_empty():
    out = kernels_cpu.deform_conv2d(np.zeros((0, 2, 4, 4), np.float32), np.zeros((3, 2, 1, 1), np.float32),
                                    np.zeros((0, 2, 4, 4), np.float32))
    assert out.shape == (0, 3, 4, 4)
    assert kernels_cpu.dynamic_resize(np.zeros((0, 3, 4, 4), np.float32), (8, 8)).shape == (0, 3, 8, 8)


# ------------------------------------------------------------------------------------------------------- locator
def test_locator_env_override_and_missing(tmp_path, monkeypatch):
    lib = native.cpu_kernels_library()
    monkeypatch.setenv("SR_KERNELS_CPU_LIB", str(lib))
    assert native.cpu_kernels_library() == lib.resolve()
    monkeypatch.setenv("SR_KERNELS_CPU_LIB", str(tmp_path / "nope.so"))
    with pytest.raises(PipelineError, match="SR_KERNELS_CPU_LIB"):
        native.cpu_kernels_library()
    monkeypatch.delenv("SR_KERNELS_CPU_LIB")
    monkeypatch.delenv("SR_TRT_PLUGIN_LIB", raising=False)
    monkeypatch.setattr(native, "BUILD_DIR", tmp_path)
    with pytest.raises(PipelineError, match="make plugins"):
        native.cpu_kernels_library()
    with pytest.raises(PipelineError, match="make plugins"):
        native.trt_plugin_library()


@pytest.mark.slow
def test_fresh_cpu_only_build(tmp_path, monkeypatch):
    """What a test run does without `make plugins`: configure + build with cmake (here CPU-only, into tmp)."""
    build = native.build_plugins(tmp_path / "build", cuda=False)
    lib = build / native.CPU_KERNELS_NAME
    assert lib.is_file() and not (build / native.CUDA_KERNELS_NAME).exists()
    monkeypatch.setenv("SR_KERNELS_CPU_LIB", str(lib))
    kernels_cpu._lib.cache_clear()
    try:
        x = np.random.default_rng(0).random((1, 2, 4, 5), dtype=np.float32)
        assert_close(kernels_cpu.dynamic_resize(x, (9, 7)), torch_resize(x, 9, 7))
    finally:
        kernels_cpu._lib.cache_clear()


@pytest.mark.parametrize("emulate", [False, True])
def test_dynamic_resize_to_its_own_size_is_a_copy(emulate):
    x = np.random.default_rng(3).standard_normal((2, 3, 7, 9)).astype(np.float32) * 100
    x[0, 0, 0, :3] = [np.nan, np.inf, -np.inf]  # 16 taps would make NaN of an inf (0 * inf)
    out = kernels_cpu.dynamic_resize(x, (7, 9), emulate_fp16=emulate)
    want = x.astype(np.float16).astype(np.float32) if emulate else x
    assert out.tobytes() == want.tobytes()


def test_to_samples_u8_gives_the_numpy_rules_bytes_and_counts():
    """The native output conversion (pipeline.backends.pixels.samples_checked's fast path) against numpy's rule:
    the same bytes on every finite pixel (ties to even, both clips, sizes that end mid-vector and mid-chunk) and
    the same per-sample counts of non-finite pixels."""
    from pipeline.backends import pixels as px

    rng = np.random.default_rng(3)
    y = rng.normal(0.5, 0.7, (3, 3, 37, 41)).astype(np.float32)
    ties = ((np.arange(-3, 260) + 0.5) / 255).astype(np.float32)  # v * 255 lands on (or an ulp off) each tie
    y[0].reshape(-1)[:ties.size] = ties
    y[1, 1, 2, :7] = [np.nan, np.inf, -np.inf, -0.0, 1.0, 0.0, 255.0]
    y[2, 0, 5, 5] = np.nan
    got, counts = kernels_cpu.to_samples_u8(y)
    ref = px.to_samples(y, 8)
    finite = np.isfinite(y).all(axis=1)
    assert got.shape == ref.shape == (3, 37, 41, 3) and np.array_equal(got[finite], ref[finite])
    assert counts.tolist() == px.nonfinite_pixels(y).tolist() == [0, 3, 1]
    samples, none = px.samples_checked(y[:1], 8)  # what the backends call: the native path, nothing non-finite
    assert none is None and samples.tobytes() == ref[:1].tobytes()
    big = rng.random((1, 3, 70, 1100), dtype=np.float32)  # a plane over the kernel's 1024-pixel chunks
    assert kernels_cpu.to_samples_u8(big)[0].tobytes() == px.to_samples(big, 8).tobytes()
    with pytest.raises(PipelineError, match="3 channels"):
        kernels_cpu.to_samples_u8(y[:, :2])
