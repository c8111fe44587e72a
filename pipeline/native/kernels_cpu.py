"""NumPy/torch front end of libsr_kernels_cpu.so (ctypes): the sr ops computed by our own CPU kernels.

`dynamic_resize(x, size)` and `deform_conv2d(input, weight, offset, ...)` take np.ndarray or torch.Tensor (NCHW),
compute in float32 and return float32 np.ndarray. `emulate_fp16=True` rounds what FP16 I/O rounds on the GPU
(inputs, im2col columns, outputs) so FP16 engines can be checked on the CPU.
"""
from __future__ import annotations

import ctypes
import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pipeline.errors import PipelineError
from pipeline.native.cpu import bf16_native
from pipeline.native.libraries import cpu_kernels_library, load_versioned, loads

# 2: sr_deform_conv2d_min_workspace; 3: sr_deform_conv2d_bf16; 4: sr_to_samples_u8; 5, 6: the PNG codec's (7: moved
# to libsr_png.so, pipeline.native.png_codec)
ABI_VERSION = 7
_F32P = ctypes.POINTER(ctypes.c_float)
_INT = ctypes.c_int


@functools.cache
def _lib() -> ctypes.CDLL:
    lib = load_versioned(cpu_kernels_library(), "sr_kernels_abi_version", ABI_VERSION)
    lib.sr_last_error.restype = ctypes.c_char_p
    lib.sr_dynamic_resize_f32.argtypes = [_F32P, _F32P] + [_INT] * 7
    lib.sr_dynamic_resize_f32.restype = _INT
    lib.sr_deform_conv2d_f32.argtypes = [_F32P] * 6 + [_INT] * 18 + [ctypes.c_size_t]
    lib.sr_deform_conv2d_f32.restype = _INT
    lib.sr_deform_conv2d_chunk.argtypes = [_INT] * 6 + [ctypes.c_size_t] * 2 + [ctypes.POINTER(_INT)] * 2
    lib.sr_deform_conv2d_chunk.restype = _INT
    lib.sr_deform_conv2d_min_workspace.argtypes = [_INT] * 6 + [ctypes.c_size_t, _INT]
    lib.sr_deform_conv2d_min_workspace.restype = ctypes.c_size_t
    lib.sr_deform_conv2d_bf16.argtypes = ([ctypes.c_void_p, _F32P, ctypes.c_void_p, ctypes.c_void_p, _F32P,
                                           ctypes.c_void_p] + [_INT] * 21)
    lib.sr_deform_conv2d_bf16.restype = _INT
    lib.sr_deform_conv2d_bf16_native.restype = _INT
    lib.sr_round_to_half.argtypes = [_F32P, ctypes.c_size_t]
    lib.sr_round_to_half.restype = None
    lib.sr_to_samples_u8.argtypes = [_F32P, ctypes.c_void_p, _INT, _INT, _INT, ctypes.POINTER(ctypes.c_int64)]
    lib.sr_to_samples_u8.restype = _INT
    return lib


def library() -> ctypes.CDLL:
    """The loaded, version-checked kernel library; PipelineError (one line) when it is missing or foreign."""
    return _lib()


@functools.cache
def usable() -> bool:
    """Whether the library loads with this C API (callers with a numpy way of their own take it where not)."""
    return loads(_lib)


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


def to_samples_u8(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """NCHW float32 RGB model output -> (NHWC uint8 BGR samples, per-sample count of pixels with a non-finite
    channel), by the rule of pipeline.backends.pixels.to_samples, in one pass."""
    a = np.ascontiguousarray(y, dtype=np.float32)
    if a.ndim != 4 or a.shape[1] != 3:
        raise PipelineError(f"to_samples_u8: expected an NCHW batch of 3 channels, got {a.shape}")
    n, _, h, w = a.shape
    out = np.empty((n, h, w, 3), dtype=np.uint8)
    counts = np.zeros(n, dtype=np.int64)
    _check(_lib().sr_to_samples_u8(_ptr(a), out.ctypes.data, n, h, w,
                                   counts.ctypes.data_as(ctypes.POINTER(ctypes.c_int64))), "to_samples_u8")
    return out, counts


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


@dataclass(frozen=True)
class _DeformProblem:
    """A checked deform_conv2d call: contiguous float32 tensors and the kernels' integer arguments."""
    x: np.ndarray
    offset: np.ndarray
    mask: np.ndarray | None
    bias: np.ndarray | None
    out_shape: tuple[int, int, int, int]
    ints: tuple[int, ...]  # n, c_in, h_in, w_in, c_out, kh, kw, h_out, w_out, strides, begin pads, dilations, g, og


def _as_bf16_bits(x, name: str, ndim: int | None = None) -> np.ndarray:
    """Contiguous bf16 bit patterns (uint16) of an array that holds them: uint16, or the float16-typed view of a bf16
    tensor OpenVINO hands out."""
    arr = np.asarray(x)
    if arr.dtype not in (np.uint16, np.float16):
        raise PipelineError(f"{name} must hold bf16 bit patterns (uint16), got {arr.dtype}")
    if ndim is not None and arr.ndim != ndim:
        raise PipelineError(f"{name} must be {ndim}-D, got shape {tuple(arr.shape)}")
    return np.ascontiguousarray(arr).view(np.uint16)


def _deform_problem(input, weight_shape: tuple[int, ...], offset, bias, mask, stride, padding, dilation, groups,
                    offset_groups, load=_as_f32) -> _DeformProblem:
    """Checks a deform_conv2d call's shapes and attributes (torchvision's rules); groups / offset_groups default to
    what the shapes imply (C / weight.shape[1], offset.shape[1] / (2 kH kW)) and are checked against them when given.
    `load` makes input, offset and mask contiguous arrays of the kernel's element type (float32, or _as_bf16_bits)."""
    x = load(input, "input", 4)
    off = load(offset, "offset", 4)
    n, c, h, wd = x.shape
    if len(weight_shape) != 4:
        raise PipelineError(f"weight must be 4-D, got shape {tuple(weight_shape)}")
    c_out, c_per_group, kh, kw = weight_shape
    sh, sw = _pair(stride, "stride")
    dh, dw = _pair(dilation, "dilation")
    pt, pl, pb, pr = _pads(padding)
    if min(sh, sw, dh, dw) <= 0 or min(pt, pl, pb, pr) < 0:
        raise PipelineError("stride/dilation must be positive and padding non-negative")
    if c_per_group <= 0 or kh <= 0 or kw <= 0 or c % c_per_group:
        raise PipelineError(f"weight shape {tuple(weight_shape)} does not fit {c} input channels")
    g = c // c_per_group
    if groups is not None and groups != g:
        shape = tuple(weight_shape)
        raise PipelineError(f"groups={groups} but weight shape {shape} implies {g} for {c} input channels")
    if c_out % g:
        raise PipelineError(f"groups={g} must divide output channels {c_out}")
    h_out = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    w_out = (wd + pl + pr - dw * (kw - 1) - 1) // sw + 1
    if h_out <= 0 or w_out <= 0:
        raise PipelineError(f"output would be empty: input {h}x{wd}, kernel {kh}x{kw}, pads {(pt, pl, pb, pr)}")
    og = _offset_groups(off, n, kh * kw, h_out, w_out, offset_groups, c)
    m = None
    if mask is not None:
        m = load(mask, "mask", 4)
        if m.shape != (n, og * kh * kw, h_out, w_out):
            raise PipelineError(f"mask shape {tuple(m.shape)} must be {(n, og * kh * kw, h_out, w_out)}")
    b = None
    if bias is not None:
        b = _as_f32(bias, "bias").reshape(-1)
        if b.size != c_out:
            raise PipelineError(f"bias has {b.size} values, expected {c_out}")
    return _DeformProblem(x, off, m, b, (n, c_out, h_out, w_out),
                          (n, c, h, wd, c_out, kh, kw, h_out, w_out, sh, sw, pt, pl, dh, dw, g, og))


def _offset_groups(off: np.ndarray, n: int, taps: int, h_out: int, w_out: int, offset_groups, c: int) -> int:
    if off.shape[0] != n or off.shape[1] % (2 * taps) or off.shape[1] == 0 or off.shape[2:] != (h_out, w_out):
        raise PipelineError(f"offset shape {tuple(off.shape)} must be [{n}, 2*offset_groups*{taps}, {h_out}, {w_out}]")
    og = off.shape[1] // (2 * taps)
    if offset_groups is not None and offset_groups != og:
        raise PipelineError(f"offset_groups={offset_groups} but offset has {off.shape[1]} channels ({og} groups)")
    if c % og:
        raise PipelineError(f"offset_groups={og} must divide input channels {c}")
    return og


def deform_conv2d(input, weight, offset, bias=None, mask=None, stride: int | Sequence[int] = 1,
                  padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, groups: int | None = None,
                  offset_groups: int | None = None, emulate_fp16: bool = False,
                  column_budget: int = 0) -> np.ndarray:
    """torchvision.ops.deform_conv2d on our CPU kernels (shapes and attributes checked by _deform_problem).
    column_budget (bytes, 0 = default) sets the im2col chunk size."""
    w = _as_f32(weight, "weight", 4)
    p = _deform_problem(input, w.shape, offset, bias, mask, stride, padding, dilation, groups, offset_groups)
    out = np.empty(p.out_shape, np.float32)
    status = _lib().sr_deform_conv2d_f32(_ptr(p.x), _ptr(w), _ptr(p.offset), _ptr(p.mask), _ptr(p.bias), _ptr(out),
                                         *p.ints, int(emulate_fp16), int(column_budget))
    _check(status, "deform_conv2d")
    return out


def deform_conv2d_bf16(input, weight, offset, bias=None, mask=None, stride: int | Sequence[int] = 1,
                       padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, groups: int | None = None,
                       offset_groups: int | None = None, threads: int = 0, portable: bool | None = None,
                       out: np.ndarray | None = None, bf16_io: bool = False,
                       mask_logits: bool = False) -> np.ndarray:
    """deform_conv2d with bf16 input, weights and im2col columns, FP32 accumulation and bias (AVX512-BF16 where the
    CPU has it, else the same arithmetic in plain loops). threads: the kernel's worker threads (0: one per core);
    portable: the plain loops even on AVX512-BF16 (None: where the CPU, as ONEDNN_MAX_CPU_ISA caps it, lacks it);
    bf16_io: input, offset, mask and the output are bf16 bit patterns
    (uint16, or OpenVINO's float16-typed views of bf16 tensors; the output rounded to bf16), else float32; out: a
    C-contiguous array of the output's shape and type to write into (else a new one); mask_logits: `mask` holds
    logits, the mask is their sigmoid."""
    w = _as_f32(weight, "weight", 4)
    load, kind = (_as_bf16_bits, np.uint16) if bf16_io else (_as_f32, np.float32)
    p = _deform_problem(input, w.shape, offset, bias, mask, stride, padding, dilation, groups, offset_groups, load)
    if out is None:
        out = np.empty(p.out_shape, kind)
    elif out.shape != p.out_shape or out.dtype.itemsize != np.dtype(kind).itemsize or not out.flags.c_contiguous:
        raise PipelineError(f"out must be a C-contiguous {np.dtype(kind).name} array of shape {p.out_shape}")
    status = _lib().sr_deform_conv2d_bf16(p.x.ctypes.data, _ptr(w), p.offset.ctypes.data,
                                          None if p.mask is None else p.mask.ctypes.data, _ptr(p.bias),
                                          out.ctypes.data, *p.ints, int(threads),
                                          int(not bf16_native() if portable is None else portable), int(bf16_io),
                                          int(mask_logits))
    _check(status, "deform_conv2d_bf16")
    return out


def deform_conv2d_bf16_native() -> bool:
    """Whether deform_conv2d_bf16 runs on AVX512-BF16 on this CPU, as capped (else plain loops: the same bytes,
    slower)."""
    return bool(_lib().sr_deform_conv2d_bf16_native()) and bf16_native()


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
