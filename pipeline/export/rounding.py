"""Rounding a conv's weights to int8 steps so that its *output* moves least (GPTQ/OBQ's rule), not each weight.

    patch_covariance(images, kh, kw)       E[(x - mean)(x - mean)^T] of the kh x kw patches of the images
    round_weights(w, hessian, bits)        (q, step): per output channel symmetric, error-compensated rounding

Rounding to nearest leaves each weight within half a step, but a conv's output error is the sum of those errors
times its (correlated) input: neighbouring pixels are nearly equal, so errors of one sign add up. This rounds the
weights one input position at a time and moves the ones not yet rounded to cancel what each rounding did, weighted
by the input's covariance (the bias correction in pipeline.export.quantize takes the mean, so the covariance is
centred). Used on the image convs, whose weights are most of the int8 file's error: on srcnn-x3 (folded x3,
astronaut, RGB PSNR to fp32, computed exactly) 8-bit weights rounded to nearest 42.8 dB, 7-bit 38.9 dB.
"""
from __future__ import annotations

import numpy as np

DAMP = 0.01  # share of the mean diagonal added to the covariance, as GPTQ does: keeps its inverse well conditioned


class PatchCovariance:
    """The centred covariance of the (C, kh, kw) patches of the images added (each 1 x C x H x W) at every
    `stride`-th position, flattened C-major as a conv's weights are (C * kh * kw square); an image at a time, so
    memory is one image's patches."""

    def __init__(self, kh: int, kw: int, stride: int = 1):
        self.kh, self.kw, self.stride = kh, kw, stride
        self.sums, self.outer, self.count = 0.0, 0.0, 0

    def add(self, x: np.ndarray) -> None:
        patches = np.lib.stride_tricks.sliding_window_view(x[0].astype(np.float64), (self.kh, self.kw), axis=(1, 2))
        patches = patches[:, ::self.stride, ::self.stride]
        flat = patches.transpose(1, 2, 0, 3, 4).reshape(-1, x.shape[1] * self.kh * self.kw)  # (positions, C*kh*kw)
        self.sums = self.sums + flat.sum(axis=0)
        self.outer = self.outer + flat.T @ flat
        self.count += flat.shape[0]

    def value(self) -> np.ndarray:
        mean = self.sums / self.count
        return self.outer / self.count - np.outer(mean, mean)


def patch_covariance(images: list[np.ndarray], kh: int, kw: int, stride: int = 1) -> np.ndarray:
    """PatchCovariance of `images` at once."""
    cov = PatchCovariance(kh, kw, stride)
    for x in images:
        cov.add(x)
    return cov.value()


def round_weights(w: np.ndarray, hessian: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """Weights `w` (out, ...) as int8 values of `bits` bits and their per-output-channel steps (max |w| / (2^(bits-1)
    - 1), symmetric), each rounding's output error (under `hessian`) spread onto the positions not yet rounded."""
    top = 2 ** (bits - 1) - 1
    rows = w.reshape(w.shape[0], -1).astype(np.float64).copy()
    step = np.maximum(np.abs(rows).max(axis=1), 1e-12) / top
    order = np.argsort(-np.diag(hessian), kind="stable")  # the inputs that vary most first (GPTQ's act-order)
    rows, h = rows[:, order], hessian[np.ix_(order, order)]
    h = h + DAMP * np.mean(np.diag(h)) * np.eye(len(h))
    upper = np.linalg.cholesky(np.linalg.inv(h)).T  # GPTQ: the inverse's Cholesky factor, upper
    q = np.empty_like(rows)
    for i in range(rows.shape[1]):
        q[:, i] = np.clip(np.rint(rows[:, i] / step), -top - 1, top)
        err = (rows[:, i] - q[:, i] * step) / upper[i, i]
        rows[:, i + 1:] -= np.outer(err, upper[i, i + 1:])
    q[:, order] = q.copy()
    return q.reshape(w.shape).astype(np.int8), step
