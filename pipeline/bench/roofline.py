"""The roofline's two sides: the machine's measured fp32 peak and a model's FLOPs per output pixel.

torch is imported inside the functions: it is the measuring instrument here, and the deploy runtime
imports this package without it.
"""
from __future__ import annotations

import time

from pipeline.artifacts.identity import resolve


def measure_peak_gflops(threads: int | None = None, n: int = 1024, seconds: float = 1.0) -> dict:
    """The machine's fp32 peak as torch sees it: best GFLOP/s of an n x n x n matmul (2 n^3 FLOPs)."""
    import torch

    old = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        a, b = torch.rand(n, n), torch.rand(n, n)
        torch.mm(a, b)
        best, t_end = 0.0, time.perf_counter() + seconds
        while True:  # at least one timed run, however short `seconds` is
            t0 = time.perf_counter()
            torch.mm(a, b)
            best = max(best, 2 * n**3 / (time.perf_counter() - t0) / 1e9)
            if time.perf_counter() >= t_end:
                break
    finally:
        torch.set_num_threads(old)
    return {"gflops": best, "method": f"best of repeated torch.mm {n}x{n} fp32 for {seconds:g} s, "
                                      f"{threads or torch.get_num_threads()} threads"}


def flops_per_output_pixel(model_name: str) -> float:
    """FLOPs (2 x MACs, convolutions; deformable conv counted as its GEMM) per output pixel of one image."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from models.registry import run

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
