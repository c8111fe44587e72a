"""Tiled inference reproduces whole-image inference (the real models, random weights, pure PyTorch)."""
import numpy as np
import pytest
import torch
from skimage import data

from models.registry import ModelSpec, get_spec, output_size, run
from pipeline.backends.torch_backend import channels_last_default
from pipeline.errors import PipelineError
from pipeline.images import tiling


@pytest.fixture(scope="module")
def nets():
    torch.set_num_threads(1)  # the test machine's cores are shared: one thread avoids spin contention
    torch.manual_seed(0)
    out = {}
    for name in ("srcnn", "srcnn-x3", "deform-srcnn"):
        net = get_spec(name).build().eval()
        if name == "deform-srcnn":  # non-zero offsets so the deformable sampling actually moves
            with torch.no_grad():
                net.offset_conv.weight.normal_(0, 0.02)
                net.offset_conv.bias.normal_(0, 0.3)
        out[name] = net
    return out


def _image(h, w):
    img = data.astronaut()[100:100 + h, 150:150 + w].astype(np.float32) / 255
    return np.ascontiguousarray(img.transpose(2, 0, 1)[None])


def _tiled(net, name, x, scale, tile, margin=None, batch=2, window=None):
    spec = get_spec(name)
    # the memory format the torch backend runs the net in on the CPU: NHWC, whose oneDNN kernels are exact by position
    fmt = torch.channels_last if channels_last_default(spec, "cpu") else torch.contiguous_format
    net = net.to(memory_format=fmt)
    _, _, h, w = x.shape
    margin = tiling.context_margin(spec.receptive_radius, scale) if margin is None else margin
    plan = tiling.plan(h, w, scale, tile, margin, window)
    out = np.full((3, plan.out_height, plan.out_width), np.nan, dtype=np.float32)
    calls = []

    def infer(b):
        calls.append(b.shape)
        with torch.inference_mode():
            return run(net, spec, torch.from_numpy(b).contiguous(memory_format=fmt), scale).numpy()

    def write(t, y):
        sy, sx = t.keep_slices()
        out[:, t.y.keep0:t.y.keep1, t.x.keep0:t.x.keep1] = y[:, sy, sx]

    tiling.run_tiles(plan, lambda y0, y1, x0, x1: x[0, :, y0:y1, x0:x1], infer, write, batch)
    with torch.inference_mode():
        whole = run(net, spec, torch.from_numpy(x).contiguous(memory_format=fmt), scale).numpy()[0]
    return plan, out, whole, calls


@pytest.mark.parametrize("name,scale,h,w,tile", [
    ("srcnn", 3, 29, 37, 9),
    ("srcnn", 2, 33, 27, 8),
    ("srcnn", 2.5, 36, 30, 8),     # even sides: aligned every 5 output pixels
    ("srcnn", 1.7, 40, 30, 10),
    ("srcnn-x3", 3, 27, 31, 8),
    ("deform-srcnn", 3, 24, 29, 8),
])
def test_tiled_equals_whole_image(nets, name, scale, h, w, tile):
    # One tile at a time (sr's default, --batch 1): a runtime may pick another convolution kernel for a batch of
    # tiles than for the single whole image, which can move the last bit; batched tiles are checked below.
    plan, out, whole, _ = _tiled(nets[name], name, _image(h, w), scale, tile, batch=1)
    assert out.shape == whole.shape == (3, *output_size(h, w, scale))
    assert plan.count > 1 and plan.exact
    assert not np.isnan(out).any()  # the kept regions cover the output
    # srcnn-x3: the tutorial's fixed nn.Upsample computes source positions in float (ATen), an ulp apart by
    # position; deform-srcnn with learned offsets: torchvision samples at float(y) + offset, rounded by position.
    if name in ("srcnn-x3", "deform-srcnn"):
        assert np.abs(out - whole).max() < 1e-6
    else:  # sr::DynamicResize (exact source positions) and position-independent convolutions: bit for bit
        assert np.array_equal(out, whole), np.abs(out - whole).max()
    _, batched, _, calls = _tiled(nets[name], name, _image(h, w), scale, tile, batch=2)
    assert any(s[0] == 2 for s in calls)  # equal-shaped crops were batched
    assert np.abs(batched - whole).max() < 1e-6


def test_too_little_context_is_not_equal(nets):
    """The margin is what makes tiles exact: without it, tile borders differ from the whole image."""
    _, out, whole, _ = _tiled(nets["srcnn"], "srcnn", _image(24, 24), 3, 8, margin=0)
    assert np.abs(out - whole).max() > 1e-3


def test_unaligned_scale_is_close_and_says_so(nets):
    # 2.5 on odd sides: source step 101/253 has no aligned rows inside the image.
    plan, out, whole, _ = _tiled(nets["srcnn"], "srcnn", _image(41, 37), 2.5, 10, window=8)
    assert plan.count > 1 and not plan.exact
    assert 0 < plan.max_shift < 0.2
    assert np.abs(out - whole).max() < 0.05
    # ... while a tile covering the image is the whole-image plan, exact by construction
    whole_plan = tiling.plan(101, 91, 2.5, 200, 20)
    assert whole_plan.whole and whole_plan.exact


@pytest.mark.parametrize("length,scale,tile", [(1, 3, 4), (7, 2.5, 2), (1000, 3, 97), (999, 1.5, 64), (257, 2.5, 30)])
def test_axis_plan_partitions_output(length, scale, tile):
    margin = tiling.context_margin(6, scale)
    spans = tiling.plan_axis(length, scale, tile, margin)
    lo = tiling.output_length(length, scale)
    assert spans[0].keep0 == 0 and spans[-1].keep1 == lo
    for a, b in zip(spans, spans[1:], strict=False):
        assert a.keep1 == b.keep0
    for s in spans:
        assert 0 <= s.crop0 < s.crop1 <= length
        assert tiling.output_length(s.crop1 - s.crop0, scale) == s.out_len
        # the crop reaches `margin` past the kept region unless it hits the image edge
        assert s.out0 <= max(0, s.keep0 - margin) and s.out0 + s.out_len >= min(lo, s.keep1 + margin)
        if s.shift == 0:
            assert s.out0 * length == s.crop0 * lo  # crop starts on the whole-image sampling grid


def test_auto_tile_follows_memory():
    small = tiling.auto_tile(3, 15, available_bytes=512 << 20)
    big = tiling.auto_tile(3, 15, available_bytes=8 << 30)
    assert 8 <= small < big
    # the tile's crop stays within the budget (a quarter of free memory, capped at 1 GiB)
    side = big * 3 + 2 * 15
    assert side * side * tiling.BYTES_PER_OUTPUT_PIXEL <= 1 << 30
    assert tiling.auto_tile(3, 15, batch=4, available_bytes=8 << 30) < big


def test_host_tiles_follow_the_models_cost_within_the_memory_budget():
    """19 GB available and a 16 GiB tile budget: a 1200x900 image at x3 is one SRCNN tile; DeformSRCNN, ~7x costlier
    per pixel, is tiled; a model of unknown cost (a user's) keeps the small capped tiles. The default budget (1 GiB)
    tiles the SRCNN image too, however much is free: free memory alone ran a 4K frame whole at 9 GB."""
    free = 19 << 30
    for name, whole in (("srcnn", True), ("deform-srcnn", False)):
        spec = get_spec(name)
        margin = tiling.context_margin(spec.receptive_radius, 3)
        side = tiling.host_tile(3, margin, 1, spec.host_bytes_per_output_pixel, available_bytes=free, budget=16 << 30)
        assert (len(tiling.plan(900, 1200, 3, side, margin).tiles) == 1) == whole, name
        assert (side * 3 + 2 * margin) ** 2 * spec.host_bytes_per_output_pixel <= free * tiling.HOST_SHARE
        side = tiling.host_tile(3, margin, 1, spec.host_bytes_per_output_pixel, available_bytes=free)
        assert len(tiling.plan(900, 1200, 3, side, margin).tiles) > 1, name
        assert (side * 3 + 2 * margin) ** 2 * spec.host_bytes_per_output_pixel <= tiling.TILE_MEMORY
    unknown = tiling.host_tile(3, 15, 1, None, available_bytes=free)
    assert unknown == tiling.auto_tile(3, 15, available_bytes=free) and (unknown * 3 + 30) ** 2 * 1024 <= 1 << 30


def test_the_tile_memory_budget_is_read_from_the_environment(monkeypatch):
    spec = get_spec("srcnn")
    margin = tiling.context_margin(spec.receptive_radius, 3)
    sides = {}
    for raw in ("", "256M", "4g", "4 GiB", str(4 << 30)):
        monkeypatch.setenv(tiling.TILE_MEMORY_ENV, raw)
        sides[raw] = tiling.host_tile(3, margin, 1, spec.host_bytes_per_output_pixel, available_bytes=64 << 30)
    assert sides["256M"] < sides[""] < sides["4g"] == sides["4 GiB"] == sides[str(4 << 30)]
    for bad in ("lots", "-1G", "1K", "0"):
        monkeypatch.setenv(tiling.TILE_MEMORY_ENV, bad)
        with pytest.raises(PipelineError, match="SRDEPLOY_TILE_MEMORY="):
            tiling.tile_memory()


@pytest.mark.parametrize("name", ["srcnn", "deform-srcnn"])
def test_host_cost_covers_a_real_call(name, tmp_path):
    """The spec's host bytes per output pixel bound what one whole-image ONNX Runtime call really takes (peak RSS
    growth of a fresh process), so half the available memory is a safe budget."""
    import os
    import subprocess
    import sys

    if not os.access("/proc/self/clear_refs", os.W_OK):
        pytest.skip("needs Linux's /proc/self/clear_refs to reset the peak RSS")
    code = ("import re, numpy as np, psutil\nfrom pipeline.backends import create\n"
            f"b = create('ort', '{name}', threads=1)\n"
            "b.infer(np.zeros((1, 3, 16, 16), np.float32), 3.0)\nbase = psutil.Process().memory_info().rss\n"
            "open('/proc/self/clear_refs', 'w').write('5')  # the peak so far (an export, ...) forgotten\n"
            "y = b.infer(np.random.default_rng(0).random((1, 3, 120, 160), dtype=np.float32), 3.0)\n"
            "peak = int(re.search(r'VmHWM:\\s+(\\d+) kB', open('/proc/self/status').read()).group(1)) * 1024\n"
            "print((peak - base) / (y.shape[2] * y.shape[3]))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    measured = float(r.stdout.strip().splitlines()[-1])
    assert 0 < measured <= get_spec(name).host_bytes_per_output_pixel, measured


def test_backend_output_shape_is_checked():
    plan = tiling.plan(20, 20, 2, 8, 6)
    with pytest.raises(RuntimeError, match="expected"):
        tiling.run_tiles(plan, lambda *a: np.zeros((3, a[1] - a[0], a[3] - a[2]), np.float32),
                         lambda b: np.zeros((b.shape[0], 3, 5, 5), np.float32), lambda t, y: None)


def test_receptive_radius_covers_srcnn_layers():
    net = get_spec("srcnn").build()
    r = sum(m.kernel_size[0] // 2 for m in (net.conv1, net.conv2, net.conv3))
    assert get_spec("srcnn").receptive_radius == r
    # a file of a model this install does not register, whose metadata predates the radius: the widest default
    meta = {k: v for k, v in get_spec("srcnn").to_metadata().items() if k != "receptive_radius"}
    assert ModelSpec.from_metadata({**meta, "model": "unknown-model"}).receptive_radius >= r


@pytest.mark.parametrize("scale", [2, 2.5, 3, 4])
def test_context_margin_covers_what_an_output_pixel_sees(nets, scale):
    """The margin is the real reach: changing any LR pixel whose bicubic taps (2 LR pixels each side of a source
    position) fall entirely outside `margin` HR pixels of an output pixel leaves that pixel unchanged, and the
    farthest LR pixel that does change it lies within the margin."""
    net, spec = nets["srcnn"], get_spec("srcnn")
    margin = tiling.context_margin(spec.receptive_radius, scale)
    n = 48
    x = torch.from_numpy(_image(n, n)).requires_grad_(True)
    out = run(net, spec, x, scale)
    oy = ox = out.shape[-1] // 2
    out[0, :, oy, ox].sum().backward()
    rows = torch.nonzero(x.grad[0].abs().sum(dim=(0, 2))).flatten()
    # HR distance of an LR row's centre from the output row: |(lr + 0.5) * scale - (oy + 0.5)|
    reach = max(abs((int(r) + 0.5) * scale - (oy + 0.5)) for r in rows)
    assert reach <= margin, (reach, margin)
    assert margin - reach <= 2 * scale + 2  # and not wildly more than needed (tiles would waste work)
