"""PyTorch eager runner: CPU, or CUDA when present; fp16 only on CUDA. PyTorch is optional at run time (the
`export` extra), so it is imported only when this backend loads.

`infer_pixels` / `submit_pixels` take integer pixels: on CUDA they go to the device through double-buffered pinned
slots as uint8/uint16 (a quarter of float32's bytes; pixels.PixelSlots), are swapped to RGB and converted there by
pipeline.backends.pixels' rule on the backend's own stream, and come back as integers, collected into the caller's
output; on the CPU the same torch code runs on CPU tensors (which is how its bytes are tested against the numpy
path). fp32 is IEEE fp32 on CUDA too: cuDNN's TF32 convolutions only with `tf32=True`. With `cuda_graph=True` a
shape the run repeats (whole images of one size, a tiled image's interior tiles) is captured after it was seen
GRAPH_AFTER times and replayed; the graphs share one memory pool. A capture is checked before use: CHECK_REPLAYS
replays, each of another input copied in, must equal the eager runs of those inputs, else that shape runs eagerly
and one line says so (on an H200 deform-srcnn's graph replayed the first input right and later ones wrong, a mostly
black image: torchvision's deform_conv2d is not capture-safe). Off by default: measured on an H100 (16 x 512^2 -> x3
folder runs) srcnn-x3 gained 1-2 %, within run-to-run noise.
One lock serialises calls: the slots, the graphs and the stream are shared by every thread using the backend."""
from __future__ import annotations

import contextlib
import importlib.metadata
import math
import sys
import threading
from collections import Counter, OrderedDict
from pathlib import Path

import numpy as np

from models.spec import ModelSpec, output_size
from pipeline.artifacts.identity import check_weights, resolve
from pipeline.backends import pixels as px
from pipeline.backends.base import Backend, BackendStatus, DeviceMemory, check_precision, installed
from pipeline.backends.checks import check_batch, check_scale
from pipeline.errors import PipelineError, first_line, install_command
from pipeline.native.cpu import bf16_problem
from pipeline.native.cuda_driver import gpu_visible, torch_gpu_visible


def channels_last_default(spec: ModelSpec, device: str) -> bool:
    """Whether the torch backend runs `spec` channels-last (NHWC) on `device` when not told.

    NHWC helps on both: cuDNN tensor cores for fp16, and oneDNN on the CPU (SRCNN x3 256->768 on the 2-core Xeon:
    conv2 1x1 and conv3 ~2x faster, whole model ~1.5x than NCHW), except where the model says its ops read NCHW on
    CUDA (ModelSpec.cuda_channels_last). On the CPU it is also what keeps tiles exact: oneDNN runs NHWC on direct
    kernels that sum every output pixel in one order, while NCHW on an AVX2-only CPU takes im2col + GEMM kernels
    whose sums depend on where a pixel falls in the image's width (tiles then differ from the whole by ~5e-8)."""
    return spec.cuda_channels_last or not device.startswith("cuda")


class TorchBackend(Backend):
    GRAPHS = 4  # captured shapes kept (their activations share one memory pool)
    GRAPH_AFTER = 2  # a shape is captured once seen this often: one-off edge crops run eagerly
    CHECK_REPLAYS = 3  # replays of different inputs that must equal eager before a graph is kept

    def __init__(self, model: str, precision: str = "fp32", *, device: str | None = None, weights=None,
                 channels_last: bool | None = None, threads: int | None = None, cuda_graph: bool = False,
                 tf32: bool = False):
        self.precision = check_precision(precision, self.DESCRIPTOR.precisions)
        self.spec = resolve(model)
        self.model_name = self.spec.name
        self.device = device or "auto"
        self.weights = weights
        self.channels_last = channels_last
        self.threads = threads
        self.cuda_graph = bool(cuda_graph)
        self.tf32 = bool(tf32)  # cuDNN's TF32 convolutions for fp32 on CUDA: only when asked
        self.net = None
        self._run = None  # models.registry.run once load() imported PyTorch
        self._lock = threading.RLock()
        self._slots = None  # pixels.PixelSlots, made at load for the device
        self._stream = None  # the CUDA stream every call runs on
        self._tables: dict[np.dtype, object] = {}  # sample -> float tables on the device
        self._graphs: OrderedDict = OrderedDict()  # input shape -> (graph, static input, static output)
        self._seen: Counter = Counter()  # input shape -> eager runs (cuda_graph: captured at GRAPH_AFTER)
        self._pool = None  # the graphs' shared memory pool
        self._uncapturable: set = set()  # shapes whose capture failed or replayed wrong: they run eagerly
        self._bytes_per_px: float | None = None

    def model_file(self) -> Path:
        return check_weights(self.spec, self.weights)

    def model_options(self) -> dict:
        return {"weights": self.weights}

    def files(self, scale: float) -> list[Path]:
        """The weights file it runs (--weights, or the registered model's): a Ray node may have no `make weights`."""
        return [self.model_file()]

    @classmethod
    def planned_files(cls, model: str, precision: str, scale: float, options: dict) -> list[Path] | None:
        try:
            return [check_weights(resolve(model), options.get("weights"))]
        except PipelineError:
            return None

    @classmethod
    def status(cls, spec: ModelSpec, precision: str, *, onnx=None, engine=None, weights=None) -> BackendStatus:
        if onnx is not None or engine is not None:
            return cls.no("runs the registered PyTorch model, not an ONNX file or engine")
        if not installed("torch"):
            return cls.no(f"PyTorch is not installed (the export extra: {install_command('export')})")
        if not spec.registered:
            return cls.no(f"model '{spec.name}' is not registered here")
        version = importlib.metadata.version("torch")
        gpu = gpu_visible()
        if gpu[0]:
            return cls.ok(f"PyTorch {version} on cuda ({gpu[1]})")
        if precision == "fp16":  # why there is no GPU: availability.no_gpu_line, once for every backend
            return cls.no("fp16 needs a CUDA GPU")
        if precision == "bf16" and (why := bf16_problem()):
            return cls.no(why)
        return cls.ok(f"PyTorch {version} on cpu")

    def load(self) -> TorchBackend:
        import torch

        from models.registry import WeightsError, load_model, run  # PyTorch's side: imported with torch, here

        check_weights(self.spec, self.weights)

        gpu, why = torch_gpu_visible()
        if self.device == "auto":
            self.device = "cuda" if gpu else "cpu"
        if self.device.startswith("cuda") and not gpu:
            raise PipelineError(f"torch: device {self.device} requested but PyTorch has no CUDA GPU ({why})")
        if self.precision == "fp16" and not self.device.startswith("cuda"):
            raise PipelineError("torch: fp16 needs a CUDA GPU (PyTorch's CPU half convolutions are slow); "
                                "use --precision fp32 on the CPU")
        if self.precision == "bf16" and not self.device.startswith("cuda") and (why := bf16_problem()):
            raise PipelineError(f"torch bf16 on the CPU: {why}")
        if self.threads:
            torch.set_num_threads(int(self.threads))
        try:
            net = load_model(self.model_name, self.weights, device=self.device)
        except WeightsError as e:
            raise PipelineError(str(e)) from None
        if self.channels_last is None:
            self.channels_last = channels_last_default(self.spec, self.device)
        if self.precision == "fp16":
            net = net.half()
        if self.channels_last:
            net = net.to(memory_format=torch.channels_last)
        self.net = net
        self._run = run  # the registry's forward (models.registry.run), bound with the net it runs
        if self.cuda_graph and not self.device.startswith("cuda"):
            raise PipelineError("torch: cuda_graph needs a CUDA device")
        self._slots = px.PixelSlots(self.device, self._lock)
        if self.device.startswith("cuda"):
            self._stream = torch.cuda.Stream(device=self.device)
        if self.precision == "bf16":
            self._probe_bf16()
        return self

    def _probe_bf16(self) -> None:
        """A net with an op that has no bf16 kernel on this device (torchvision's CPU deform_conv2d) fails here, in
        one line, not on the first image."""
        x = np.zeros((1, 3, 24, 24), np.float32)
        try:
            self.infer(x, self.spec.default_scale)
        except RuntimeError as e:
            raise PipelineError(f"torch bf16: {self.model_name} has an operation without a bf16 kernel on "
                                f"{self.device} ({first_line(e)}); use fp32, or openvino for bf16") from None

    @contextlib.contextmanager
    def _on_device(self):
        """This backend's lock, stream, inference mode and fp32 math (IEEE unless tf32=True) around one call; the
        math flags are process-wide in torch, so they are set for the call and restored after it."""
        import torch

        with self._lock, torch.inference_mode():
            if self._stream is None:
                yield
                return
            conv, matmul = torch.backends.cudnn.conv, torch.backends.cuda.matmul
            saved = conv.fp32_precision, matmul.fp32_precision
            conv.fp32_precision = matmul.fp32_precision = "tf32" if self.tf32 else "ieee"
            try:
                with torch.cuda.stream(self._stream):
                    yield
            finally:
                conv.fp32_precision, matmul.fp32_precision = saved

    def infer(self, batch: np.ndarray, scale: float) -> np.ndarray:
        import torch

        if self.net is None:
            raise PipelineError("torch backend used before load()")
        shape = check_batch(batch, self.spec, scale, self.name)
        with self._on_device():
            x = torch.from_numpy(np.ascontiguousarray(batch)).to(self.device)
            y = self._forward(x, scale, (shape.out_h, shape.out_w))
            return y.float().contiguous().cpu().numpy()

    def _forward(self, x, scale: float, out_hw: tuple[int, int], graphs: bool = True):
        """NCHW float32 on the device -> the net's output (precision and memory format applied here); with
        cuda_graph and `graphs`, a repeated shape replays its graph."""
        import torch

        if self.precision == "fp16":
            x = x.half()
        x = x.contiguous(memory_format=torch.channels_last if self.channels_last else torch.contiguous_format)
        # no weight cache: a graph captured under autocast would replay the casts' outputs after the cache freed
        # them at the context's exit (torch's CUDA-graph notes: AMP in a capture needs cache_enabled=False)
        bf16 = torch.autocast(self.device.split(":")[0], dtype=torch.bfloat16, cache_enabled=False) \
            if self.precision == "bf16" else contextlib.nullcontext()
        with bf16:  # convolutions in bf16, accumulated in fp32; our sr ops keep their input's fp32
            y = self._replay(x, scale) if self.cuda_graph and graphs else self._run(self.net, self.spec, x, scale)
        if tuple(y.shape[-2:]) != out_hw:
            raise PipelineError(f"torch: output {tuple(y.shape)} does not match the expected {out_hw[0]}x{out_hw[1]}")
        return y

    def forward_on_device(self, x, scale: float):
        """The net alone on an NCHW float32 tensor already on this backend's device, as every call runs it (its
        precision, memory format, stream and math flags), eager: what the GPU scoreboard times as the bare net."""
        h, w = x.shape[-2:]
        with self._on_device():
            return self._forward(x, scale, output_size(h, w, check_scale(self.spec, scale)), graphs=False)

    def _replay(self, x, scale: float):
        """The net as a CUDA graph for this input shape and scale once the shape repeats (GRAPH_AFTER sightings;
        before that, eager), the graphs sharing one memory pool: they replay one at a time on this stream."""
        key = (tuple(x.shape), x.dtype, float(scale))
        if key not in self._graphs:
            self._seen[key] += 1
            if self._seen[key] < self.GRAPH_AFTER or key in self._uncapturable or not self._capture(key, x, scale):
                return self._run(self.net, self.spec, x, scale)
        self._graphs.move_to_end(key)
        graph, static_x, static_y = self._graphs[key]
        static_x.copy_(x)
        graph.replay()
        return static_y

    def _capture(self, key, x, scale: float) -> bool:
        """Capture the net for this shape into the shared pool and check CHECK_REPLAYS replays, each of another
        input copied in the way `_replay` does, against the eager run of that input; False (and eager from then on
        for this shape, said in one line) when the capture fails or a replay gives other values (an op that is not
        capture-safe: a host sync, an allocation or a launch off the capturing stream, state kept between runs)."""
        import torch

        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        static_x = x.clone()
        # warm-up and capture on our own stream (never the default one, as capture requires); the shape
        # already ran eagerly here, so these runs warm it and give the values the replays must reproduce
        inputs = _replay_inputs(x, self.CHECK_REPLAYS)
        expected = [self._run(self.net, self.spec, v, scale).clone() for v in inputs]
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, pool=self._pool, stream=self._stream):
                static_y = self._run(self.net, self.spec, static_x, scale)
            wrong = _first_wrong_replay(graph, static_x, static_y, inputs, expected)
        except RuntimeError as e:
            return self._drop_graph(key, f"its capture failed ({first_line(e)})")
        if wrong is not None:
            return self._drop_graph(key, f"replay {wrong + 1} of {len(inputs)} differed from the eager run")
        self._graphs[key] = (graph, static_x, static_y)
        while len(self._graphs) > self.GRAPHS:
            self._graphs.popitem(last=False)
        return True

    def _drop_graph(self, key, why: str) -> bool:
        self._uncapturable.add(key)
        print(f"{self.name}: no CUDA graph for {self.model_name} input {list(key[0])} ({why}): it runs eagerly",
              file=sys.stderr)
        return False

    # -- integer pixels in and out -------------------------------------------------------------------------

    def infer_pixels(self, pixels: np.ndarray, scale: float, out=None) -> np.ndarray:
        return self.submit_pixels(pixels, scale).result(out)

    def submit_pixels(self, pixels: np.ndarray, scale: float) -> px.Pending:
        """Integers up through a pinned slot, converted (BGR -> RGB on the device), the net, converted back and
        queued for download into the slot; returns at once on CUDA (collect with `result`)."""
        import torch

        if self.net is None:
            raise PipelineError("torch backend used before load()")
        px.check_pixels(pixels, self.name)
        n, h, w, _ = pixels.shape
        out_hw = output_size(h, w, check_scale(self.spec, scale))
        with self._on_device():
            if pixels.dtype not in self._tables:
                self._tables[pixels.dtype] = px.unit_table(pixels.dtype, self.device)
            slot, d_px = self._slots.upload(pixels)
            y = self._forward(px.torch_to_unit(d_px, self._tables[pixels.dtype]), scale, out_hw)
            samples = torch.empty((n, *out_hw, 3), dtype=d_px.dtype, device=self.device)
            return self._slots.download(slot, samples, px.torch_to_samples(y, samples))

    def device_memory(self) -> DeviceMemory | None:
        """On CUDA: free memory now, and the net's peak working memory per output pixel, measured once on a
        128x128 input at the model's own scale."""
        import torch

        if not self.device.startswith("cuda") or self.net is None:
            return None
        if self._bytes_per_px is None:
            side, scale = 128, float(self.spec.default_scale)
            with self._on_device():
                x = torch.rand((1, 3, side, side), device=self.device)
                torch.cuda.synchronize(self.device)
                base = torch.cuda.memory_allocated(self.device)
                torch.cuda.reset_peak_memory_stats(self.device)
                self._forward(x, scale, output_size(side, side, scale), graphs=False)  # never a graph slot
                torch.cuda.synchronize(self.device)
            peak = torch.cuda.max_memory_allocated(self.device) - base
            self._bytes_per_px = max(peak, 1) / math.prod(output_size(side, side, scale))
        free, _total = torch.cuda.mem_get_info(self.device)
        return DeviceMemory(int(free), float(self._bytes_per_px))

    def describe(self) -> str:
        extra = (", channels_last" if self.channels_last else "") + (", CUDA graphs" if self.cuda_graph else "")
        if self.device.startswith("cuda") and self.precision == "fp32":
            extra += f", TF32 {'on' if self.tf32 else 'off'}"
        return f"torch ({self.device}, {self.precision}{extra})"


def _replay_inputs(x, count: int) -> list:
    """`count` different inputs with x's shape, dtype and strides (so eager runs the same kernels): x itself, then
    x mirrored and shifted, in [0, 1] like pixels."""
    import torch

    got = [x]
    for i in range(1, count):
        v = torch.empty_like(x)  # x's memory format (channels_last or not)
        v.copy_(x.flip(-1).roll(i, dims=-2) if i % 2 else x.roll(i, dims=-1).mul(0.5))
        got.append(v)
    return got


def _first_wrong_replay(graph, static_x, static_y, inputs: list, expected: list) -> int | None:
    """Replays `graph` once per input copied into static_x; the index of the first whose output is not bit-equal
    to eager's, else None. Between replays the output is overwritten with NaN, as its consumer does
    (pixels.torch_to_samples works in place), so a graph that leans on its last output is caught too."""
    for i, (v, want) in enumerate(zip(inputs, expected, strict=True)):
        static_x.copy_(v)
        graph.replay()
        if not bool((static_y == want).all()):
            return i
        static_y.fill_(float("nan"))
    return None
