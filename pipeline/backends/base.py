"""The one inference interface every backend implements (PyTorch, ONNX Runtime, TensorRT, ...)."""
from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np


class Backend(ABC):
    """A loaded model on one runtime.

    `infer` takes an NCHW float32 batch in [0, 1] (RGB) and a scale, returns the NCHW float32 output
    of size round(H*scale) x round(W*scale) (models.registry.output_size). Outputs are not clipped:
    clipping and rounding to the image's bit depth happen once, where images are written.
    """

    name: str        # e.g. "torch", "ort", "ort-sr-kernels", "trt"
    device: str      # e.g. "cpu", "cuda:0"
    precision: str   # "fp32" or "fp16"
    model_name: str

    @abstractmethod
    def load(self) -> Backend:
        """Create sessions/engines; raise PipelineError with one clear line when impossible."""

    @abstractmethod
    def infer(self, batch: np.ndarray, scale: float) -> np.ndarray:
        """Run one batch; validates rank, channels, dtype and scale before launching."""

    def describe(self) -> str:
        return f"{self.name} ({self.device}, {self.precision})"
