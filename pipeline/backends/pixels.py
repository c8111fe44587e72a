"""Integer pixels <-> model tensors: the one rule for how samples become model input and how model output
becomes samples again, in numpy (the CPU path) and in torch (any device), with identical bytes.

Pixels are NHWC in OpenCV's BGR order, uint8 or uint16 (what decoders give and encoders take). Model tensors are
NCHW float RGB in [0, 1].
- In: sample / max as a float32 division (`img.astype(float32) / 255`). Torch reads it from a table that numpy
  computed (`unit_table`), so no device's division or reciprocal shortcut can change a bit.
- Out: float32(y) * max, rounded half to even (np.rint = torch.round), clipped to [0, max], cast.
- Checked: a NaN would be cast to 0 and an infinity clipped to 0 or max, silently; every conversion out counts, per
  sample, the pixels with a non-finite value (numpy, torch on the device, inside the ONNX pixel graph), and the
  result raises NonFiniteOutput when any has one (pipeline.sr.runner.finite decides what happens then).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from pipeline.errors import PipelineError
from pipeline.native import kernels_cpu

GRAY_WEIGHTS = np.array([0.299, 0.587, 0.114], dtype=np.float32)  # BT.601 luma (cv2's RGB2GRAY)


def max_value(dtype) -> float:
    """Full scale of a sample type: 255 or 65535."""
    return 65535.0 if np.dtype(dtype) == np.uint16 else 255.0


def depth_dtype(depth: int) -> np.dtype:
    return np.dtype(np.uint16 if depth == 16 else np.uint8)


def unit_values(dtype) -> np.ndarray:
    """float32 [max + 1]: sample v -> v / max, the in-rule as a table (torch and ONNX gather from it, so no
    device's division can change a bit)."""
    maxv = max_value(dtype)
    return np.arange(int(maxv) + 1, dtype=np.float32) / np.float32(maxv)


def check_pixels(batch, who: str = "") -> None:
    """An NHWC BGR uint8/uint16 batch, or one PipelineError line (before anything is launched)."""
    who = f"{who}: " if who else ""
    if not isinstance(batch, np.ndarray) or batch.ndim != 4 or batch.shape[3] != 3 or min(batch.shape) < 1:
        raise PipelineError(f"{who}expected an NHWC BGR pixel batch (N, H, W, 3), got "
                            f"{getattr(batch, 'shape', type(batch).__name__)}")
    if batch.dtype not in (np.uint8, np.uint16):
        raise PipelineError(f"{who}pixels must be uint8 or uint16, got {batch.dtype}")


class NonFiniteOutput(PipelineError):
    """A batch whose model output holds NaN or infinite values: `counts[i]` pixels of sample i have one (0: that
    sample is fine); `samples` is the converted batch (where the caller asked for it: its output views), whose
    affected samples are not usable. `source` (e.g. 'ort fp16') and `place` (e.g. 'tile 2 of 4 ...') are filled in
    by whoever knows them."""

    def __init__(self, counts, samples=None, source: str = "", place: str = ""):
        self.counts = np.asarray(counts, dtype=np.int64).reshape(-1)
        self.samples, self.source, self.place = samples, source, place
        self.note = ""  # what else the reader should know (why it was not re-run at fp32)
        self.repaired: list[int] = []  # samples re-run at fp32 before this was raised (pipeline.sr.runner.finite)
        super().__init__(str(self))

    @property
    def affected(self) -> list[int]:
        return [int(i) for i in np.flatnonzero(self.counts)]

    def __str__(self) -> str:
        where = self.place or (f"sample(s) {', '.join(map(str, self.affected))} of {len(self.counts)}"
                               if len(self.counts) > 1 else "the output")
        who = f"{self.source} " if self.source else "model "
        note = f"; {self.note}" if self.note else ""
        return (f"{who}output is not finite (NaN or inf): {int(self.counts.sum())} pixel(s) in {where}{note}; "
                "nothing written for it")


def nonfinite_pixels(y: np.ndarray) -> np.ndarray | None:
    """Per sample of an NCHW float batch: the pixels with a NaN or infinite value; None when all are finite. One
    sum per sample (a NaN or inf makes it non-finite) finds the common case fast; the exact count runs only then
    (a sum that overflowed on huge finite values counts 0 there)."""
    with np.errstate(over="ignore", invalid="ignore"):  # inf - inf, or a sum past float32: the exact count decides
        if np.isfinite(np.add.reduce(y.reshape(y.shape[0], -1), axis=1)).all():  # y's float32: float64 costs 15x
            return None
    counts = (~np.isfinite(y)).any(axis=1).sum(axis=(1, 2))
    return counts if counts.any() else None


def check_finite(y: np.ndarray, samples=None) -> None:
    """Raise NonFiniteOutput when the NCHW float batch `y` holds a NaN or infinite value."""
    counts = nonfinite_pixels(y)
    if counts is not None:
        raise NonFiniteOutput(counts, samples)


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
    maxv = np.float32(max_value(depth_dtype(depth)))
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
    with np.errstate(invalid="ignore"):  # a NaN's cast: counted by nonfinite_pixels, not warned about here
        for c in range(3):
            out[..., 2 - c] = round_clip(y[..., c, :, :], depth, plane)
    return out


def samples_checked(y: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray | None]:
    """NCHW float RGB model output -> (NHWC BGR samples, nonfinite_pixels' counts or None): to_samples and the check
    in one pass of our C++ kernel for 8-bit samples where libsr_kernels_cpu.so loads (the same bytes; 2.0 ms of CPU
    for a 768x768 image against numpy's 2.9), else numpy's passes."""
    if depth != 8 or y.ndim != 4 or y.shape[1] != 3 or not kernels_cpu.usable():
        return to_samples(y, depth), nonfinite_pixels(y)
    samples, counts = kernels_cpu.to_samples_u8(y)
    return samples, counts if counts.any() else None


def to_gray(y: np.ndarray, depth: int) -> np.ndarray:
    """float CHW RGB -> HxW gray samples: BT.601 luma in float, then the single rounding."""
    return quantize(np.tensordot(GRAY_WEIGHTS, y, axes=1), depth)


def swap_rb(src: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """NHWC BGR <-> RGB (one OpenCV pass per image; `out` may be `src`): for the ONNX pixel graphs' I/O (the torch
    conversions swap on the device)."""
    import cv2

    out = np.empty(src.shape, src.dtype) if out is None else out
    for i in range(src.shape[0]):
        cv2.cvtColor(src[i], cv2.COLOR_BGR2RGB, dst=out[i])
    return out


# -- torch: the same rule on the model's device -----------------------------------------------------------

class Pending:
    """A submitted batch of pixels: `result(out)` waits for it and gives NHWC BGR samples, copied into `out` (N
    arrays of H x W x 3, views allowed: an image's output buffer, its RGB part) when given, else a new array."""

    def result(self, out=None):
        raise NotImplementedError


class Ready(Pending):
    """A batch computed already (the host path); `counts`: its non-finite pixels per sample (raised on result)."""

    def __init__(self, samples: np.ndarray, counts: np.ndarray | None = None):
        self._samples, self._counts = samples, counts

    def result(self, out=None):
        got = self._samples if out is None else copy_out(self._samples, out)
        if self._counts is not None and np.any(self._counts):
            raise NonFiniteOutput(self._counts, got)
        return got


def copy_out(samples: np.ndarray, out):
    for dst, src in zip(out, samples, strict=True):
        np.copyto(dst, src)
    return out


class Buffers:
    """Tensors by name in storage that only grows: asking for a smaller or equal shape (another tile shape, a
    smaller batch) is a view of what is there, so rebinding allocates nothing. On `device`; page-locked host
    memory with `pinned` (copies to and from it are asynchronous, and nothing is pinned, which is slow, per call)."""

    def __init__(self, device="cpu", pinned: bool = False):
        self.device, self.pinned = device, pinned
        self._storage: dict[str, Any] = {}

    def get(self, key: str, shape: tuple[int, ...], dtype):
        import torch

        need = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
        buf = self._storage.get(key)
        if buf is None or buf.numel() < need:
            buf = torch.empty(need, dtype=torch.uint8, device=self.device, pin_memory=self.pinned)
            self._storage[key] = buf
        return buf[:need].view(dtype).view(shape)


class _Slot:
    def __init__(self, events: bool):
        import torch

        self.buffers = Buffers(pinned=events)
        # uploaded: its input buffer may be refilled after it; downloaded: its output buffer holds the result. Both
        # blocking: a wait sleeps until the device signals (a default event's synchronize spins a CPU core, here
        # while the backend's lock is held)
        self.uploaded = torch.cuda.Event(blocking=True) if events else None
        self.downloaded = torch.cuda.Event(blocking=True) if events else None
        self.pending: SlotPending | None = None  # the result still in its output buffer


class SlotPending(Pending):
    def __init__(self, slots: PixelSlots, slot: _Slot, host):
        self._slots, self._slot, self._host = slots, slot, host
        self._copy: np.ndarray | None = None  # taken out of the slot before it was reused
        self._counts: np.ndarray | None = None  # its non-finite pixels per sample, read with the samples

    def result(self, out=None):
        got = self._take(out)
        if np.any(self._counts):
            raise NonFiniteOutput(self._counts, got)
        return got

    def _take(self, out):
        with self._slots.lock:
            if self._slot.pending is self:
                if self._slot.downloaded is not None:
                    self._slot.downloaded.synchronize()
                self._slot.pending = None
                self._counts = self._slot.buffers.get("bad", (len(self._host),), _count_dtype()).numpy().copy()
                if out is not None:
                    return copy_out(self._host.numpy(), out)
                self._copy = self._host.numpy().copy()
            elif self._copy is None:
                raise RuntimeError("this batch's result was already collected into an output")
        return self._copy if out is None else copy_out(self._copy, out)


class PixelSlots:
    """Double-buffered staging of integer pixels between the host and a device stream (pipeline.sr submits the
    next batch before it collects the last): call i fills slot i % 2's page-locked input buffer while the device
    may still be working on call i - 1, and its result waits in that slot's output buffer until collected, then
    is copied straight into the caller's output. CUDA events say when a slot's buffers are free again; buffers
    grow only for a larger batch, so nothing is pinned (slow) per image. On the CPU the same code runs on plain
    tensors without events (how it is tested). Callers hold `lock` (the backend's) around upload..download; a
    result taken by another thread is collected under it too."""

    def __init__(self, device, lock):
        import torch

        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.lock = lock
        self._slots = [_Slot(self.cuda) for _ in range(2)]
        self._next = 0

    def upload(self, pixels: np.ndarray):
        """NHWC BGR samples -> (slot, the same samples on the device), copied on the current stream."""
        slot = self._slots[self._next]
        self._next ^= 1
        if slot.pending is not None:  # its result was never collected: take it out before the buffer is reused
            slot.pending._take(None)  # (checked when its owner collects it)
        if slot.uploaded is not None:
            slot.uploaded.synchronize()  # the previous upload from this buffer has left it
        host = slot.buffers.get("in", pixels.shape, torch_dtype(pixels.dtype))
        np.copyto(host.numpy(), pixels)  # takes views (a crop of a BGRA image)
        if not self.cuda:
            return slot, host
        dev = host.to(self.device, non_blocking=True)
        slot.uploaded.record()
        return slot, dev

    def download(self, slot: _Slot, samples, nonfinite) -> SlotPending:
        """Device samples and their non-finite pixel counts (torch_to_samples') -> the slot's output buffers,
        asynchronously; collected (and checked) by the returned Pending."""
        host = slot.buffers.get("out", tuple(samples.shape), samples.dtype)
        host.copy_(samples, non_blocking=self.cuda)
        slot.buffers.get("bad", tuple(nonfinite.shape), nonfinite.dtype).copy_(nonfinite, non_blocking=self.cuda)
        if slot.downloaded is not None:
            slot.downloaded.record()
        slot.pending = SlotPending(self, slot, host)
        return slot.pending


def _count_dtype():
    import torch

    return torch.int64


def torch_dtype(dtype):
    import torch

    return torch.uint16 if np.dtype(dtype) == np.uint16 else torch.uint8


def unit_table(dtype, device):
    """`unit_values` (computed by numpy: the CPU path's values), kept on `device`."""
    import torch

    return torch.from_numpy(unit_values(dtype)).to(device)


def torch_to_unit(bgr, table):
    """NHWC BGR integer tensor -> NCHW float32 RGB in [0, 1] with channels_last strides (no transpose copy); the
    channel swap runs on the tensor's device, on the integers."""
    import torch

    return table[bgr.to(torch.int32).flip(-1)].permute(0, 3, 1, 2)  # int32 first: torch's uint16 has few kernels


def torch_nonfinite(y):
    """Per sample, the pixels of NCHW `y` with a NaN or inf (int64 [N], on y's device). On the CPU, where torch's
    isfinite costs 100x a sum (48 vs 0.5 ms for 3 x 1152^2), one sum per sample finds the common case first (the
    host reads it at no cost); on a device the count always runs there (no host sync between submit and collect)."""
    import torch

    if y.device.type == "cpu" and bool(torch.isfinite(y.sum(dim=(1, 2, 3), dtype=torch.float32)).all()):
        return torch.zeros(y.shape[0], dtype=torch.int64)
    return torch.isfinite(y).logical_not_().any(dim=1).sum(dim=(1, 2))


def torch_to_samples(y, out):
    """NCHW float RGB model output -> `out`, an NHWC BGR uint8/uint16 tensor on the same device; `y` is consumed.
    Returns, on the device, the pixels of each sample with a non-finite value (int64 [N]): the check runs where
    the output is, and only N numbers travel."""

    maxv = 65535.0 if str(out.dtype) == "torch.uint16" else 255.0
    bad = torch_nonfinite(y)
    # In place: `y` is a scratch output (the net's fresh result, a graph's static output or an engine's bound
    # buffer, each rewritten by the next run); a new 16 MB tensor per 1152^2 image cost more in page faults
    # than the multiplication itself.
    z = y.float().mul_(maxv).round_().clamp_(0.0, maxv)
    for c in range(3):  # RGB -> BGR while casting: one strided copy per channel, no float NHWC copy
        out[..., 2 - c].copy_(z[:, c])
    return bad


# -- ONNX: the same rule inside the graph, for ONNX Runtime's device providers ---------------------------------

PIXELS_IN, PIXELS_OUT, PIXEL_MAX = "pixels", "pixels_out", "pixel_max"
PIXELS_NONFINITE = "pixels_nonfinite"  # float [N]: per sample, the pixels whose output has a NaN or inf


def _onnx_opset(model) -> int:
    return next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))


def _onnx_nonfinite(value: str, opset: int) -> list:
    """Nodes counting, per sample of NCHW float `value`, the pixels with a NaN or inf into PIXELS_NONFINITE: x - x
    is 0 exactly where x is finite; built of ops every provider (TensorRT too) runs."""
    from onnx import TensorProto, helper

    per_pixel = (helper.make_node("ReduceMax", ["px_badf", "px_axis_c"], ["px_badpix"], keepdims=0) if opset >= 18
                 else helper.make_node("ReduceMax", ["px_badf"], ["px_badpix"], axes=[1], keepdims=0))
    return [helper.make_node("Sub", [value, value], ["px_diff"]),
            helper.make_node("Equal", ["px_diff", "px_zero"], ["px_finite"]),
            helper.make_node("Not", ["px_finite"], ["px_bad"]),
            helper.make_node("Cast", ["px_bad"], ["px_badf"], to=TensorProto.FLOAT),
            per_pixel,
            helper.make_node("ReduceSum", ["px_badpix", "px_axes_hw"], [PIXELS_NONFINITE], keepdims=0)]


def onnx_pixel_dtype(dtype, tensorrt: bool = False) -> np.dtype:
    """The integer type a pixel graph's I/O carries for samples of `dtype`: the samples' own, except 16-bit ones
    for TensorRT, which has no UINT16: they travel as int32 (the same values)."""
    dtype = np.dtype(dtype)
    return np.dtype(np.int32) if tensorrt and dtype == np.uint16 else dtype


def onnx_pixel_io(model, dtype, tensorrt: bool = False):
    """A copy of an ONNX model (input 'input' NCHW float, one output) that takes NHWC RGB integer `pixels` and
    gives NHWC RGB integer `pixels_out` of the same type (and `pixels_nonfinite`, the check's counts): Gather from
    `unit_table` (exact on any provider) in
    front, Mul / Round (half to even) / Clip / Transpose / Cast behind. The full scale is a run-time input
    (`pixel_max`), not a constant, so no optimiser can fold the Mul into the net's last convolution and round
    differently. Integers appear only at the two I/O casts (TensorRT takes UINT8 there and nowhere else); with
    `tensorrt` the I/O type is `onnx_pixel_dtype`'s, the gather indices are INT32 (no UINT16, no INT64), and UINT8
    samples are cast to FLOAT before INT32 (TensorRT 11 casts UINT8 to and from FLOAT and HALF only)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    (old_in,) = [i for i in g.input if i.name == "input"]
    (old_out,) = g.output
    in_type = old_in.type.tensor_type.elem_type
    int_type = helper.np_dtype_to_tensor_dtype(onnx_pixel_dtype(dtype, tensorrt))
    index_type = TensorProto.INT32 if tensorrt else TensorProto.INT64
    g.initializer.extend([numpy_helper.from_array(unit_values(dtype), "px_table"),
                          numpy_helper.from_array(np.zeros((), np.float32), "px_zero"),
                          numpy_helper.from_array(np.array([1], np.int64), "px_axis_c"),
                          numpy_helper.from_array(np.array([1, 2], np.int64), "px_axes_hw")])
    # TensorRT converts UINT8 only to and from FLOAT and HALF: its samples reach the INT32 indices through FLOAT
    # (exact: 0..255)
    via_float = tensorrt and int_type == TensorProto.UINT8
    front = [helper.make_node("Cast", [PIXELS_IN], ["px_float"], to=TensorProto.FLOAT)] if via_float else []
    front += [helper.make_node("Cast", ["px_float" if via_float else PIXELS_IN], ["px_index"], to=index_type),
              helper.make_node("Gather", ["px_table", "px_index"], ["px_unit"], axis=0),
              helper.make_node("Transpose", ["px_unit"], ["px_nchw" if in_type != TensorProto.FLOAT else "input"],
                               perm=[0, 3, 1, 2])]
    if in_type != TensorProto.FLOAT:  # an fp16-I/O graph: the CPU path casts the float32 batch the same way
        front.append(helper.make_node("Cast", ["px_nchw"], ["input"], to=in_type))
    back = [helper.make_node("Cast", [old_out.name], ["px_f32"], to=TensorProto.FLOAT),
            *_onnx_nonfinite("px_f32", _onnx_opset(m)),
            helper.make_node("Mul", ["px_f32", PIXEL_MAX], ["px_scaled"]),
            helper.make_node("Round", ["px_scaled"], ["px_round"]),
            helper.make_node("Clip", ["px_round", "px_zero", PIXEL_MAX], ["px_clip"]),
            helper.make_node("Transpose", ["px_clip"], ["px_nhwc"], perm=[0, 2, 3, 1]),
            helper.make_node("Cast", ["px_nhwc"], [PIXELS_OUT], to=int_type)]
    nodes = list(g.node)
    del g.node[:]
    g.node.extend(front + nodes + back)
    inputs = [i for i in g.input if i.name != "input"]
    del g.input[:]
    g.input.extend([helper.make_tensor_value_info(PIXELS_IN, int_type, ["n", "h", "w", 3]), *inputs,
                    helper.make_tensor_value_info(PIXEL_MAX, TensorProto.FLOAT, [])])
    del g.output[:]
    g.output.extend([helper.make_tensor_value_info(PIXELS_OUT, int_type, ["n", "oh", "ow", 3]),
                     helper.make_tensor_value_info(PIXELS_NONFINITE, TensorProto.FLOAT, ["n"])])
    return m
