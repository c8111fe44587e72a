"""ONNX Runtime on SRCNN with its fixed bicubic upsampler folded into conv1 (pipeline.export.fold.FoldedSRCNN).

For an integer scale s the folded net computes conv1/conv2 (and conv3) on the low-resolution grid and
is exact against the reference model (fp32 rounding only); the HR-sized upsampled image and 64-channel
HR feature map are never built. One folded ONNX per (weights, scale) is cached like the other
artifacts. Scales that are not integers, and images smaller than the folded border strips, run the
model's own exported graph in ONNX Runtime (the same maths); `describe()` and `last_path` say which ran.
"""
from __future__ import annotations

import os
import tempfile
import warnings
from pathlib import Path

import numpy as np

from pipeline.backends.base import Backend
from pipeline.backends.checks import check_batch, model_spec
from pipeline.backends.ort_backend import OrtBackend, cpu_session_options
from pipeline.errors import PipelineError

FOLDABLE = ("srcnn", "srcnn-x3")


def folded_onnx_for(model: str, scale: int, weights=None, folded=None) -> Path:
    """Cached ONNX of the folded model at an integer scale (exported atomically when missing)."""
    from pipeline.artifacts.cache import cache_dir, weights_sha256

    sha = weights_sha256(model, weights)
    path = cache_dir() / "onnx" / f"{model}-fp32-folded-x{scale}-w{sha[:16]}.onnx"
    if path.is_file() and path.stat().st_size > 0:
        return path
    from models.registry import load_model
    from pipeline.export.fold import export_folded_onnx, fold_srcnn

    folded = folded if folded is not None else fold_srcnn(load_model(model, weights), scale)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".fold-", dir=path.parent) as tmp:
        tmp_file = Path(tmp) / path.name
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the legacy exporter's deprecation chatter
            export_folded_onnx(folded, tmp_file)
        os.replace(tmp_file, path)
    return path


class OrtFoldedBackend(Backend):
    name = "ort-folded"

    def __init__(self, model: str, precision: str = "fp32", *, weights=None, threads: int | None = None,
                 exporter: str = "dynamo", log=None):
        if model not in FOLDABLE:
            raise PipelineError(f"ort-folded applies to SRCNN ({', '.join(FOLDABLE)}), not '{model}'")
        if precision != "fp32":
            raise PipelineError("ort-folded is fp32 only (use ort for the fp16 graph)")
        self.model_name = model
        self.spec = model_spec(model)
        self.precision = precision
        self.device = "cpu"
        self.weights = weights
        self.threads = threads
        self.exporter = exporter
        self.log = log
        self.sessions: dict[int, tuple[object, int]] = {}
        self.plain: OrtBackend | None = None
        self.last_path = None

    def load(self) -> OrtFoldedBackend:
        try:
            import onnxruntime  # noqa: F401

            from pipeline.export.fold import fold_srcnn  # noqa: F401
        except ImportError as e:
            raise PipelineError(f"ort-folded needs onnxruntime and pipeline.export.fold ({e})") from None
        from models.registry import WeightsError, load_model

        try:
            self.net = load_model(self.model_name, self.weights)
        except WeightsError as e:
            raise PipelineError(str(e)) from None
        if not self.spec.dynamic_scale:  # static model: its one scale is built now
            self._session(int(self.spec.default_scale))
        return self

    def _session(self, scale: int):
        if scale not in self.sessions:
            import onnxruntime as ort

            from pipeline.export.fold import fold_srcnn

            folded = fold_srcnn(self.net, scale)
            path = folded_onnx_for(self.model_name, scale, self.weights, folded)
            sess = ort.InferenceSession(str(path), cpu_session_options(self.threads), providers=["CPUExecutionProvider"])
            self.sessions[scale] = (sess, folded.min_lr)
        return self.sessions[scale]

    def _plain(self) -> OrtBackend:
        if self.plain is None:
            self.plain = OrtBackend(self.model_name, "fp32", provider="cpu", weights=self.weights,
                                    threads=self.threads, exporter=self.exporter, log=self.log).load()
        return self.plain

    def infer(self, batch: np.ndarray, scale: float) -> np.ndarray:
        s = check_batch(batch, self.spec, scale, self.name)
        k = int(round(float(scale)))
        if k == float(scale) and k >= 2:
            sess, min_lr = self._session(k)
            if min(s.h, s.w) >= min_lr:
                self.last_path = f"folded x{k}"
                (y,) = sess.run(None, {"input": np.ascontiguousarray(batch)})
                if y.shape != (s.n, 3, s.out_h, s.out_w):
                    raise PipelineError(f"ort-folded: output {y.shape} != expected {(s.n, 3, s.out_h, s.out_w)}")
                return y
        self.last_path = "plain graph"
        return self._plain().infer(batch, scale)

    def describe(self) -> str:
        return ("ort-folded (CPUExecutionProvider, fp32, bicubic folded into conv1 for integer scales; "
                "other scales and tiny images: the plain graph)")
