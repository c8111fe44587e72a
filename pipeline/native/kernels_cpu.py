"""NumPy/torch front end of libsr_kernels_cpu.so (ctypes): the sr ops computed by our own CPU kernels.

`dynamic_resize(x, size)` and `deform_conv2d(input, weight, offset, ...)` take np.ndarray or torch.Tensor (NCHW),
compute in float32 and return float32 np.ndarray. `emulate_fp16=True` rounds what FP16 I/O rounds on the GPU
(inputs, im2col columns, outputs) so FP16 engines can be checked on the CPU.
"""
from __future__ import annotations

import ctypes
import functools
from collections.abc import Sequence

import numpy as np

from pipeline.errors import PipelineError
from pipeline.native.libraries import cpu_kernels_library, load_library

ABI_VERSION = 2  # 2: sr_deform_conv2d_min_workspace
_F32P = ctypes.POINTER(ctypes.c_float)
_INT = ctypes.c_int


@functools.cache
def _lib() -> ctypes.CDLL:
    path = cpu_kernels_library()
    lib = load_library(path)
    lib.sr_kernels_abi_version.restype = _INT
    found = lib.sr_kernels_abi_version()
    if found != ABI_VERSION:
        raise PipelineError(f"{path} has C API version {found}, expected {ABI_VERSION}: rebuild with `make plugins`")
    lib.sr_last_error.restype = ctypes.c_char_p
    lib.sr_dynamic_resize_f32.argtypes = [_F32P, _F32P] + [_INT] * 7
    lib.sr_dynamic_resize_f32.restype = _INT
    lib.sr_deform_conv2d_f32.argtypes = [_F32P] * 6 + [_INT] * 18 + [ctypes.c_size_t]
    lib.sr_deform_conv2d_f32.restype = _INT
    lib.sr_deform_conv2d_chunk.argtypes = [_INT] * 6 + [ctypes.c_size_t] * 2 + [ctypes.POINTER(_INT)] * 2
    lib.sr_deform_conv2d_chunk.restype = _INT
    lib.sr_deform_conv2d_min_workspace.argtypes = [_INT] * 6 + [ctypes.c_size_t, _INT]
    lib.sr_deform_conv2d_min_workspace.restype = ctypes.c_size_t
    lib.sr_round_to_half.argtypes = [_F32P, ctypes.c_size_t]
    lib.sr_round_to_half.restype = None
    return lib


def library() -> ctypes.CDLL:
    """The loaded, version-checked kernel library; PipelineError (one line) when it is missing or foreign."""
    return _lib()


def _as_f32(x, name: str, ndim: int | None = None) -> np.ndarray:
    """Contiguous float32 copy/view of an ndarray or torch tensor."""
    if hasattr(x, "detach"):  # torch.Tensor, without importing torch here
        x = x.detach().cpu().float().numpy()
    arr = np.asarray(x)
    if not np.issubdtype(arr.dtype, np.floating):
        raise PipelineError(f"{name} must be a floating-point array, got {arr.dtype}")
    if ndim is not None and arr.ndim != ndim:
        raise PipelineError(f"{name} must be {ndim}-D, got shape {tuple(arr.shape)}")
    return np.ascontiguousarray(arr, dtype=np.float32)


def _ptr(a: np.ndarray | None):
    return None if a is None else a.ctypes.data_as(_F32P)


def _check(status: int, what: str) -> None:
    if status != 0:
        msg = _lib().sr_last_error().decode() or f"status {status}"
        raise PipelineError(f"{what} failed: {msg}")


def _pair(v, name: str) -> tuple[int, int]:
    if isinstance(v, (int, np.integer)):
        return int(v), int(v)
    t = tuple(int(i) for i in v)
    if len(t) != 2:
        raise PipelineError(f"{name} must be an int or a pair, got {v!r}")
    return t


def round_to_half(x) -> np.ndarray:
    """float32 values rounded to the nearest float16 (kernel's rounding; equals np.float16 round trip)."""
    a = _as_f32(x, "x").copy()
    _lib().sr_round_to_half(_ptr(a), a.size)
    return a


def dynamic_resize(x, size, *, emulate_fp16: bool = False) -> np.ndarray:
    """Bicubic resize of NCHW `x` to size = (H_out, W_out) (torch bicubic, align_corners=False)."""
    a = _as_f32(x, "x", 4)
    if hasattr(size, "detach"):
        size = size.detach().cpu().numpy()
    s = np.asarray(size).reshape(-1)
    if s.size != 2 or not np.issubdtype(s.dtype, np.integer) and not np.all(np.mod(s, 1) == 0):
        raise PipelineError(f"size must be two integers (H_out, W_out), got {size!r}")
    h_out, w_out = (int(v) for v in s)
    if h_out <= 0 or w_out <= 0:
        raise PipelineError(f"size must be positive, got ({h_out}, {w_out})")
    n, c, h, w = a.shape
    if h == 0 or w == 0:
        raise PipelineError(f"cannot resize an empty image of shape {tuple(a.shape)}")
    out = np.empty((n, c, h_out, w_out), np.float32)
    _check(_lib().sr_dynamic_resize_f32(_ptr(a), _ptr(out), n, c, h, w, h_out, w_out, int(emulate_fp16)),
           "dynamic_resize")
    return out


def _pads(padding) -> tuple[int, int, int, int]:
    """(top, left, bottom, right) from an int, (pad_h, pad_w) or ONNX pads (h_begin, w_begin, h_end, w_end)."""
    if isinstance(padding, (int, np.integer)):
        p = int(padding)
        return p, p, p, p
    t = tuple(int(i) for i in padding)
    if len(t) == 2:
        return t[0], t[1], t[0], t[1]
    if len(t) == 4:
        return t
    raise PipelineError(f"padding must be an int, a pair or 4 ONNX pads, got {padding!r}")


def deform_conv2d(input, weight, offset, bias=None, mask=None, stride: int | Sequence[int] = 1,
                  padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, groups: int | None = None,
                  offset_groups: int | None = None, emulate_fp16: bool = False,
                  column_budget: int = 0) -> np.ndarray:
    """torchvision.ops.deform_conv2d on our CPU kernels.

    groups / offset_groups default to what the shapes imply (C / weight.shape[1], offset.shape[1] / (2 kH kW)) and
    are checked against them when given. column_budget (bytes, 0 = default) sets the im2col chunk size.
    """
    x = _as_f32(input, "input", 4)
    w = _as_f32(weight, "weight", 4)
    off = _as_f32(offset, "offset", 4)
    n, c, h, wd = x.shape
    c_out, c_per_group, kh, kw = w.shape
    sh, sw = _pair(stride, "stride")
    dh, dw = _pair(dilation, "dilation")
    pt, pl, pb, pr = _pads(padding)
    if min(sh, sw, dh, dw) <= 0 or min(pt, pl, pb, pr) < 0:
        raise PipelineError("stride/dilation must be positive and padding non-negative")
    if c_per_group <= 0 or kh <= 0 or kw <= 0 or c % c_per_group:
        raise PipelineError(f"weight shape {tuple(w.shape)} does not fit {c} input channels")
    g = c // c_per_group
    if groups is not None and groups != g:
        raise PipelineError(f"groups={groups} but weight shape {tuple(w.shape)} implies {g} for {c} input channels")
    if c_out % g:
        raise PipelineError(f"groups={g} must divide output channels {c_out}")
    h_out = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    w_out = (wd + pl + pr - dw * (kw - 1) - 1) // sw + 1
    if h_out <= 0 or w_out <= 0:
        raise PipelineError(f"output would be empty: input {h}x{wd}, kernel {kh}x{kw}, pads {(pt, pl, pb, pr)}")
    taps = kh * kw
    if off.shape[0] != n or off.shape[1] % (2 * taps) or off.shape[1] == 0 or off.shape[2:] != (h_out, w_out):
        raise PipelineError(f"offset shape {tuple(off.shape)} must be [{n}, 2*offset_groups*{taps}, {h_out}, {w_out}]")
    og = off.shape[1] // (2 * taps)
    if offset_groups is not None and offset_groups != og:
        raise PipelineError(f"offset_groups={offset_groups} but offset has {off.shape[1]} channels ({og} groups)")
    if c % og:
        raise PipelineError(f"offset_groups={og} must divide input channels {c}")
    m = None
    if mask is not None:
        m = _as_f32(mask, "mask", 4)
        if m.shape != (n, og * taps, h_out, w_out):
            raise PipelineError(f"mask shape {tuple(m.shape)} must be {(n, og * taps, h_out, w_out)}")
    b = None
    if bias is not None:
        b = _as_f32(bias, "bias").reshape(-1)
        if b.size != c_out:
            raise PipelineError(f"bias has {b.size} values, expected {c_out}")
    out = np.empty((n, c_out, h_out, w_out), np.float32)
    status = _lib().sr_deform_conv2d_f32(
        _ptr(x), _ptr(w), _ptr(off), _ptr(m), _ptr(b), _ptr(out), n, c, h, wd, c_out, kh, kw, h_out, w_out,
        sh, sw, pt, pl, dh, dw, g, og, int(emulate_fp16), int(column_budget))
    _check(status, "deform_conv2d")
    return out


def deform_conv2d_chunk(n: int, c_in: int, kh: int, kw: int, h_out: int, w_out: int, elem_size: int = 4,
                        column_budget: int = 0) -> tuple[int, int]:
    """(images, rows) per im2col chunk under the kernels' chunk rule (same function the CUDA launcher uses)."""
    images, rows = _INT(), _INT()
    _check(_lib().sr_deform_conv2d_chunk(n, c_in, kh, kw, h_out, w_out, elem_size, column_budget,
                                         ctypes.byref(images), ctypes.byref(rows)), "deform_conv2d_chunk")
    return images.value, rows.value


def deform_conv2d_min_workspace(n_max: int, c_in: int, kh: int, kw: int, h_out_max: int, w_out_max: int,
                                elem_size: int = 4, fixed_shape: bool = False) -> int:
    """Bytes the DeformConv2d plugin asks TensorRT for (its getWorkspaceSize rule) for a profile whose largest problem
    has these extents; `fixed_shape` when the profile has one shape. 0 for an empty problem."""
    return int(_lib().sr_deform_conv2d_min_workspace(n_max, c_in, kh, kw, h_out_max, w_out_max, elem_size,
                                                     1 if fixed_shape else 0))
