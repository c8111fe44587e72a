"""Integer pixels in and out (pipeline.backends.pixels): the torch conversions a device backend runs give the
very bytes of the numpy CPU path. Here they run on CPU tensors through the same code the CUDA path runs."""
from __future__ import annotations

import numpy as np
import pytest

from pipeline.backends import pixels as px
from pipeline.backends.base import Backend
from pipeline.errors import PipelineError
from pipeline.images.imageio import Image

torch = pytest.importorskip("torch", reason="the torch backend and conversions need PyTorch (export extra)")


def hard_floats(n: int, maxv: float, seed: int) -> np.ndarray:
    """Model outputs where rounding is decided: exact halves, their float32 neighbours, out of range, random."""
    k = np.arange(int(maxv) + 1, dtype=np.float64)
    halves = ((k + 0.5) / maxv).astype(np.float32)
    near = np.concatenate([np.nextafter(halves, np.float32(-1)), np.nextafter(halves, np.float32(2))])
    rng = np.random.default_rng(seed)
    extra = np.float32([-1e9, -0.5, -1e-7, 0.0, 1.0, 1.0 + 1e-7, 1.5, 1e9])
    vals = np.concatenate([halves, near, extra, rng.uniform(-0.2, 1.2, n).astype(np.float32)])
    return vals[: (len(vals) // 3) * 3].reshape(1, 3, 1, -1)


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
def test_unit_table_is_the_division(dtype):
    maxv = px.max_value(dtype)
    every = np.repeat(np.arange(int(maxv) + 1), 3).astype(dtype).reshape(1, 1, -1, 3)  # each value, each channel
    want = px.to_unit(every)
    assert np.array_equal(want[0, 0], every[0, ..., 2].astype(np.float32) / np.float32(maxv))
    got = px.torch_to_unit(torch.from_numpy(every), px.unit_table(dtype, "cpu"))  # BGR in, RGB out
    assert got.dtype == torch.float32 and np.array_equal(got.numpy(), want)


@pytest.mark.parametrize("depth", [8, 16])
def test_torch_samples_are_the_numpy_samples(depth):
    maxv = 65535.0 if depth == 16 else 255.0
    y = hard_floats(5000, maxv, depth)
    want = px.to_samples(y, depth)
    out = torch.empty(want.shape, dtype=px.torch_dtype(want.dtype))
    px.torch_to_samples(torch.from_numpy(y.copy()), out)  # consumed in place
    assert np.array_equal(out.numpy(), want)  # RGB in, BGR out
    # and the same as the stage's CPU path before integer I/O: quantize() per channel, BGR order
    for c in range(3):
        assert np.array_equal(want[..., 2 - c], px.quantize(y[:, c], depth))


def test_fp16_outputs_round_like_their_float32_values():
    y16 = torch.from_numpy(hard_floats(2000, 255.0, 3)).half()
    out = torch.empty((1, 1, y16.shape[-1], 3), dtype=torch.uint8)
    px.torch_to_samples(y16, out)
    assert np.array_equal(out.numpy(), px.to_samples(y16.float().numpy(), 8))


def test_swap_rb_of_views_and_in_place():
    bgra = np.random.default_rng(2).integers(0, 65536, (2, 9, 11, 4)).astype(np.uint16)
    view = bgra[:, 1:7, 2:9, :3]
    assert np.array_equal(px.swap_rb(view), view[..., ::-1])
    a = np.ascontiguousarray(view)
    assert px.swap_rb(a, a) is a and np.array_equal(a, view[..., ::-1])


@pytest.fixture(scope="module")
def srcnn_cpu():
    from pipeline.backends.torch_backend import TorchBackend

    return TorchBackend("srcnn", device="cpu").load()


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
def test_torch_backend_pixels_equal_the_cpu_path(srcnn_cpu, dtype):
    """The torch backend's own integer path (torch conversions, CPU tensors) = the base class's numpy
    conversions around `infer` = the stage's path before this change (region_rgb -> infer -> store_rgb)."""
    rng = np.random.default_rng(7)
    maxv = int(px.max_value(dtype))
    img = rng.integers(0, maxv + 1, (2, 23, 31, 3)).astype(dtype)
    got = srcnn_cpu.infer_pixels(img, 3.0)
    assert got.dtype == dtype and got.shape == (2, 69, 93, 3)
    assert np.array_equal(got, Backend.infer_pixels(srcnn_cpu, img, 3.0))
    for i in range(2):
        old = np.empty((69, 93, 3), dtype)
        y = srcnn_cpu.infer(Image(img[i]).region_rgb(0, 23, 0, 31)[None], 3.0)[0]
        from pipeline.images import imageio

        imageio.store_rgb(old, 0, 0, y, 16 if dtype == np.uint16 else 8)
        assert np.array_equal(got[i], old)


def test_torch_backend_pixels_take_views_and_refuse_floats(srcnn_cpu):
    img = np.random.default_rng(1).integers(0, 256, (40, 40, 4)).astype(np.uint8)
    view = img[3:20, 5:30, :3][None]  # a non-contiguous crop of a BGRA image, as the worker passes it
    assert np.array_equal(srcnn_cpu.infer_pixels(view, 2.0), Backend.infer_pixels(srcnn_cpu, view, 2.0))
    with pytest.raises(PipelineError, match="uint8 or uint16"):
        srcnn_cpu.infer_pixels(view.astype(np.float32), 2.0)
    with pytest.raises(PipelineError, match="NHWC"):
        srcnn_cpu.infer_pixels(img[None], 2.0)


def test_device_memory_is_for_device_backends(srcnn_cpu):
    assert srcnn_cpu.device_memory() is None and not srcnn_cpu.on_gpu


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("cuda_graph", [False, True])
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
def test_torch_cuda_pixels_equal_the_cpu_path(dtype, cuda_graph):
    """On the GPU: integers converted on the device = the numpy conversions around the same device's float
    output, byte for byte (pinned staging reused across calls, CUDA graph replay on repeated shapes)."""
    from pipeline.backends.torch_backend import TorchBackend

    be = TorchBackend("srcnn", device="cuda", cuda_graph=cuda_graph).load()
    rng = np.random.default_rng(5)
    for shape in [(2, 40, 56, 3), (2, 40, 56, 3), (1, 17, 9, 3)]:
        img = rng.integers(0, int(px.max_value(dtype)) + 1, shape).astype(dtype)
        assert np.array_equal(be.infer_pixels(img, 3.0), Backend.infer_pixels(be, img, 3.0))
    mem = be.device_memory()
    assert mem.free_bytes > 0 and mem.bytes_per_output_pixel > 0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_torch_bf16_cuda_graphs_replay_stably():
    """bf16 autocast under CUDA graphs: two shapes captured into the graphs' shared pool and replayed alternately
    six times each, with other allocations in between, give the same bytes every call and eager bf16's result
    (autocast's weight cache freed the casts a graph replays: torch's notes want cache_enabled=False in a capture)."""
    from pipeline.backends.torch_backend import TorchBackend

    if torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("bf16 tensor cores need compute capability 8.0")
    eager = TorchBackend("srcnn", "bf16", device="cuda").load()
    graphs = TorchBackend("srcnn", "bf16", device="cuda", cuda_graph=True).load()
    rng = np.random.default_rng(6)
    xs = [rng.random((1, 3, 40, 48), dtype=np.float32), rng.random((2, 3, 24, 32), dtype=np.float32)]
    want = [eager.infer(x, 3.0) for x in xs]
    first = {}
    for call in range(6):
        for i, x in enumerate(xs):
            got = graphs.infer(x, 3.0)
            junk = torch.full((1 << 22,), float("nan"), device="cuda")  # takes whatever memory was freed
            del junk
            if call >= graphs.GRAPH_AFTER - 1:  # replays (the calls before ran eagerly): one result
                assert np.array_equal(got, first.setdefault(i, got)), (call, i)
            assert np.isfinite(got).all() and np.abs(got - want[i]).max() <= 0.03, (call, i)
    assert len(graphs._graphs) == 2


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_slot_waits_sleep_instead_of_spinning():
    """A result still on the device is waited for on the slot's event, under the backend's lock: a blocking event
    (the thread sleeps), not a spinning one (a CPU core at 100 % for the wait)."""
    import threading
    import time

    slots = px.PixelSlots("cuda", threading.RLock())
    img = np.zeros((1, 64, 64, 3), np.uint8)
    slot, dev = slots.upload(img)
    torch.cuda._sleep(int(2e9))  # ~1 s of the GPU's clock ahead of the download on the same stream
    pending = slots.download(slot, dev, torch.zeros(1, dtype=torch.int64, device="cuda"))  # no non-finite pixel
    wall, cpu = time.perf_counter(), time.thread_time()
    assert np.array_equal(pending.result(), img)
    wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
    if wall < 0.1:
        pytest.skip(f"the device finished in {wall:.3f} s: too soon to tell a sleeping wait from a spinning one")
    assert cpu < 0.5 * wall, f"waited {wall:.2f} s using {cpu:.2f} s of CPU: the event spins"


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
def test_ort_pixel_graph_equals_the_cpu_path(dtype):
    """ONNX Runtime with the rule inside the graph (what its CUDA and TensorRT providers run, with I/O binding),
    here on the CPU provider: the bytes of the numpy conversions around the same session's float output."""
    from pipeline.backends.ort_backend import OrtCpuBackend

    be = OrtCpuBackend("srcnn", threads=1).load()
    rng = np.random.default_rng(11)
    img = rng.integers(0, int(px.max_value(dtype)) + 1, (2, 21, 26, 3)).astype(dtype)
    for scale in (3.0, 2.5):
        got = be.infer_pixels_in_graph(img, scale)
        assert got.dtype == dtype and np.array_equal(got, be.infer_pixels(img, scale))  # the latter: numpy


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
def test_tensorrt_pixel_graph_has_no_uint16_and_the_same_bytes(dtype):
    """The pixel graph ORT's TensorRT provider gets: no UINT16 (TensorRT has none: 16-bit samples travel as int32),
    integers only at the two I/O casts, int32 gather indices, UINT8 cast only to and from FLOAT; run here on the CPU
    provider, the numpy path's bytes."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto

    from pipeline.backends.ort_backend import OrtCpuBackend

    be = OrtCpuBackend("srcnn", threads=1).load()
    model = px.onnx_pixel_io(onnx.load(str(be.onnx_file)), dtype, tensorrt=True)
    model = onnx.shape_inference.infer_shapes(model)
    g = model.graph
    types = {v.name: v.type.tensor_type.elem_type for v in (*g.input, *g.output, *g.value_info)}
    assert TensorProto.UINT16 not in types.values() and types["px_index"] != TensorProto.INT64
    ints = {TensorProto.UINT8, TensorProto.UINT16, TensorProto.INT32}
    assert [n.op_type for n in g.node if any(types.get(o) in ints for o in n.output)] == ["Cast", "Cast"]
    # TensorRT 11 (DataType::kUINT8) casts UINT8 to and from FLOAT and HALF only: 8-bit samples reach the INT32
    # indices through FLOAT, and come back from it
    casts = [(types[n.input[0]], types[n.output[0]]) for n in g.node if n.op_type == "Cast"]
    floats = {TensorProto.FLOAT, TensorProto.FLOAT16}
    assert all(b in floats for a, b in casts if a == TensorProto.UINT8)
    assert all(a in floats for a, b in casts if b == TensorProto.UINT8)
    if dtype == np.uint8:
        assert casts[:2] == [(TensorProto.UINT8, TensorProto.FLOAT), (TensorProto.FLOAT, TensorProto.INT32)]
        assert casts[-1] == (TensorProto.FLOAT, TensorProto.UINT8)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    io = px.onnx_pixel_dtype(dtype, tensorrt=True)
    img = np.random.default_rng(12).integers(0, int(px.max_value(dtype)) + 1, (2, 19, 23, 3)).astype(dtype)
    feeds = {px.PIXELS_IN: px.swap_rb(img).astype(io), px.PIXEL_MAX: np.array(px.max_value(dtype), np.float32),
             "size": np.array([57, 69], np.int64)}
    got = sess.run(None, feeds)[0]
    assert got.dtype == io and np.array_equal(px.swap_rb(got.astype(dtype)), be.infer_pixels(img, 3.0))


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["ort-cuda", "ort-trt", "trt"])
def test_device_backends_pixels_equal_the_cpu_path(name):
    """ONNX Runtime's CUDA/TensorRT providers (rule in the graph, I/O binding) and TensorRT (rule on its stream
    around the bound buffers): the bytes of the numpy conversions around the same backend's float output. `trt`
    runs one engine both ways and ort-cuda the same cuDNN algorithms (heuristics, TF32 off), so they are equal;
    ort-trt's pixel graph is its own TensorRT engine, built apart from the float one (tactics chosen by timing),
    so there the stated tolerance is one level on at most 1 % of samples, and the pixel session equals itself."""
    from models.lookup import get_spec
    from pipeline import backends

    status = backends.backend_class(name).status(get_spec("srcnn"), "fp32")
    if not status.available:
        pytest.skip(status.reason)
    be = backends.create(name, "srcnn", "fp32")
    rng = np.random.default_rng(9)
    for dtype in (np.uint8, np.uint16):
        img = rng.integers(0, int(px.max_value(dtype)) + 1, (1, 48, 40, 3)).astype(dtype)
        got, want = be.infer_pixels(img, 3.0), Backend.infer_pixels(be, img, 3.0)
        if name != "ort-trt":
            assert np.array_equal(got, want)
            continue
        assert np.array_equal(got, be.infer_pixels(img, 3.0))
        diff = np.abs(got.astype(np.int64) - want.astype(np.int64))
        assert diff.max() <= 1 and np.count_nonzero(diff) <= 0.01 * diff.size, (diff.max(), np.count_nonzero(diff))


def test_buffers_grow_only_so_rebinding_allocates_nothing():
    """The storage behind trt's bound input/output and each pinned slot: a smaller or equal shape (another tile,
    a smaller batch) is a view of what is there; only a larger one allocates."""
    bufs = px.Buffers()
    big = bufs.get("input", (2, 3, 40, 48), torch.float32)
    for shape, dtype in [((1, 3, 33, 41), torch.float32), ((2, 3, 40, 48), torch.float16),
                         ((4, 40, 48, 3), torch.uint8)]:
        assert bufs.get("input", shape, dtype).data_ptr() == big.data_ptr()
    assert bufs.get("input", (3, 3, 40, 48), torch.float32).shape == (3, 3, 40, 48)


DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device")])]


@pytest.mark.parametrize("device", DEVICES)
def test_submitted_batches_collected_later_and_straight_into_outputs(device):
    """submit_pixels three times (the first slot reused before it was collected), then collect: every result is
    its own batch's, and `result(out)` fills views of the outputs (the RGB part of a BGRA buffer); on CUDA the
    pinned slots and their events do the same."""
    from pipeline.backends.torch_backend import TorchBackend

    be = TorchBackend("srcnn", device=device).load()
    rng = np.random.default_rng(21)
    batches = [rng.integers(0, 256, (2, 13 + i, 17, 3)).astype(np.uint8) for i in range(3)]
    want = [Backend.infer_pixels(be, b, 2.0) for b in batches]
    pending = [be.submit_pixels(b, 2.0) for b in batches]
    outs = [np.zeros((*w.shape[:2], 4), np.uint8) for w in want[1]]
    pending[1].result([o[..., :3] for o in outs])
    assert np.array_equal(np.stack(outs)[..., :3], want[1]) and not np.stack(outs)[..., 3].any()
    assert np.array_equal(pending[2].result(), want[2]) and np.array_equal(pending[0].result(), want[0])


@pytest.mark.parametrize("device", DEVICES)
def test_threads_sharing_one_backend_get_their_own_results(device):
    """One backend, eight threads: the shared slots (and on CUDA the stream and graphs) are used under the
    backend's lock, so each call gets its own image's result."""
    from concurrent.futures import ThreadPoolExecutor

    from pipeline.backends.torch_backend import TorchBackend

    be = TorchBackend("srcnn", device=device, threads=1 if device == "cpu" else None).load()
    rng = np.random.default_rng(22)
    images = [rng.integers(0, 256, (1, 8 + i % 5, 6 + i % 3, 3)).astype(np.uint8) for i in range(16)]
    want = [Backend.infer_pixels(be, im, 2.0) for im in images]
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda im: be.submit_pixels(im, 2.0).result(), images * 8))
    assert all(np.array_equal(g, w) for g, w in zip(got, want * 8, strict=True))
