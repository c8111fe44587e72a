"""What the sr stage does differently for a device backend: tiles sized from the device's free memory and the
model's measured cost (none when the image fits), `--batch auto`, decode/encode threads on every usable core.
The device is the torch backend on the CPU declaring device memory (the stage's decisions are under test, the
conversions and the model run for real); the GPU itself is covered by the `gpu` tests."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest

from pipeline.backends.base import DeviceMemory
from pipeline.cli import main
from pipeline.errors import PipelineError
from pipeline.sr import ImageWorker, settings, upscale
from pipeline.sr.runner.worker import AUTO_BATCH

torch = pytest.importorskip("torch", reason="the torch backend needs PyTorch (export extra)")
from pipeline.backends.torch_backend import TorchBackend  # noqa: E402


class Declared(TorchBackend):
    """The torch CPU runner reporting a device's memory, as the CUDA path does."""

    def __init__(self, free_bytes: int, bytes_per_px: float = 2048.0):
        super().__init__("srcnn", device="cpu")
        self.memory = DeviceMemory(free_bytes, bytes_per_px)

    def device_memory(self):
        return self.memory


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("in")
    rng = np.random.default_rng(0)
    base = cv2.resize(rng.integers(0, 256, (12, 12, 3)).astype(np.uint8), (96, 96), interpolation=cv2.INTER_CUBIC)
    for i in range(3):
        cv2.imwrite(str(root / f"{i}.png"), np.roll(base, 7 * i, axis=1))
    cv2.imwrite(str(root / "alpha.png"), np.dstack([base, base[:, :, 0]]))
    return root


def test_device_tiles_from_its_memory_and_not_when_the_image_fits(folder, tmp_path):
    big, small = Declared(80 << 30).load(), Declared(24 << 20).load()
    assert ImageWorker(big, "srcnn", 3.0).tile >= 1024  # a 512^2 image is one tile on an 80 GB device
    w_small = ImageWorker(small, "srcnn", 3.0)
    assert w_small.tile < 96  # the 96^2 images must be tiled in 24 MB at 2 kB per output pixel
    whole = upscale(folder, tmp_path / "whole", scale=3.0, backend=big, progress=False)
    tiled = upscale(folder, tmp_path / "tiled", scale=3.0, backend=small, progress=False)
    assert {r.tiles for r in whole.ok} == {1} and min(r.tiles for r in tiled.ok) > 1
    for name in ("0.png", "1.png", "2.png", "alpha.png"):
        # tiled = whole, byte for byte (the stage's tiling guarantee, through the integer path)
        a = cv2.imread(str(tmp_path / "whole" / name), cv2.IMREAD_UNCHANGED)
        b = cv2.imread(str(tmp_path / "tiled" / name), cv2.IMREAD_UNCHANGED)
        assert a.shape[:2] == (288, 288) and np.array_equal(a, b)


def test_batch_auto_fills_a_device_and_is_one_on_the_host(folder, tmp_path):
    host = TorchBackend("srcnn", device="cpu").load()
    assert ImageWorker(host, "srcnn", 3.0, batch="auto").batch == 1
    assert ImageWorker(Declared(80 << 30, 1024.0), "srcnn", 3.0, batch="auto").batch == AUTO_BATCH
    # half of 24 GiB free, 4 GiB for each 2048^2 output at 1 kB per pixel: 3
    assert ImageWorker(Declared(24 << 30, 1024.0), "srcnn", 3.0, batch="auto").batch == 3
    assert ImageWorker(Declared(1 << 20), "srcnn", 3.0, batch="auto").batch == 1
    s = upscale(folder, tmp_path / "o", scale=3.0, backend=Declared(80 << 30, 1024.0).load(), batch="auto",
                progress=False)
    assert s.counts["ok"] == 4 and s.batch == AUTO_BATCH


def test_io_threads_follow_the_usable_cores():
    cores = len(os.sched_getaffinity(0))
    assert settings.usable_cores() == cores
    assert settings.io_workers(None, on_gpu=True) == cores
    assert settings.io_workers(None, on_gpu=False) == min(2, cores)
    assert settings.io_workers(5, on_gpu=True) == 5 and settings.io_workers(1, on_gpu=False) == 1


def test_cli_batch_auto_and_bad_batches(folder, tmp_path, capsys):
    out = tmp_path / "o"
    assert main(["sr", str(folder), str(out), "--backend", "torch", "--batch", "auto", "--quiet",
                 "--summary", str(tmp_path / "s.json")]) == 0
    assert len(list(Path(out).glob("*.png"))) == 4
    capsys.readouterr()
    for bad in ("0", "many", "-2"):
        assert main(["sr", str(folder), str(tmp_path / f"bad{bad}"), "--batch", bad]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: --batch must be an integer >= 1") and "auto" in err[0]
        assert not (tmp_path / f"bad{bad}").exists()


def test_batches_of_mixed_sample_types_match_single_images(tmp_path):
    """Equal-size 8- and 16-bit images may share a batch; each keeps its own full scale."""
    src = tmp_path / "in"
    src.mkdir()
    rng = np.random.default_rng(3)
    cv2.imwrite(str(src / "a8.png"), rng.integers(0, 256, (20, 24, 3)).astype(np.uint8))
    cv2.imwrite(str(src / "b16.png"), rng.integers(0, 65536, (20, 24, 3)).astype(np.uint16))
    cv2.imwrite(str(src / "c8.png"), rng.integers(0, 256, (20, 24, 3)).astype(np.uint8))
    be = TorchBackend("srcnn", device="cpu").load()
    upscale(src, tmp_path / "one", scale=2.0, backend=be, batch=1, progress=False)
    s = upscale(src, tmp_path / "three", scale=2.0, backend=be, batch=3, progress=False)
    assert s.counts["ok"] == 3
    for name in ("a8.png", "b16.png", "c8.png"):
        a = cv2.imread(str(tmp_path / "one" / name), cv2.IMREAD_UNCHANGED)
        b = cv2.imread(str(tmp_path / "three" / name), cv2.IMREAD_UNCHANGED)
        assert a.dtype == b.dtype and np.array_equal(a, b)


class Profiled(TorchBackend):
    """The torch CPU runner admitting inputs up to a TensorRT profile's largest side, refusing bigger crops with
    the engine's message (pipeline.engine.profile_for_input)."""

    def __init__(self, max_side: int):
        super().__init__("srcnn", device="cpu")
        self.max_side = max_side

    def max_input_size(self):
        return self.max_side, self.max_side

    def infer_pixels(self, pixels, scale):
        if max(pixels.shape[1:3]) > self.max_side:
            raise PipelineError(f"input {pixels.shape[1:3]} is outside the engine's profiles")
        return super().infer_pixels(pixels, scale)


COMMON_SIZES = [(1366, 768), (1920, 1080), (1280, 720), (2560, 1440), (3840, 2160), (1024, 768), (1440, 900),
                (4032, 3024), (6000, 4000), (1080, 1920), (3000, 2000), (1600, 1200)]


@pytest.mark.parametrize("model", ["srcnn", "srcnn-x3", "deform-srcnn"])
def test_tiles_of_common_sizes_fit_the_engine_profile(model):
    """No crop beyond the default profile's 512: the last tile's sliver is folded in only where it still fits
    (srcnn x2 on 1366x768 once planned a 525-pixel crop)."""
    from models.lookup import get_spec
    from pipeline.images import tiling

    spec = get_spec(model)
    be = Profiled(512)
    for scale in (2.0, 2.5, 3.0, 4.0) if spec.dynamic_scale else (spec.default_scale,):
        w = ImageWorker(be, spec, scale, tile=None)
        for width, height in COMMON_SIZES:
            plan = tiling.plan(height, width, scale, w.tile, w.margin, align=w.align, max_input=w.max_input)
            assert max(max(t.crop_shape) for t in plan.tiles) <= 512, (model, scale, width, height)


class Engined(TorchBackend):
    """The torch CPU runner admitting exactly what an engine with `profiles` admits (profile_for_input)."""

    def __init__(self, model: str, profiles):
        super().__init__(model, device="cpu")
        self.profiles = profiles


@pytest.mark.parametrize("model", ["srcnn", "deform-srcnn"])
def test_tiles_at_scales_above_the_profile_fit_its_output(model):
    """Scales 5-8 with the default x2-x4 profile: the profile bounds the output (its `size` tensor) as well as the
    input, so tiles are capped by its largest output over the scale too: every crop of every common image size is
    admitted by the engine's own check (a 512 crop at x5 would be 2560 > 2048 and fail on every image)."""
    from models.lookup import get_spec
    from models.spec import output_size
    from pipeline.engine import default_profile, profile_for_input
    from pipeline.images import tiling

    spec = get_spec(model)
    be = Engined(model, [default_profile(spec)])
    assert be.input_limit(4.0) == (512, 512) and be.input_limit(5.0) == (409, 409)
    for scale in (5.0, 6.0, 7.5, 8.0):
        w = ImageWorker(be, spec, scale, tile=None)
        assert w.max_input is not None
        assert output_size(*w.max_input, scale)[0] <= be.profiles[0].size_values()[2][0] < output_size(
            w.max_input[0] + 1, w.max_input[1] + 1, scale)[0]
        for width, height in COMMON_SIZES:
            plan = tiling.plan(height, width, scale, w.tile, w.margin, align=w.align, max_input=w.max_input)
            for t in plan.tiles:
                profile_for_input(be.profiles, 1, *t.crop_shape, *output_size(*t.crop_shape, scale))


def test_crops_within_the_backend_limit_and_tiled_equals_whole(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    rng = np.random.default_rng(4)
    img = cv2.resize(rng.integers(0, 256, (57, 5, 3)).astype(np.uint8), (40, 456), interpolation=cv2.INTER_CUBIC)
    cv2.imwrite(str(src / "tall.png"), img)
    tiled = upscale(src, tmp_path / "tiled", scale=4.0, backend=Profiled(256).load(), progress=False)
    assert tiled.counts["ok"] == 1 and tiled.ok[0].tiles > 1  # 456 rows at a 256-row limit, x4: tiled
    upscale(src, tmp_path / "whole", scale=4.0, backend=TorchBackend("srcnn", device="cpu").load(), progress=False)
    a = cv2.imread(str(tmp_path / "tiled" / "tall.png"), cv2.IMREAD_UNCHANGED)
    b = cv2.imread(str(tmp_path / "whole" / "tall.png"), cv2.IMREAD_UNCHANGED)
    assert a.shape == (1824, 160, 3) and np.array_equal(a, b)


def test_outputs_over_the_write_cap_overlap_inference_and_encoding(folder, tmp_path):
    """With every output over the write queue's byte cap, the next images are still inferred while one is being
    encoded: image 0's encoder waits (bounded) until the fourth image's inference has started."""
    import threading

    from pipeline.sr.runner.console import Console
    from pipeline.sr.runner.jobs import Job
    from pipeline.sr.runner.records import Record
    from pipeline.sr.runner.scheduler import Scheduler

    class Gated(ImageWorker):
        gate = threading.Event()

        def submit_batch(self, items):
            if items[0].rec.job.rel == "alpha.png":
                self.gate.set()
            return super().submit_batch(items)

        def encode(self, item, rec):
            if rec.job.rel == "0.png" and not self.gate.wait(20):
                raise RuntimeError("image 3 was not inferred while image 0 was being encoded")
            super().encode(item, rec)

    worker = Gated(TorchBackend("srcnn", device="cpu").load(), "srcnn", 2.0)
    names = ["0.png", "1.png", "2.png", "alpha.png"]
    todo = [Record(Job(folder / n, tmp_path / n, n, "png")) for n in names]
    Scheduler(worker, Console(progress=False, log=lambda _m: None), workers=2, write_bytes=1).run(todo)
    assert [r.status for r in todo] == ["ok"] * 4, [r.reason for r in todo]


# -- on a GPU (skipped here with the reason): what only a device can show ----------------------------------------

def _cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")


@pytest.mark.gpu
def test_torch_cuda_fp32_is_ieee_unless_tf32_is_asked():
    """fp32 on CUDA = the CPU within compare's fp32 tolerance (cuDNN's TF32 convolutions would be ~1e-3 off)."""
    _cuda()
    x = np.random.default_rng(30).random((1, 3, 64, 72), dtype=np.float32)
    cpu = TorchBackend("srcnn", device="cpu").load().infer(x, 3.0)
    gpu = TorchBackend("srcnn", device="cuda").load()
    assert "TF32 off" in gpu.describe() and np.abs(gpu.infer(x, 3.0) - cpu).max() <= 1e-4
    assert "TF32 on" in TorchBackend("srcnn", device="cuda", tf32=True).load().describe()


@pytest.mark.gpu
def test_torch_cuda_graphs_only_for_repeated_shapes_and_never_in_device_memory():
    from pipeline.backends.base import Backend

    _cuda()
    be = TorchBackend("srcnn", device="cuda", cuda_graph=True).load()
    eager = TorchBackend("srcnn", device="cuda", cuda_graph=False).load()  # the reference never counts sightings
    assert be.device_memory().bytes_per_output_pixel > 0 and not be._graphs
    rng = np.random.default_rng(31)
    tile, edge = rng.integers(0, 256, (2, 48, 48, 3)).astype(np.uint8), rng.integers(0, 256, (2, 48, 13, 3))
    for img in (tile, tile, edge.astype(np.uint8), tile):  # the edge crop is seen once: eager
        assert np.array_equal(be.infer_pixels(img, 3.0), Backend.infer_pixels(eager, img, 3.0))
    assert len(be._graphs) == 1 and be._pool is not None and not eager._graphs


class ReplaysOnce:
    """A captured computation replayed by hand on CPU tensors (doubling its input), right only `good` times: what
    deform-srcnn's CUDA graph did on an H200 (its first replay right, later ones a mostly black image)."""

    def __init__(self, static_x, static_y, good: int, keeps_output: bool = False):
        self.x, self.y, self.good, self.keeps_output, self.replays = static_x, static_y, good, keeps_output, 0

    def replay(self):
        self.replays += 1
        if self.keeps_output:  # adds to its last output instead of writing it (state kept between replays)
            self.y.nan_to_num_(0.0).add_(self.x * 2 if self.replays == 1 else 0)
        elif self.replays <= self.good:
            self.y.copy_(self.x * 2)
        else:
            self.y.zero_()


@pytest.mark.parametrize("good, keeps_output, wrong", [(3, False, None), (1, False, 1), (0, False, 0),
                                                        (3, True, 1)])
def test_a_graph_is_kept_only_when_every_checked_replay_equals_eager(good, keeps_output, wrong):
    from pipeline.backends.torch_backend import _first_wrong_replay, _replay_inputs

    x = torch.rand(1, 3, 8, 8).contiguous(memory_format=torch.channels_last)
    inputs = _replay_inputs(x, TorchBackend.CHECK_REPLAYS)
    assert len(inputs) == 3 and all(v.stride() == x.stride() for v in inputs)
    assert all(not torch.equal(a, b) for i, a in enumerate(inputs) for b in inputs[i + 1:])  # each one differs
    static_x, static_y = x.clone(), torch.zeros_like(x)
    graph = ReplaysOnce(static_x, static_y, good, keeps_output)
    assert _first_wrong_replay(graph, static_x, static_y, inputs, [v * 2 for v in inputs]) == wrong


@pytest.mark.gpu
def test_torch_cuda_defaults_and_graphs_checked_before_use(capfd):
    """On CUDA deform-srcnn runs NCHW (torchvision's deform_conv2d copies NHWC inputs: 1.25x slower on an H100),
    srcnn channels_last, both eager by default. With cuda_graph=True a capture whose replay differs from eager is
    dropped (deform-srcnn's graph replayed wrong values on an H100) while srcnn's is kept: every call equals eager."""
    _cuda()
    deform = TorchBackend("deform-srcnn", device="cuda").load()
    srcnn = TorchBackend("srcnn-x3", device="cuda").load()
    assert not deform.channels_last and srcnn.channels_last and not deform.cuda_graph and not srcnn.cuda_graph
    assert TorchBackend("deform-srcnn", device="cpu").load().channels_last
    x = np.random.default_rng(32).integers(0, 256, (1, 40, 40, 3)).astype(np.uint8)
    for model in ("deform-srcnn", "srcnn"):
        eager = TorchBackend(model, device="cuda").load()
        graphed = TorchBackend(model, device="cuda", cuda_graph=True).load()
        want = eager.infer_pixels(x, 3.0)
        for _ in range(4):  # eager, captured and checked, then replayed (or eager where the check failed)
            assert np.array_equal(graphed.infer_pixels(x, 3.0), want), model
        assert len(graphed._graphs) + len(graphed._uncapturable) == 1
        said = [line for line in capfd.readouterr().err.splitlines() if "no CUDA graph" in line]
        assert len(said) == len(graphed._uncapturable), said  # a dropped graph is said, in one line
    assert graphed._graphs  # srcnn's capture is kept


@pytest.mark.gpu
@pytest.mark.parametrize("name, engine_profile", [("ort-cuda", False), ("ort-trt", True)])
def test_ort_gpu_backends_size_tiles_from_the_device(name, engine_profile):
    """ORT's GPU backends: pixel sessions built at load, device memory measured, whole 512^2 images on a big GPU,
    --batch auto above one; ort-trt plans within its profile and `ort` picks a GPU provider here."""
    from models.lookup import get_spec
    from pipeline import backends
    from pipeline.backends.ort_backend import pick_provider

    status = backends.backend_class(name).status(get_spec("srcnn"), "fp32")
    if not status.available:
        pytest.skip(status.reason)
    assert pick_provider() != "cpu"
    be: Any = backends.create(name, "srcnn", "fp32")
    assert set(be._pixel_sessions) == {np.dtype(np.uint8), np.dtype(np.uint16)}
    mem = be.device_memory()
    assert mem is not None and mem.free_bytes > 1 << 30 and mem.bytes_per_output_pixel > 0
    w = ImageWorker(be, "srcnn", 3.0, batch="auto")
    assert w.batch > 1
    if engine_profile:  # TensorRT's engines: planned within the profile
        assert be.max_input_size() == (512, 512) and w.tile is not None
    else:
        assert w.tile is None or w.tile >= 512


@pytest.mark.gpu
def test_trt_rebinding_allocates_nothing_and_graphs_follow_a_fixed_shape():
    from models.lookup import get_spec
    from pipeline import backends
    from pipeline.backends.base import Backend

    status = backends.backend_class("trt").status(get_spec("srcnn"), "fp32")
    if not status.available:
        pytest.skip(status.reason)
    be: Any = backends.create("trt", "srcnn", "fp32", cuda_graph=True)
    rng = np.random.default_rng(33)
    big, small = rng.integers(0, 256, (2, 96, 96, 3)).astype(np.uint8), rng.integers(0, 256, (1, 40, 24, 3))
    be.infer_pixels(big, 2.0)
    ptr = be.d_in.data_ptr(), be.d_out.data_ptr()
    for img in (small.astype(np.uint8), big, big, big):
        assert np.array_equal(be.infer_pixels(img, 2.0), Backend.infer_pixels(be, img, 2.0))
    # both shapes ran twice in a row once (pixels, then floats): each has its graph, on the same buffers
    assert (be.d_in.data_ptr(), be.d_out.data_ptr()) == ptr and len(be._graphs) == 2


@pytest.mark.gpu
def test_trt_keeps_a_cuda_graph_per_bound_shape():
    """Tile groups of two shapes, image after image: each shape's graph is captured once and replayed whenever the
    shape is bound again (no recapture per image, each with a synchronize, gc and empty_cache), the bytes those of
    the direct runs."""
    from models.lookup import get_spec
    from pipeline import backends
    from pipeline.backends.base import Backend

    status = backends.backend_class("trt").status(get_spec("srcnn"), "fp32")
    if not status.available:
        pytest.skip(status.reason)
    be: Any = backends.create("trt", "srcnn", "fp32", cuda_graph=True)
    rng = np.random.default_rng(34)
    tiles = [rng.integers(0, 256, (2, 64, 64, 3)).astype(np.uint8), rng.integers(0, 256, (1, 64, 40, 3)).astype(
        np.uint8)]
    want = [Backend.infer_pixels(be, t, 2.0) for t in tiles]  # the float path, before any graph
    graphs = {}
    for image in range(4):
        for i, t in enumerate(tiles):
            for _ in range(3):  # a group of equal tiles: direct after the rebind, then the graph
                assert np.array_equal(be.infer_pixels(t, 2.0), want[i]), (image, i)
            graphs.setdefault(i, next(reversed(be._graphs.values())))
            assert next(reversed(be._graphs.values())) is graphs[i], f"shape {i} recaptured for image {image}"
    assert len(be._graphs) == 2


def test_scheduler_submits_the_next_batch_before_collecting_the_last(folder, tmp_path):
    """Whole images: batch k + 1 is submitted before batch k is collected (a device works while the next is read),
    with --batch 1 too; every image is written, its bytes those of a plain run."""
    from pipeline.sr.runner.console import Console
    from pipeline.sr.runner.jobs import Job
    from pipeline.sr.runner.records import Record
    from pipeline.sr.runner.scheduler import Scheduler

    events = []

    class Logged(ImageWorker):
        def submit_batch(self, items):
            names = [it.rec.job.rel for it in items]
            events.append(("submit", names))
            finish = super().submit_batch(items)
            return lambda: (events.append(("collect", names)), finish())

    be = TorchBackend("srcnn", device="cpu").load()
    worker = Logged(be, "srcnn", 2.0, batch=1)
    todo = [Record(Job(folder / f"{i}.png", tmp_path / f"{i}.png", f"{i}.png", "png")) for i in range(3)]
    Scheduler(worker, Console(progress=False, log=lambda _m: None), workers=1).run(todo)
    assert [r.status for r in todo] == ["ok"] * 3
    assert events == [("submit", ["0.png"]), ("submit", ["1.png"]), ("collect", ["0.png"]),
                      ("submit", ["2.png"]), ("collect", ["1.png"]), ("collect", ["2.png"])]
    upscale(folder, tmp_path / "plain", scale=2.0, backend=be, progress=False)
    for i in range(3):
        a = cv2.imread(str(tmp_path / f"{i}.png"), cv2.IMREAD_UNCHANGED)
        assert np.array_equal(a, cv2.imread(str(tmp_path / "plain" / f"{i}.png"), cv2.IMREAD_UNCHANGED))
