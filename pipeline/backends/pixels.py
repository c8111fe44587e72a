"""Integer pixels <-> model tensors: the one rule for how samples become model input and how model output
becomes samples again, in numpy (the CPU path) and in torch (any device), with identical bytes.

Pixels are NHWC in OpenCV's BGR order, uint8 or uint16 (what decoders give and encoders take). Model tensors are
NCHW float RGB in [0, 1].
- In: sample / max as a float32 division (`img.astype(float32) / 255`). Torch reads it from a table that numpy
  computed (`unit_table`), so no device's division or reciprocal shortcut can change a bit.
- Out: float32(y) * max, rounded half to even (np.rint = torch.round), clipped to [0, max], cast.
"""
from __future__ import annotations

import math

import numpy as np

GRAY_WEIGHTS = np.array([0.299, 0.587, 0.114], dtype=np.float32)  # BT.601 luma (cv2's RGB2GRAY)


def max_value(dtype) -> float:
    """Full scale of a sample type: 255 or 65535."""
    return 65535.0 if np.dtype(dtype) == np.uint16 else 255.0


def depth_dtype(depth: int) -> np.dtype:
    return np.dtype(np.uint16 if depth == 16 else np.uint8)


def check_pixels(batch, who: str = "") -> None:
    """An NHWC BGR uint8/uint16 batch, or one PipelineError line (before anything is launched)."""
    from pipeline.errors import PipelineError

    who = f"{who}: " if who else ""
    if not isinstance(batch, np.ndarray) or batch.ndim != 4 or batch.shape[3] != 3 or min(batch.shape) < 1:
        raise PipelineError(f"{who}expected an NHWC BGR pixel batch (N, H, W, 3), got "
                            f"{getattr(batch, 'shape', type(batch).__name__)}")
    if batch.dtype not in (np.uint8, np.uint16):
        raise PipelineError(f"{who}pixels must be uint8 or uint16, got {batch.dtype}")


# -- numpy: the CPU path ---------------------------------------------------------------------------------

def to_unit(pixels: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """HxWx3 BGR (or NHWC) integer samples -> float32 CHW (NCHW) RGB in [0, 1]."""
    lead = pixels.shape[:-3]
    h, w = pixels.shape[-3:-1]
    f = np.empty((*lead, 3, h, w), dtype=np.float32) if out is None else out
    for c in range(3):  # BGR -> RGB, one plane at a time
        np.divide(pixels[..., 2 - c], np.float32(max_value(pixels.dtype)), out=f[..., c, :, :], dtype=np.float32)
    return f


def round_clip(x: np.ndarray, depth: int, out: np.ndarray) -> np.ndarray:
    """float in [0, 1] -> float32 integer sample values in `out`."""
    maxv = np.float32(65535.0 if depth == 16 else 255.0)
    np.multiply(x, maxv, out=out)
    np.rint(out, out=out)
    np.clip(out, 0, maxv, out=out)
    return out


def quantize(x: np.ndarray, depth: int) -> np.ndarray:
    """float in [0, 1] -> integer samples (uint8 or uint16), same shape."""
    return round_clip(x, depth, np.empty(np.shape(x), dtype=np.float32)).astype(depth_dtype(depth))


def to_samples(y: np.ndarray, depth: int, out: np.ndarray | None = None) -> np.ndarray:
    """float CHW (NCHW) RGB model output -> HxWx3 (NHWC) BGR samples, in `out` when given."""
    lead, (h, w) = y.shape[:-3], y.shape[-2:]
    if out is None:
        out = np.empty((*lead, h, w, 3), dtype=depth_dtype(depth))
    plane = np.empty((*lead, h, w), dtype=np.float32)  # one scratch plane for the three channels
    for c in range(3):
        out[..., 2 - c] = round_clip(y[..., c, :, :], depth, plane)
    return out


def to_gray(y: np.ndarray, depth: int) -> np.ndarray:
    """float CHW RGB -> HxW gray samples: BT.601 luma in float, then the single rounding."""
    return quantize(np.tensordot(GRAY_WEIGHTS, y, axes=1), depth)


def swap_rb(src: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """NHWC BGR <-> RGB (one OpenCV pass per image; `out` may be `src`). The device path swaps on the host:
    a fifth of the time of a torch flip on the CPU, and the device then reads and writes plain NHWC."""
    import cv2

    out = np.empty(src.shape, src.dtype) if out is None else out
    for i in range(src.shape[0]):
        cv2.cvtColor(src[i], cv2.COLOR_BGR2RGB, dst=out[i])
    return out


# -- torch: the same rule on the model's device -----------------------------------------------------------

class PinnedStaging:
    """Page-locked host buffers, one per name, reused across calls and grown only for a larger batch: copies
    between them and the device are asynchronous, and nothing is pinned (slow) per image."""

    def __init__(self):
        self._buffers: dict[str, object] = {}

    def get(self, key: str, shape: tuple[int, ...], dtype):
        import torch

        need = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
        buf = self._buffers.get(key)
        if buf is None or buf.numel() < need:
            buf = torch.empty(need, dtype=torch.uint8).pin_memory()
            self._buffers[key] = buf
        return buf[:need].view(dtype).view(shape)


def torch_dtype(dtype):
    import torch

    return torch.uint16 if np.dtype(dtype) == np.uint16 else torch.uint8


def unit_table(dtype, device):
    """float32 [max + 1]: sample v -> v / max, computed by numpy (the CPU path's values) and kept on `device`."""
    import torch

    maxv = max_value(dtype)
    return torch.from_numpy(np.arange(int(maxv) + 1, dtype=np.float32) / np.float32(maxv)).to(device)


def torch_to_unit(rgb, table):
    """NHWC RGB integer tensor -> NCHW float32 RGB in [0, 1] with channels_last strides (no transpose copy)."""
    import torch

    return table[rgb.to(torch.int32)].permute(0, 3, 1, 2)


def torch_to_samples(y, out) -> None:
    """NCHW float model output -> `out`, an NHWC RGB uint8/uint16 tensor on the same device."""
    import torch

    maxv = 65535.0 if out.dtype == torch.uint16 else 255.0
    z = y.float().mul(maxv).round_().clamp_(0.0, maxv)  # a new tensor: the model's output is left alone
    out.copy_(z.permute(0, 2, 3, 1))  # a plain cast when the net ran channels_last
