"""Time both DeformConv2d implementations (fused, im2col + cuBLAS) and torchvision's when it is installed, at the
deform-srcnn layer's shape (64 -> 32 channels, 3x3, 2 offset groups, mask, bias) for 256^2, 512^2 and 1024^2, FP32 and
FP16, and print how far the two implementations differ. For filling plugins_trt/deformConv2d/README.md's table on a GPU
machine whose Python may lack torchvision (then `bench`'s kernel section cannot run):

    PYTHONPATH=. python3 scripts/deform_conv_timing.py [--iters 20]
"""
from __future__ import annotations

import argparse

import torch

from pipeline.bench.kernels import SIZES, deform_inputs, median_ms
from pipeline.native import kernels_cuda


def _runners(t: dict) -> dict:
    runs = {impl: (lambda impl=impl: kernels_cuda.deform_conv2d(t["input"], t["weight"], t["offset"], t["bias"],
                                                                t["mask"], padding=1, impl=impl))
            for impl in kernels_cuda.DEFORM_IMPLS}
    try:
        from torchvision.ops import deform_conv2d
    except ImportError:
        return runs
    runs["torchvision"] = lambda: deform_conv2d(t["input"], t["offset"], t["weight"], t["bias"], padding=1,
                                                mask=t["mask"])
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args()
    print(f"{torch.cuda.get_device_name()}, median of {args.iters} calls (CUDA events), ms")
    for dtype in (torch.float32, torch.float16):
        for size in SIZES:
            runs = _runners(deform_inputs(size, dtype))
            ms = {name: median_ms(fn, args.iters) for name, fn in runs.items()}
            diff = (runs["fused"]().float() - runs["im2col"]().float()).abs().max().item()
            line = f"{str(dtype).removeprefix('torch.')} {size}: " + ", ".join(f"{k} {v:.4f}" for k, v in ms.items())
            if "torchvision" in ms:
                line += "".join(f", {k} x{ms['torchvision'] / ms[k]:.2f} vs torchvision"
                                for k in kernels_cuda.DEFORM_IMPLS)
            print(f"{line}, max |fused - im2col| {diff:.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
