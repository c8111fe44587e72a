"""CUDA launchers: the build compiles every .cu (CI, no GPU), and on a GPU box they match torch / torchvision
(pipeline.native.kernels_cuda over libsr_kernels_cuda.so, on torch CUDA tensors)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from pipeline.errors import PipelineError
from pipeline.native import kernels_cpu
from pipeline.native import libraries as native

ARCHS = (75, 80, 86, 89, 90)


def tv_deform_conv2d(*args, **kwargs):
    """torchvision's op, the reference; imported here so a GPU Python without torchvision still collects."""
    ops = pytest.importorskip("torchvision.ops", reason="torchvision (the export extra) is the reference here")
    return ops.deform_conv2d(*args, **kwargs)


def nvcc_path() -> str | None:
    cuda_home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    candidate = Path(cuda_home) / "bin" / "nvcc"
    return str(candidate) if candidate.is_file() else shutil.which("nvcc")


needs_nvcc = pytest.mark.skipif(nvcc_path() is None, reason="nvcc not found (set CUDA_HOME): CUDA sources not built")


@pytest.fixture(scope="module")
def cuda_build() -> Path:
    """Build folder with the CUDA targets (`make plugins`; built here when missing)."""
    try:
        native.cuda_kernels_library()
    except PipelineError:
        native.build_plugins()
    return native.BUILD_DIR


@needs_nvcc
def test_every_cu_file_is_compiled_by_the_build(cuda_build):
    sources = sorted(native.SOURCE_DIR.rglob("*.cu"))
    assert sources, "no CUDA sources found"
    objects = {p.name for p in (cuda_build / "CMakeFiles").rglob("*.cu.o")}
    missing = [str(s.relative_to(native.SOURCE_DIR)) for s in sources if f"{s.name}.o" not in objects]
    assert not missing, f"not compiled by the cmake build: {missing}"
    assert (cuda_build / "libsr_cuda_kernels.a").is_file()
    assert native.cuda_kernels_library().is_file()


@needs_nvcc
def test_cuda_build_targets_all_architectures_with_werror(cuda_build):
    flags = (cuda_build / "CMakeFiles" / "sr_cuda_kernels.dir" / "flags.make").read_text()
    for arch in ARCHS:
        assert re.search(rf"arch=compute_{arch},code=\[[^\]]*sm_{arch}\b", flags), f"no SASS for sm_{arch}: {flags}"
    assert re.search(r"arch=compute_90,code=\[compute_90", flags), "no PTX for forward compatibility"
    assert "-Werror" in flags


@needs_nvcc
def test_cuda_library_exports_c_api(cuda_build):
    from pipeline.native import kernels_cuda

    dims = [4, 16, 40, 40, 8, 3, 3, 40, 40, 1, 1, 1, 1, 1, 1, 2, 2]
    size = kernels_cuda.deform_conv2d_workspace_size(dims, True, True, 4, impl="im2col")
    images, rows = kernels_cpu.deform_conv2d_chunk(4, 16, 3, 3, 40, 40, 4)
    columns = images * 16 * 9 * rows * 40 * 4
    cublas_slice = 32 << 20  # cuBLAS runs in our workspace (cublasSetWorkspace), never allocating its own
    assert size == 256 + (columns + 255) // 256 * 256 + cublas_slice
    assert kernels_cuda.deform_conv2d_workspace_size([0] + dims[1:], True, True, 4, impl="im2col") == 0
    assert kernels_cuda.deform_conv2d_workspace_size(dims, True, True, 4) == 0  # fused: no column buffer
    with pytest.raises(PipelineError, match="impl must be one of fused, im2col"):
        kernels_cuda.deform_conv2d_workspace_size(dims, True, True, 4, impl="fast")


# ------------------------------------------------------------------------------------------------- GPU execution


def close(out: torch.Tensor, ref: torch.Tensor, rel: float) -> float:
    err = (out.float() - ref.float()).abs().max().item()
    assert err <= rel * max(1.0, ref.float().abs().max().item()), err
    return err


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("h,w,ho,wo", [(5, 7, 15, 21), (16, 16, 5, 7), (1, 1, 3, 4), (37, 50, 111, 150)])
@pytest.mark.usefixtures("cuda_build")
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_dynamic_resize_gpu(dtype, h, w, ho, wo):
    from pipeline.native import kernels_cuda

    x = torch.rand(2, 3, h, w, device="cuda").to(dtype)
    out = kernels_cuda.dynamic_resize(x, (ho, wo))
    torch.cuda.synchronize()
    ref = F.interpolate(x.float(), size=(ho, wo), mode="bicubic", align_corners=False)
    if dtype == torch.float32:
        close(out, ref, 1e-5)
    else:  # FP16 I/O, FP32 math: exactly the CPU emulation
        emu = kernels_cpu.dynamic_resize(x.float().cpu(), (ho, wo), emulate_fp16=True)
        close(out.cpu(), torch.from_numpy(emu), 1e-3)
        close(out, ref, 2e-3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.usefixtures("cuda_build")
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_dynamic_resize_gpu_to_its_own_size_is_a_copy(dtype):
    from pipeline.native import kernels_cuda

    x = (torch.randn(2, 3, 9, 11, device="cuda") * 100).to(dtype)
    x[0, 0, 0, :2] = torch.tensor([float("inf"), float("nan")])
    out = kernels_cuda.dynamic_resize(x, (9, 11))
    torch.cuda.synchronize()
    bits = torch.int16 if dtype == torch.float16 else torch.int32
    assert out.data_ptr() != x.data_ptr() and torch.equal(out.view(bits), x.view(bits))


DEFORM_GPU_CASES = [
    # n, c, h, w, c_out, k, stride, pad, dil, offset_groups, weight_groups, bias, mask
    (2, 8, 12, 13, 6, 3, 1, 1, 1, 2, 2, True, True),
    (1, 4, 9, 9, 4, 3, 2, 0, 2, 1, 1, False, False),
    (1, 4, 1, 1, 4, 1, 1, 0, 1, 4, 4, True, False),
    (5, 16, 192, 192, 8, 3, 1, 1, 1, 1, 1, True, True),   # 21 MiB/image: 3 images per chunk, batch > chunk
    (1, 64, 256, 256, 32, 3, 1, 1, 1, 2, 1, True, True),  # 151 MiB/image: row bands (deform-srcnn-like)
    # fused-kernel tile edges (32 out ch x 64 positions x 32 in ch of a tap): channels not divisible by the tiles,
    # offset groups changing inside a step, odd sizes (positions cross images inside a tile), several out tiles
    (3, 40, 13, 17, 40, 3, 1, 1, 1, 5, 1, True, True),
    (2, 33, 15, 11, 70, 5, 2, 2, 1, 3, 1, False, False),
    (2, 12, 11, 7, 10, 3, 2, 2, 2, 3, 2, True, False),
    (2, 16, 5, 9, 16, 1, 1, 0, 1, 4, 8, True, True),
    (1, 3, 1, 1, 1, 3, 1, 1, 1, 1, 1, True, True),
]


@pytest.mark.parametrize("impl", ["fused", "im2col"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("cfg", DEFORM_GPU_CASES)
@pytest.mark.usefixtures("cuda_build")
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_deform_conv2d_gpu(dtype, cfg, impl):
    from pipeline.native import kernels_cuda

    n, c, h, w, c_out, k, stride, pad, dil, og, g, use_bias, use_mask = cfg
    gen = torch.Generator(device="cuda").manual_seed(0)
    ho = (h + 2 * pad - dil * (k - 1) - 1) // stride + 1
    wo = (w + 2 * pad - dil * (k - 1) - 1) // stride + 1
    r = lambda *s: torch.randn(*s, device="cuda", generator=gen)  # noqa: E731
    x, weight = r(n, c, h, w), r(c_out, c // g, k, k) * 0.2
    offset = r(n, 2 * og * k * k, ho, wo) * 3
    mask = torch.rand(n, og * k * k, ho, wo, device="cuda", generator=gen) if use_mask else None
    bias = r(c_out) if use_bias else None
    cast = lambda t: None if t is None else t.to(dtype).contiguous()  # noqa: E731
    stream = torch.cuda.Stream()  # not the default stream: the launcher must honour the given one
    with torch.cuda.stream(stream):
        out = kernels_cuda.deform_conv2d(cast(x), cast(weight), cast(offset), cast(bias), cast(mask),
                                         stride=stride, padding=pad, dilation=dil, impl=impl)
    stream.synchronize()
    f = lambda t: None if t is None else cast(t).float()  # noqa: E731
    ref = tv_deform_conv2d(f(x), f(offset), f(weight), f(bias), stride=stride, padding=pad, dilation=dil, mask=f(mask))
    close(out, ref, 1e-4 if dtype == torch.float32 else 1e-2)


@pytest.mark.usefixtures("cuda_build")
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_deform_conv2d_gpu_exact_workspace_unaligned():
    from pipeline.native import kernels_cuda

    x = torch.randn(3, 4, 10, 11, device="cuda")
    weight = torch.randn(6, 2, 3, 3, device="cuda")
    offset = torch.randn(3, 36, 10, 11, device="cuda")
    mask = torch.rand(3, 18, 10, 11, device="cuda")
    bias = torch.randn(6, device="cuda")
    dims = kernels_cuda.deform_conv2d_dims(x, weight, offset, padding=1)
    need = kernels_cuda.deform_conv2d_workspace_size(dims, True, True, 4, impl="im2col")
    buf = torch.zeros(need + 1, dtype=torch.uint8, device="cuda")
    out = kernels_cuda.deform_conv2d(x, weight, offset, bias, mask, padding=1, workspace=buf[1:],  # misaligned start
                                     impl="im2col")
    ref = tv_deform_conv2d(x, offset, weight, bias, padding=1, mask=mask)
    close(out, ref, 1e-4)
    with pytest.raises(PipelineError, match="workspace"):
        kernels_cuda.deform_conv2d(x, weight, offset, bias, mask, padding=1, workspace=buf[: need - 1], impl="im2col")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.usefixtures("cuda_build")
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_deform_conv2d_gpu_fused_matches_im2col_at_deform_srcnn_shape(dtype):
    """The fused kernel against the im2col + cuBLAS path at deform-srcnn's layer (64 -> 32, 3x3, offset groups 2),
    batch 2 at an odd size; FP32 stays FP32 (no TF32) in both."""
    from pipeline.native import kernels_cuda

    gen = torch.Generator(device="cuda").manual_seed(3)
    x = torch.rand(2, 64, 67, 45, device="cuda", generator=gen).to(dtype)
    weight = ((torch.rand(32, 64, 3, 3, device="cuda", generator=gen) - 0.5) * 0.1).to(dtype)
    offset = ((torch.rand(2, 36, 67, 45, device="cuda", generator=gen) - 0.5) * 6).to(dtype)
    mask = torch.rand(2, 18, 67, 45, device="cuda", generator=gen).to(dtype)
    bias = torch.rand(32, device="cuda", generator=gen).to(dtype)
    fused = kernels_cuda.deform_conv2d(x, weight, offset, bias, mask, padding=1, impl="fused")
    im2col = kernels_cuda.deform_conv2d(x, weight, offset, bias, mask, padding=1, impl="im2col")
    torch.cuda.synchronize()
    close(fused, im2col, 1e-5 if dtype == torch.float32 else 2e-3)


# -- a bare GPU machine's Python: what `make gpu-check PY=python3` runs ---------------------------------------

BARE = ("isal", "torchvision")  # not on a GPU box's stock Python; blocked as `sys.modules[name] = None`
# (tests/test_gpu_check.py collects every gpu test with these blocked too)


def _bare_python(code: str) -> subprocess.CompletedProcess:
    prelude = f"import sys\nfor name in {BARE!r}:\n    sys.modules[name] = None\n"
    return subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True, timeout=600,
                          cwd=Path(__file__).resolve().parent.parent)


def test_png_writer_without_isal():
    proc = _bare_python("import cv2, numpy as np\nfrom pipeline.images import png\n"
                        "img = np.random.default_rng(0).integers(0, 65536, (31, 17, 3)).astype(np.uint16)\n"
                        "back = cv2.imdecode(np.frombuffer(png.encode_png(img), np.uint8), cv2.IMREAD_UNCHANGED)\n"
                        "assert png.deflate.__name__ == 'zlib' and np.array_equal(back, img)\n")
    assert proc.returncode == 0, proc.stderr[-3000:]
