"""The CPU side's proof, run by the doctor in a child process (`python -m pipeline.doctor.cpu_probe MODEL`): one
tiny real inference on each CPU backend (ONNX Runtime's CPU sessions, our kernels as its ops, OpenVINO), each output
checked against the first's, and our CPU kernel library's two ops against what they must equal. One JSON line per
check on stdout (pipeline.doctor.results.Check's fields).

A child process because it needs numpy and the runtimes (the doctor itself starts on a bare Python), and because a
runtime that crashes should fail its own check, not end the doctor.
"""
from __future__ import annotations

import json
import sys

import numpy as np

from pipeline import backends
from pipeline.artifacts.identity import resolve
from pipeline.doctor.results import FAIL, PASS, SKIP, Check
from pipeline.errors import PipelineError, first_line
from pipeline.native import kernels_cpu

SIDE = 24  # the input's side: a tiny image, so every backend answers in a second or two
TOLERANCE = 2e-3  # max abs difference between two fp32 CPU backends' outputs (pixels in [0, 1])
KERNELS_TOLERANCE = 1e-4
KERNELS_FIX = "`make build-plugins`, then `python -m pytest tests/test_kernels_cpu.py` shows the details"


def cpu_backends() -> list[str]:
    """The backends that run only on the CPU from an ONNX file (the stand-in device and PyTorch aside)."""
    return [d.name for d in backends.descriptors() if d.device == "cpu" and not d.stand_in and not d.runs_weights]


def backend_checks(model: str) -> list[Check]:
    """Each CPU backend's output for one random SIDE² image at the model's scale: the right shape, finite, and
    within TOLERANCE of the first backend's."""
    scale = float(resolve(model).default_scale)
    x = np.random.default_rng(0).random((1, 3, SIDE, SIDE), dtype=np.float32)
    status = {s.name: s for s in backends.available(model)}
    checks, first = [], None
    for name in cpu_backends():
        label = f"CPU backend {name} ({model} x{scale:g})"
        if not status[name].available:
            checks.append(Check(label, SKIP, status[name].reason))
            continue
        try:
            y = backends.create(name, model, "fp32", threads=1).infer(x, scale)
        except (PipelineError, RuntimeError, OSError, ValueError) as e:
            checks.append(Check(label, FAIL, first_line(e), fix=f"`python -m pipeline compare --model {model} "
                                f"--backends {name}` shows the details"))
            continue
        checks.append(_judged(label, y, first, x.shape, scale))
        first = (name, y) if first is None else first
    return checks


def _judged(label: str, y: np.ndarray, first, in_shape, scale: float) -> Check:
    side = round(in_shape[-1] * scale)
    if y.shape != (1, 3, side, side) or not np.isfinite(y).all():
        return Check(label, FAIL, f"output {y.shape}, finite: {bool(np.isfinite(y).all())} (wanted (1, 3, {side}, "
                     f"{side}), finite)", fix="`python -m pipeline compare` shows the details")
    if first is None:
        return Check(label, PASS, f"{SIDE}x{SIDE} -> {side}x{side}, finite (the reference for the others)")
    err = float(np.abs(y - first[1]).max())
    return Check(label, PASS if err <= TOLERANCE else FAIL,
                 f"{SIDE}x{SIDE} -> {side}x{side}, max abs {err:.1e} against {first[0]} (tolerance {TOLERANCE:g})",
                 fix="" if err <= TOLERANCE else "`python -m pipeline compare` names the backend that drifts")


def kernel_checks() -> list[Check]:
    """libsr_kernels_cpu.so's ops on inputs with a known answer: DynamicResize to the input's own size is the
    input; DeformConv2d with zero offsets and a mask of ones is a plain convolution."""
    try:
        kernels_cpu.library()
    except PipelineError as e:
        return [Check("CPU kernels (libsr_kernels_cpu.so)", SKIP, first_line(e), fix=KERNELS_FIX)]
    rng = np.random.default_rng(1)
    x = rng.random((1, 2, 7, 6), dtype=np.float32)
    w = rng.random((3, 2, 3, 3), dtype=np.float32) - 0.5
    b = rng.random(3, dtype=np.float32)
    resized = kernels_cpu.dynamic_resize(x, (7, 6))
    deformed = kernels_cpu.deform_conv2d(x, w, np.zeros((1, 18, 7, 6), np.float32), bias=b,
                                         mask=np.ones((1, 9, 7, 6), np.float32), padding=1)
    return [_kernel_check("CPU kernel DynamicResize (libsr_kernels_cpu.so)", resized, x, "the input itself"),
            _kernel_check("CPU kernel DeformConv2d (libsr_kernels_cpu.so)", deformed, _conv(x, w, b),
                          "a plain 3x3 convolution (zero offsets)")]


def _conv(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """A 3x3 convolution with padding 1, in numpy: the reference."""
    h, wd = x.shape[-2:]
    p = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    patches = np.stack([p[:, :, i:i + h, j:j + wd] for i in range(3) for j in range(3)], axis=2)  # N C 9 H W
    return np.einsum("nckhw,ock->nohw", patches, w.reshape(*w.shape[:2], 9)) + b[None, :, None, None]


def _kernel_check(label: str, got: np.ndarray, want: np.ndarray, what: str) -> Check:
    err = float(np.abs(got - want).max()) if got.shape == want.shape else float("inf")
    return Check(label, PASS if err <= KERNELS_TOLERANCE else FAIL,
                 f"max abs {err:.1e} against {what} (tolerance {KERNELS_TOLERANCE:g})",
                 fix="" if err <= KERNELS_TOLERANCE else KERNELS_FIX)


def main(argv: list[str]) -> int:
    for check in kernel_checks() + backend_checks(argv[0]):
        print(json.dumps(check.to_dict()), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
