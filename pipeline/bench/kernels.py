"""Kernel section of `bench` (CUDA only): our launchers against PyTorch's on the same GPU, in one run.

DynamicResize vs F.interpolate(bicubic) and our DeformConv2d vs torchvision.ops.deform_conv2d, FP32 and FP16, at the
deform-srcnn layer's shape (64 -> 32 channels, 3x3, offset groups 2, mask and bias) for 256^2, 512^2 and 1024^2
inputs, once per DeformConv2d implementation (the fused kernel the plugin uses by default, and the im2col + cuBLAS
path it replaced), each row with its largest difference from torchvision's output; plus each model end to end on
torch CUDA. Timed with CUDA events after warm-up (median of the calls).
Floors (the fused kernel): at least 1.5x torchvision's speed in FP16 at 512^2 and 1.3x at 256^2 and 1024^2, and no
slower than torchvision in FP32; DynamicResize within 1.2x of F.interpolate's time.
"""
from __future__ import annotations

from pipeline.artifacts.identity import resolve
from pipeline.bench.timing import cuda_times_ms
from pipeline.errors import PipelineError, first_line
from pipeline.native import kernels_cuda
from pipeline.native.cuda_driver import torch_gpu_visible
from pipeline.native.libraries import cuda_kernels_library

SIZES = (256, 512, 1024)
DEFORM_FLOORS = {("fp16", 512): 1.5, ("fp16", 256): 1.3, ("fp16", 1024): 1.3}  # speed vs torchvision, fused kernel
DEFORM_FLOOR_FP32 = 1.0
RESIZE_FLOOR = 1.2  # ours at most this much slower than F.interpolate
RESIZE_SCALE = 3


def not_run_reason() -> str | None:
    """None when a CUDA device and our CUDA kernel library are here, else why the section is not run."""
    try:
        import torch  # noqa: F401 - the kernels are timed on torch CUDA tensors
    except ImportError:
        return "PyTorch is not installed"
    if not torch_gpu_visible()[0]:
        return "no CUDA device"

    try:
        cuda_kernels_library()
    except PipelineError as e:
        return str(e)
    return None


def median_ms(fn, iters: int) -> float:
    times = cuda_times_ms(fn, iters)
    return sorted(times)[len(times) // 2]


def deform_inputs(size: int, dtype):
    import torch

    g = torch.Generator(device="cuda").manual_seed(0)
    c_in, c_out, k, og = 64, 32, 3, 2

    def rand(*shape, lo=0.0, hi=1.0):
        return (torch.rand(*shape, device="cuda", generator=g) * (hi - lo) + lo).to(dtype)

    return dict(input=rand(1, c_in, size, size), weight=rand(c_out, c_in, k, k, lo=-0.05, hi=0.05),
                offset=rand(1, 2 * og * k * k, size, size, lo=-2, hi=2), mask=rand(1, og * k * k, size, size),
                bias=rand(c_out))


def kernel_rows(sizes=SIZES, iters: int = 20, log=print) -> list[dict]:
    import torch
    import torch.nn.functional as F
    from torchvision.ops import deform_conv2d as tv_deform_conv2d


    rows = []
    for dtype in (torch.float32, torch.float16):
        precision = "fp32" if dtype == torch.float32 else "fp16"
        for size in sizes:
            x = torch.rand(1, 3, size, size, device="cuda", dtype=dtype)
            out = (size * RESIZE_SCALE, size * RESIZE_SCALE)
            ours = median_ms(lambda x=x, out=out: kernels_cuda.dynamic_resize(x, out), iters)
            theirs = median_ms(lambda x=x, out=out: F.interpolate(x, size=out, mode="bicubic", align_corners=False),
                                iters)
            rows.append({"op": "DynamicResize", "vs": "F.interpolate(bicubic)", "precision": precision, "size": size,
                         "shape": f"1x3x{size}x{size} -> {out[0]}x{out[1]}", "ours_ms": ours, "torch_ms": theirs,
                         "ratio": theirs / ours, "floor": f"time <= {RESIZE_FLOOR:g}x F.interpolate",
                         "meets_floor": ours <= RESIZE_FLOOR * theirs})
            deform = _deform_rows(size, dtype, precision, iters, tv_deform_conv2d)
            rows += deform
            log(f"  kernels {precision} {size}: {rows[-1 - len(deform)]['op']} "
                f"x{rows[-1 - len(deform)]['ratio']:.2f}, "
                + ", ".join(f"{r['op']} x{r['ratio']:.2f} (max err {r['max_abs_err']:.2g})" for r in deform)
                + " vs torch")
    return rows


def _deform_rows(size: int, dtype, precision: str, iters: int, tv_deform_conv2d) -> list[dict]:
    """One row per DeformConv2d implementation against torchvision: time and largest output difference."""
    t = deform_inputs(size, dtype)
    theirs = median_ms(lambda: tv_deform_conv2d(t["input"], t["offset"], t["weight"], t["bias"], padding=1,
                                                 mask=t["mask"]), iters)
    ref = tv_deform_conv2d(t["input"], t["offset"], t["weight"], t["bias"], padding=1, mask=t["mask"]).float()
    rows = []
    for impl in kernels_cuda.DEFORM_IMPLS:
        def ours_fn(impl=impl):
            return kernels_cuda.deform_conv2d(t["input"], t["weight"], t["offset"], t["bias"], t["mask"], padding=1,
                                              impl=impl)

        err = (ours_fn().float() - ref).abs().max().item()
        ours = median_ms(ours_fn, iters)
        floor = None
        if impl == "fused":
            floor = DEFORM_FLOORS.get((precision, size)) if precision == "fp16" else DEFORM_FLOOR_FP32
        rows.append({"op": f"DeformConv2d {impl}", "vs": "torchvision.ops.deform_conv2d", "precision": precision,
                     "size": size, "shape": f"1x64x{size}x{size} -> 32 ch, 3x3, offset groups 2, mask",
                     "ours_ms": ours, "torch_ms": theirs, "ratio": theirs / ours, "max_abs_err": err,
                     "floor": f"speed >= {floor:g}x torchvision" if floor else "",
                     "meets_floor": theirs / ours >= floor if floor else None})
    return rows


def model_rows(models: list[str], size: int = 256, iters: int = 20) -> list[dict]:
    """Each model end to end on torch CUDA (eager, FP32 and FP16 weights) at its default scale."""
    import torch

    from models.registry import load_model, run  # the registry imports PyTorch, like the line above

    rows = []
    for model in models:
        spec = resolve(model)
        for dtype in (torch.float32, torch.float16):
            net = load_model(model, device="cuda").to(dtype).eval()
            x = torch.rand(1, 3, size, size, device="cuda", dtype=dtype)
            row = {"model": model, "precision": "fp32" if dtype == torch.float32 else "fp16",
                   "shape": f"1x3x{size}x{size} x{spec.default_scale:g}", "median_ms": None}
            try:
                with torch.inference_mode():
                    row["median_ms"] = median_ms(lambda n=net, x=x, s=spec: run(n, s, x, s.default_scale), iters)
            except RuntimeError as e:  # e.g. an op without a half kernel: reported, the rest still runs
                row["error"] = first_line(e)
            rows.append(row)
    return rows


def kernel_section(models: list[str], quick: bool = False, log=print) -> tuple[dict | None, str | None]:
    """({"kernels": rows, "models": rows}, None) on a CUDA machine, else (None, why not run)."""
    reason = not_run_reason()
    if reason is not None:
        return None, ("kernel benchmarks (DynamicResize vs F.interpolate, DeformConv2d vs torchvision, models on "
                      f"torch CUDA): {reason}")
    iters = 5 if quick else 20
    sizes = SIZES[:2] if quick else SIZES
    return {"kernels": kernel_rows(sizes, iters, log), "models": model_rows(models, iters=iters)}, None
