"""PyTorch eager runner: CPU, or CUDA when present; fp16 only on CUDA. PyTorch is optional at run time (the
`export` extra), so it is imported only when this backend loads."""
from __future__ import annotations

import importlib.metadata

import numpy as np

from models.spec import ModelSpec
from pipeline.artifacts.identity import check_weights, resolve
from pipeline.backends.base import Backend, BackendStatus, check_precision, installed
from pipeline.backends.checks import check_batch
from pipeline.errors import PipelineError
from pipeline.native.cuda_driver import gpu_visible, torch_gpu_visible


class TorchBackend(Backend):
    name = "torch"
    OPTIONS = frozenset({"device", "weights", "channels_last", "threads"})

    def __init__(self, model: str, precision: str = "fp32", *, device: str | None = None, weights=None,
                 channels_last: bool | None = None, threads: int | None = None):
        self.precision = check_precision(precision)
        self.spec = resolve(model)
        self.model_name = self.spec.name
        self.device = device or "auto"
        self.weights = weights
        self.channels_last = channels_last
        self.threads = threads
        self.net = None

    @classmethod
    def status(cls, spec: ModelSpec, precision: str, *, onnx=None, engine=None, weights=None) -> BackendStatus:
        if onnx is not None or engine is not None:
            return cls.no("runs the registered PyTorch model, not an ONNX file or engine")
        if not installed("torch"):
            return cls.no("PyTorch is not installed (the export extra: pip install 'srdeploy[export]')")
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
        return self

    def infer(self, batch: np.ndarray, scale: float) -> np.ndarray:
        import torch

        from models.registry import run

        if self.net is None:
            raise PipelineError("torch backend used before load()")
        shape = check_batch(batch, self.spec, scale, self.name)
        x = torch.from_numpy(np.ascontiguousarray(batch)).to(self.device)
        if self.precision == "fp16":
            x = x.half()
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        with torch.inference_mode():
            y = run(self.net, self.spec, x, scale)
        if tuple(y.shape[-2:]) != (shape.out_h, shape.out_w):
            raise PipelineError(f"torch: output {tuple(y.shape)} does not match the expected "
                                f"{shape.out_h}x{shape.out_w}")
        return y.float().contiguous().cpu().numpy()

    def describe(self) -> str:
        extra = ", channels_last" if self.channels_last else ""
        return f"torch ({self.device}, {self.precision}{extra})"
