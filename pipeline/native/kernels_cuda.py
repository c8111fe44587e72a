"""torch front end of libsr_kernels_cuda.so (ctypes): our CUDA launchers on torch CUDA tensors.

For GPU tests and kernel benchmarks (the TensorRT plugins call the same launchers). Work is enqueued on torch's
current stream; nothing synchronises. Tensors must be contiguous CUDA float32 or float16, all of one dtype/device.
"""
from __future__ import annotations

import ctypes
import functools
from collections.abc import Sequence

from pipeline.errors import PipelineError
from pipeline.native.libraries import cuda_kernels_library, load_cuda_library

_VP = ctypes.c_void_p
_INT = ctypes.c_int
# DeformConv2d implementations (sr::DeformConvImpl): one fused kernel (no workspace), or the deformable im2col into a
# workspace + cuBLAS GEMM it replaced (kept to compare against and to fall back on).
DEFORM_IMPLS = {"fused": 0, "im2col": 1}
DIM_NAMES = ("n", "c_in", "h_in", "w_in", "c_out", "k_h", "k_w", "h_out", "w_out", "stride_h", "stride_w",
             "pad_h", "pad_w", "dil_h", "dil_w", "group", "offset_group")


@functools.cache
def _lib() -> ctypes.CDLL:
    path = cuda_kernels_library()
    lib = load_cuda_library(path)
    lib.sr_cuda_dynamic_resize.argtypes = [_INT, _VP, _VP] + [_INT] * 6 + [_VP]
    lib.sr_cuda_dynamic_resize.restype = _INT
    lib.sr_cuda_deform_conv2d_workspace_size.argtypes = [ctypes.POINTER(_INT), _INT, _INT, ctypes.c_size_t, _INT]
    lib.sr_cuda_deform_conv2d_workspace_size.restype = ctypes.c_size_t
    lib.sr_cuda_deform_conv2d.argtypes = [_INT, ctypes.POINTER(_INT)] + [_VP] * 8 + [_INT]
    lib.sr_cuda_deform_conv2d.restype = _INT
    lib.sr_cuda_error_string.argtypes = [_INT]
    lib.sr_cuda_error_string.restype = ctypes.c_char_p
    return lib


def _dtype_code(t) -> int:
    import torch

    codes = {torch.float32: 0, torch.float16: 1}
    if t.dtype not in codes:
        raise PipelineError(f"CUDA kernels take float32 or float16 tensors, got {t.dtype}")
    return codes[t.dtype]


def _check_tensors(ref, **named) -> None:
    for name, t in named.items():
        if t is None:
            continue
        if not t.is_cuda or t.device != ref.device or t.dtype != ref.dtype or not t.is_contiguous():
            raise PipelineError(f"{name} must be a contiguous {ref.dtype} tensor on {ref.device}")


def _stream():
    import torch

    return _VP(torch.cuda.current_stream().cuda_stream)


def _status(code: int, what: str) -> None:
    if code != 0:
        raise PipelineError(f"{what} failed: {_lib().sr_cuda_error_string(code).decode()} (cudaError {code})")


def _ptr(t):
    return None if t is None else _VP(t.data_ptr())


def dynamic_resize(x, size: Sequence[int]):
    """Bicubic resize of a CUDA NCHW tensor to size = (H_out, W_out) with launchDynamicResize."""
    import torch

    _check_tensors(x, x=x)
    if x.dim() != 4:
        raise PipelineError(f"x must be 4-D, got {tuple(x.shape)}")
    h_out, w_out = (int(v) for v in size)
    out = torch.empty((*x.shape[:2], h_out, w_out), dtype=x.dtype, device=x.device)
    _status(_lib().sr_cuda_dynamic_resize(_dtype_code(x), _ptr(x), _ptr(out), *x.shape, h_out, w_out, _stream()),
            "launchDynamicResize")
    return out


def _pair(v) -> tuple[int, int]:
    return (int(v), int(v)) if isinstance(v, int) else tuple(int(i) for i in v)


def deform_conv2d_dims(input, weight, offset, stride=1, padding=0, dilation=1) -> list[int]:
    """The 17 DeformConvShape ints (order DIM_NAMES) for torchvision-style arguments."""
    n, c, h, w = input.shape
    c_out, c_g, kh, kw = weight.shape
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride), _pair(padding), _pair(dilation)
    ho = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    wo = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    og = offset.shape[1] // (2 * kh * kw)
    if tuple(offset.shape) != (n, 2 * og * kh * kw, ho, wo) or og == 0 or c % c_g:
        raise PipelineError(f"offset {tuple(offset.shape)} / weight {tuple(weight.shape)} do not fit input "
                            f"{tuple(input.shape)} (output {ho}x{wo})")
    return [n, c, h, w, c_out, kh, kw, ho, wo, sh, sw, ph, pw, dh, dw, c // c_g, og]


def _impl_code(impl: str) -> int:
    if impl not in DEFORM_IMPLS:
        raise PipelineError(f"DeformConv2d impl must be one of {', '.join(DEFORM_IMPLS)}, got {impl!r}")
    return DEFORM_IMPLS[impl]


def deform_conv2d_workspace_size(dims: Sequence[int], has_bias: bool, has_mask: bool, elem_size: int,
                                 impl: str = "fused") -> int:
    """deformConv2dWorkspaceSize for a shape and implementation (bytes; 0 for the fused kernel)."""
    arr = (_INT * 17)(*dims)
    return int(_lib().sr_cuda_deform_conv2d_workspace_size(arr, int(has_bias), int(has_mask), elem_size,
                                                           _impl_code(impl)))


def deform_conv2d(input, weight, offset, bias=None, mask=None, stride=1, padding=0, dilation=1, workspace=None,
                  impl: str = "fused"):
    """torchvision-style deform_conv2d on CUDA tensors with launchDeformConv2d (workspace allocated if not given).

    impl: "fused" (one kernel, no workspace) or "im2col" (im2col into the workspace + cuBLAS)."""
    import torch

    code = _impl_code(impl)
    _check_tensors(input, input=input, weight=weight, offset=offset, bias=bias, mask=mask)
    dims = deform_conv2d_dims(input, weight, offset, stride, padding, dilation)
    if mask is not None and tuple(mask.shape) != (dims[0], dims[16] * dims[5] * dims[6], dims[7], dims[8]):
        raise PipelineError(f"mask shape {tuple(mask.shape)} does not fit offset {tuple(offset.shape)}")
    if bias is not None and bias.numel() != dims[4]:
        raise PipelineError(f"bias has {bias.numel()} values, expected {dims[4]}")
    need = deform_conv2d_workspace_size(dims, bias is not None, mask is not None, input.element_size(), impl)
    if workspace is None:
        workspace = torch.empty(max(need, 1), dtype=torch.uint8, device=input.device)
    elif workspace.numel() * workspace.element_size() < need:
        raise PipelineError(f"workspace has {workspace.numel()} bytes, launcher needs {need}")
    out = torch.empty((dims[0], dims[4], dims[7], dims[8]), dtype=input.dtype, device=input.device)
    arr = (_INT * 17)(*dims)
    _status(_lib().sr_cuda_deform_conv2d(_dtype_code(input), arr, _ptr(input), _ptr(weight), _ptr(offset), _ptr(mask),
                                         _ptr(bias), _ptr(out), _ptr(workspace), _stream(), code),
            f"launchDeformConv2d ({impl})")
    return out
