"""PyTorch eager runner: CPU, or CUDA when present; fp16 only on CUDA. PyTorch is optional at run time (the
`export` extra), so it is imported only when this backend loads.

`infer_pixels` takes integer pixels: on CUDA they are copied to the device through pinned, reused staging
buffers as uint8/uint16 (a quarter of float32's bytes), converted there by pipeline.backends.pixels' rule
and copied back as integers; on the CPU the same torch code runs on CPU tensors (which is how its bytes
are tested against the numpy path). With `cuda_graph=True` the net is captured once per input shape
(`torch.cuda.CUDAGraph`) and replayed; not yet measured on a GPU, so off by default."""
from __future__ import annotations

import importlib.metadata
import math
from collections import OrderedDict

import numpy as np

from models.spec import ModelSpec, output_size
from pipeline.artifacts.identity import check_weights, resolve
from pipeline.backends import pixels as px
from pipeline.backends.base import Backend, BackendStatus, DeviceMemory, check_precision, installed
from pipeline.backends.checks import check_batch, check_scale
from pipeline.errors import PipelineError, install_command
from pipeline.native.cuda_driver import gpu_visible, torch_gpu_visible


class TorchBackend(Backend):
    name = "torch"
    OPTIONS = frozenset({"device", "weights", "channels_last", "threads", "cuda_graph"})
    GRAPHS = 4  # captured shapes kept (each holds its own activations on the device)

    def __init__(self, model: str, precision: str = "fp32", *, device: str | None = None, weights=None,
                 channels_last: bool | None = None, threads: int | None = None, cuda_graph: bool = False):
        self.precision = check_precision(precision)
        self.spec = resolve(model)
        self.model_name = self.spec.name
        self.device = device or "auto"
        self.weights = weights
        self.channels_last = channels_last
        self.threads = threads
        self.cuda_graph = bool(cuda_graph)
        self.net = None
        self._staging = px.PinnedStaging()
        self._tables: dict[np.dtype, object] = {}  # sample -> float tables on the device
        self._graphs: OrderedDict = OrderedDict()  # input shape -> (graph, static input, static output)
        self._bytes_per_px: float | None = None

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
        if precision == "fp16":
            return cls.no("fp16 needs a CUDA GPU; " + gpu[1])
        return cls.ok(f"PyTorch {version} on cpu ({gpu[1]})")

    def load(self) -> TorchBackend:
        import torch

        from models.registry import WeightsError, load_model

        check_weights(self.spec, self.weights)

        gpu, why = torch_gpu_visible()
        if self.device == "auto":
            self.device = "cuda" if gpu else "cpu"
        if self.device.startswith("cuda") and not gpu:
            raise PipelineError(f"torch: device {self.device} requested but PyTorch has no CUDA GPU ({why})")
        if self.precision == "fp16" and not self.device.startswith("cuda"):
            raise PipelineError("torch: fp16 needs a CUDA GPU (PyTorch's CPU half convolutions are slow); "
                                "use --precision fp32 on the CPU")
        if self.threads:
            torch.set_num_threads(int(self.threads))
        try:
            net = load_model(self.model_name, self.weights, device=self.device)
        except WeightsError as e:
            raise PipelineError(str(e)) from None
        if self.channels_last is None:
            # NHWC helps on both: cuDNN tensor cores for fp16, and oneDNN on the CPU (SRCNN x3 256->768 on the
            # 2-core Xeon: conv2 1x1 and conv3 ~2x faster, whole model ~1.5x than NCHW).
            self.channels_last = True
        if self.precision == "fp16":
            net = net.half()
        if self.channels_last:
            net = net.to(memory_format=torch.channels_last)
        self.net = net
        if self.cuda_graph and not self.device.startswith("cuda"):
            raise PipelineError("torch: cuda_graph needs a CUDA device")
        return self

    def infer(self, batch: np.ndarray, scale: float) -> np.ndarray:
        import torch


        if self.net is None:
            raise PipelineError("torch backend used before load()")
        shape = check_batch(batch, self.spec, scale, self.name)
        x = torch.from_numpy(np.ascontiguousarray(batch)).to(self.device)
        with torch.inference_mode():
            y = self._forward(x, scale, (shape.out_h, shape.out_w))
        return y.float().contiguous().cpu().numpy()

    def _forward(self, x, scale: float, out_hw: tuple[int, int]):
        """NCHW float32 on the device -> the net's output (precision and memory format applied here)."""
        import torch

        from models.registry import run

        if self.precision == "fp16":
            x = x.half()
        x = x.contiguous(memory_format=torch.channels_last if self.channels_last else torch.contiguous_format)
        y = self._replay(x, scale) if self.cuda_graph else run(self.net, self.spec, x, scale)
        if tuple(y.shape[-2:]) != out_hw:
            raise PipelineError(f"torch: output {tuple(y.shape)} does not match the expected {out_hw[0]}x{out_hw[1]}")
        return y

    def _replay(self, x, scale: float):
        """The net as a CUDA graph captured for this input shape and scale (captured on first sight)."""
        import torch

        from models.registry import run

        key = (tuple(x.shape), x.dtype, float(scale))
        if key not in self._graphs:
            static_x = x.clone()
            side = torch.cuda.Stream(device=self.device)  # warm-up off the default stream, as capture requires
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):
                    run(self.net, self.spec, static_x, scale)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                static_y = run(self.net, self.spec, static_x, scale)
            self._graphs[key] = (graph, static_x, static_y)
            while len(self._graphs) > self.GRAPHS:
                self._graphs.popitem(last=False)
        self._graphs.move_to_end(key)
        graph, static_x, static_y = self._graphs[key]
        static_x.copy_(x)
        graph.replay()
        return static_y

    # -- integer pixels in and out -------------------------------------------------------------------------

    def infer_pixels(self, pixels: np.ndarray, scale: float) -> np.ndarray:
        import torch

        if self.net is None:
            raise PipelineError("torch backend used before load()")
        px.check_pixels(pixels, self.name)
        n, h, w, _ = pixels.shape
        out_hw = output_size(h, w, check_scale(self.spec, scale))
        cuda = self.device.startswith("cuda")
        if cuda:  # integers through a pinned buffer: an asynchronous copy of a quarter of float32's bytes
            staged = self._staging.get("in", (n, h, w, 3), px.torch_dtype(pixels.dtype))
            px.swap_rb(pixels, staged.numpy())
        else:
            staged = torch.from_numpy(px.swap_rb(pixels))
        if pixels.dtype not in self._tables:
            self._tables[pixels.dtype] = px.unit_table(pixels.dtype, self.device)
        with torch.inference_mode():
            x = px.torch_to_unit(staged.to(self.device, non_blocking=True), self._tables[pixels.dtype])
            y = self._forward(x, scale, out_hw)
            out = torch.empty((n, *out_hw, 3), dtype=staged.dtype, device=self.device)
            px.torch_to_samples(y, out)
            if not cuda:
                return px.swap_rb(out.numpy(), out.numpy())
            back = self._staging.get("out", tuple(out.shape), out.dtype)
            back.copy_(out, non_blocking=True)
            torch.cuda.current_stream(self.device).synchronize()
        return px.swap_rb(back.numpy())  # RGB -> BGR, and out of the pinned buffer the next call reuses

    def device_memory(self) -> DeviceMemory | None:
        """On CUDA: free memory now, and the net's peak working memory per output pixel, measured once on a
        128x128 input at the model's own scale."""
        import torch

        if not self.device.startswith("cuda") or self.net is None:
            return None
        if self._bytes_per_px is None:
            side, scale = 128, float(self.spec.default_scale)
            x = torch.rand((1, 3, side, side), device=self.device)
            torch.cuda.synchronize(self.device)
            base = torch.cuda.memory_allocated(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            with torch.inference_mode():
                self._forward(x, scale, output_size(side, side, scale))
            torch.cuda.synchronize(self.device)
            peak = torch.cuda.max_memory_allocated(self.device) - base
            self._bytes_per_px = max(peak, 1) / math.prod(output_size(side, side, scale))
        free, _total = torch.cuda.mem_get_info(self.device)
        return DeviceMemory(int(free), float(self._bytes_per_px))

    def describe(self) -> str:
        extra = (", channels_last" if self.channels_last else "") + (", CUDA graphs" if self.cuda_graph else "")
        return f"torch ({self.device}, {self.precision}{extra})"
