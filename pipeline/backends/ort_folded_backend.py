"""ONNX Runtime on SRCNN with its fixed bicubic upsampler folded into conv1 (pipeline.export.fold.FoldedSRCNN).

For an integer scale s the folded net computes conv1/conv2 (and conv3) on the low-resolution grid and
is exact against the reference model (fp32 rounding only); the HR-sized upsampled image and 64-channel
HR feature map are never built. The folded graphs are made at export time and travel beside the ONNX file
(named in its metadata), so no PyTorch is needed here. Scales without a folded graph, and images smaller
than its border strips, run the model's own graph in ONNX Runtime (the same maths); `describe()` and
`last_path` say which ran.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

from models.spec import ModelSpec
from pipeline.artifacts.cache import cached_onnx
from pipeline.artifacts.identity import resolve
from pipeline.artifacts.onnx_file import folded_problem, folded_variants
from pipeline.backends.base import Backend, BackendStatus
from pipeline.backends.checks import check_batch
from pipeline.backends.ort_backend import OrtCpuBackend, fp32_source, onnx_source_problem
from pipeline.errors import PipelineError, first_line
from pipeline.native.ort_session import cpu_session_options


def _folded_problem(spec: ModelSpec, onnx: Path | None, weights=None) -> str | None:
    """Why the ONNX file this backend would use carries no folded variant, or None."""
    if spec.registered and not spec.foldable:  # a registered model says so itself
        return f"bicubic folding applies to SRCNN only, not '{spec.name}'"
    if onnx is None:
        try:
            onnx = cached_onnx(spec.name, "fp32", weights=weights)
        except PipelineError as e:
            return str(e)
        if not onnx.is_file():  # exported on first use; SRCNN exports carry folded variants
            return None
    variants = folded_variants(onnx)
    if not variants:
        return (f"{Path(onnx).name} carries no folded variants (bicubic folding applies to SRCNN fp32 exports "
                "made by this version)")
    missing = [p.name for p in variants.values() if not p.is_file()]
    if missing:
        return f"folded variants named in {Path(onnx).name} are missing: {', '.join(missing)}"
    return None


class OrtFoldedBackend(Backend):

    def __init__(self, model: str | None, precision: str = "fp32", *, onnx: str | Path | None = None, weights=None,
                 threads: int | None = None, exporter: str = "dynamo", log=None):
        if precision != "fp32":
            raise PipelineError("ort-folded is fp32 only (use ort for the fp16 graph)")
        self.spec = resolve(model, onnx)
        self.model_name = self.spec.name
        self.precision = precision
        self.device = "cpu"
        self.threads, self.log = threads, log
        self.plain = OrtCpuBackend(self.model_name, "fp32", onnx=onnx, weights=weights, threads=threads,
                                   exporter=exporter, log=log)
        self.sessions: dict[int, tuple[ort.InferenceSession, int]] = {}
        self.variants: dict[int, Path] = {}
        self.last_path = None

    @classmethod
    def status(cls, spec: ModelSpec, precision: str, *, onnx=None, engine=None, weights=None) -> BackendStatus:
        if engine is not None:
            return cls.no("an engine file runs on TensorRT only")
        if precision != "fp32":
            return cls.no("fp32 only")
        problem = onnx_source_problem(spec, precision, onnx, weights) or _folded_problem(spec, onnx, weights)
        if problem:
            return cls.no(problem)
        return cls.ok("ONNX Runtime CPU on SRCNN with bicubic folded into conv1 (exact; integer scales, others run "
                      "the plain graph)")

    @classmethod
    def planned_files(cls, model: str, precision: str, scale: float, options: dict) -> list[Path] | None:
        """The fp32 file (its folded siblings travel beside it), as the plain backend resolves it."""
        if precision != "fp32" or _folded_problem(resolve(model, options.get("onnx")), options.get("onnx"),
                                                  options.get("weights")):
            return None
        return [path] if (path := fp32_source(model, options)) is not None else None

    def load(self) -> OrtFoldedBackend:
        self.onnx_file = self.plain.resolve_onnx()  # checked against the model; exported into the cache if missing
        # the plain graph of that very file; its session is made on first use: integer scales never need it
        self.plain = OrtCpuBackend(self.model_name, "fp32", onnx=self.onnx_file, threads=self.threads, log=self.log)
        # the same check `backends` reports: a file copied without its folded-x*.onnx siblings is refused here,
        # before any image, not per image when a missing sibling fails to load
        problem = _folded_problem(self.spec, self.onnx_file)
        self.variants = folded_variants(self.onnx_file)
        problem = problem or folded_problem(self.onnx_file, self.variants)
        if problem:
            raise PipelineError(f"ort-folded cannot run: {problem}")
        if not self.spec.dynamic_scale:  # static model: its one scale is loaded now
            self._session(int(self.spec.default_scale))
        return self

    def _session(self, scale: int) -> tuple[ort.InferenceSession, int] | None:
        if scale not in self.variants:
            return None
        if scale not in self.sessions:
            path = self.variants[scale]
            try:
                sess = ort.InferenceSession(str(path), cpu_session_options(self.threads),
                                            providers=["CPUExecutionProvider"])
            except Exception as e:  # ORT raises its own exception types
                raise PipelineError(f"ONNX Runtime cannot load {path}: {first_line(e)}") from None
            min_lr = int(sess.get_modelmeta().custom_metadata_map.get("min_lr", 0))
            self.sessions[scale] = (sess, min_lr)
        return self.sessions[scale]

    def run_file(self, scale: float) -> Path | None:
        """The folded graph at an integer scale that has one, else the plain graph's file."""
        k = int(round(float(scale)))
        return self.variants[k] if k == float(scale) and k in self.variants else self.onnx_file

    def infer(self, batch: np.ndarray, scale: float) -> np.ndarray:
        s = check_batch(batch, self.spec, scale, self.name)
        k = int(round(float(scale)))
        found = self._session(k) if k == float(scale) else None
        if found is not None and min(s.h, s.w) >= found[1]:
            self.last_path = f"folded x{k}"
            (y,) = found[0].run(None, {"input": np.ascontiguousarray(batch)})
            if y.shape != (s.n, 3, s.out_h, s.out_w):
                raise PipelineError(f"ort-folded: output {y.shape} != expected {(s.n, 3, s.out_h, s.out_w)}")
            return y
        self.last_path = "plain graph"
        if self.plain.session is None:
            self.plain.load()
        return self.plain.infer(batch, scale)

    def describe(self) -> str:
        scales = ", ".join(f"x{k}" for k in sorted(self.variants)) or "none loaded"
        threads = self.plain.threads or "default"
        return (f"ort-folded (CPUExecutionProvider, fp32, bicubic folded into conv1 at {scales}; other scales and "
                f"tiny images: the plain graph; threads {threads})")
