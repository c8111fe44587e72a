"""The roofline's two sides: the machine's measured peaks (fp32, bf16, int8) and a model's FLOPs per output pixel.

torch is imported inside the functions: it is the measuring instrument here, and the deploy runtime
imports this package without it.
"""
from __future__ import annotations

import time

from pipeline.artifacts.identity import resolve
from pipeline.native import cpu
from pipeline.precisions import BY_NAME
from pipeline.precisions import PEAKS as PEAK_PRECISIONS  # the peaks measured, each a fallback for the ones after it


def peak_problem(precision: str) -> str | None:
    """Why the machine has no `precision` peak to measure, or None: a CPU without bf16 arithmetic or an int8 dot
    product runs torch's GEMM at that precision emulated (1 GFLOP/s), a number no row should be held to."""
    if precision == "bf16":
        return cpu.bf16_problem()
    if precision == "int8":
        return cpu.int8_problem()
    return None  # fp32 always runs; fp16's peak is a GPU's


def peak_precision(precision: str | None) -> str:
    """The measured peak a row of `precision` is held to: its own, fp32's for any other (fp16 on a GPU)."""
    return precision if precision in PEAK_PRECISIONS else "fp32"


def held_peaks(gemm: dict[str, float]) -> dict[str, float]:
    """Each precision's ceiling: the best GEMM of it and of the precisions before it. A bf16 or int8 row may run
    (partly) at fp32 -- OpenVINO does on a CPU without bf16 arithmetic, where torch's bf16 GEMM is emulated and
    far slower -- so a lower precision's ceiling is never under fp32's."""
    out, best = {}, 0.0
    for p in PEAK_PRECISIONS:
        best = max(best, gemm.get(p, 0.0))
        out[p] = best
    return out


def achieved_gflops(row: dict) -> float:
    """What a result row reached: its model FLOPs over its median latency, GFLOP/s."""
    return row["gflop"] / (row["latency_ms"]["median"] / 1e3)


def _peak_kernel(precision: str, n: int):
    """(one n x n x n matrix product, its name) at `precision`: oneDNN's kernels through torch, so a CPU with
    AVX512-BF16/VNNI or AMX uses them, as OpenVINO does."""
    import torch

    if precision == "int8":  # int8 x int8 -> int32 sums, as an int8 convolution computes
        a, b = (torch.randint(-128, 128, (n, n), dtype=torch.int8) for _ in range(2))
        return (lambda: torch._int_mm(a, b)), f"torch._int_mm {n}x{n} int8 (int32 sums)"
    dtype = getattr(torch, BY_NAME[precision].numpy)  # float32, bfloat16
    a, b = torch.rand(n, n, dtype=dtype), torch.rand(n, n, dtype=dtype)
    return (lambda: torch.mm(a, b)), f"torch.mm {n}x{n} {precision}"


def measure_peak_gflops(threads: int | None = None, n: int = 1024, seconds: float = 1.0,
                        precision: str = "fp32") -> dict:
    """The machine's peak at `precision` as torch sees it: best GFLOP/s (GOP/s for int8) of an n x n x n matrix
    product (2 n^3 operations)."""
    import torch

    old = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        kernel, what = _peak_kernel(precision, n)
        kernel()
        best, t_end = 0.0, time.perf_counter() + seconds
        while True:  # at least one timed run, however short `seconds` is
            t0 = time.perf_counter()
            kernel()
            best = max(best, 2 * n**3 / (time.perf_counter() - t0) / 1e9)
            if time.perf_counter() >= t_end:
                break
    finally:
        torch.set_num_threads(old)
    return {"gflops": best, "precision": precision,
            "method": f"best of repeated {what} for {seconds:g} s, {threads or torch.get_num_threads()} threads"}


def flops_per_output_pixel(model_name: str) -> float:
    """FLOPs (2 x MACs, convolutions; deformable conv counted as its GEMM) per output pixel of one image."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from models.registry import run  # the registry imports PyTorch, like the line above

    spec = resolve(model_name)
    net = spec.build().eval()  # FLOPs do not depend on the weights
    x = torch.rand(1, 3, 16, 16)
    with torch.inference_mode(), FlopCounterMode(display=False) as fc:
        y = run(net, spec, x, spec.default_scale)
    flops = float(fc.get_total_flops())
    if hasattr(net, "deform_weight"):  # torchvision::deform_conv2d is not in torch's flop table
        co, ci, kh, kw = net.deform_weight.shape
        flops += 2.0 * co * ci * kh * kw * y.shape[-2] * y.shape[-1]
    return flops / (y.shape[-2] * y.shape[-1])
