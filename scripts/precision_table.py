"""The README's precision table, measured in one run on this machine: model x backend x precision, 256x256 ->
768x768 (x3), 2 threads, medians of interleaved rounds; speed-up against the eager PyTorch loop (torch fp32); the
held-out Y-PSNR loss from the quality store (pipeline.quality, measured on a miss); then what
`--precision auto` picks.

    python scripts/precision_table.py [MODEL ...] [--rounds 7]
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def main() -> None:
    from pipeline import quality
    from pipeline.backends import create, create_named
    from pipeline.errors import PipelineError
    from pipeline.native.cpu import cpu_name

    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="*", default=["srcnn-x3", "srcnn", "deform-srcnn"])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    print(f"# {cpu_name()}, {args.threads} threads, 256x256 -> x3, medians of {args.rounds} interleaved rounds, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print("| model | backend, precision | ms | vs eager PyTorch | held-out Y-PSNR loss |\n|---|---|---|---|---|")
    x = np.random.default_rng(0).random((1, 3, 256, 256), dtype=np.float32)
    for model in args.models:
        rows = [("torch", "fp32", "torch fp32 (eager loop)"), ("torch", "bf16", "torch bf16 (autocast)"),
                ("auto", "fp32", None), ("openvino", "fp32", None), ("openvino", "bf16", None),
                ("openvino", "int8", None)]
        loaded = []
        for name, precision, label in rows:
            try:
                b = (create(name, model, precision, threads=args.threads) if name == "auto"
                     else create_named(name, model, precision, threads=args.threads))
            except PipelineError as e:
                print(f"| {model} | {name} {precision} | — | — | not run: {e} |")
                continue
            label = label or (f"{b.name} fp32 (today's `auto`)" if name == "auto" else f"{name} {precision}")
            for _ in range(2):
                b.infer(x, 3)
            loaded.append((label, b, []))
        for _ in range(args.rounds):
            for _, b, times in loaded:
                t0 = time.perf_counter()
                b.infer(x, 3)
                times.append((time.perf_counter() - t0) * 1e3)
        # the first row is PyTorch's eager loop: the backend that runs the weights as they are
        eager = statistics.median(loaded[0][2]) if loaded and loaded[0][1].DESCRIPTOR.runs_weights else None
        for label, b, times in loaded:
            ms = statistics.median(times)
            record = quality.precision_loss(b)
            if record is None:
                loss = "exact" if not b.DESCRIPTOR.runs_weights or b.precision == "fp32" else "—"
            else:
                verdict = "within" if quality.within_budget(record) else "**over**"
                loss = f"{record['psnr_loss_db']:.3f} dB ({verdict} {quality.budget(record):g})"
            ratio = f"{eager / ms:.1f}×" if eager else "—"
            print(f"| {model} | {label} | {ms:.1f} | {ratio} | {loss} |", flush=True)
        best = create("auto", model, "auto", threads=args.threads)
        print(f"\n{model}: {best.selection_reason}\n", flush=True)


if __name__ == "__main__":
    main()
