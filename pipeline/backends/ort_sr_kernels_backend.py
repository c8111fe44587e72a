"""ONNX Runtime with our own CPU kernels (libsr_kernels_cpu) registered as sr-domain custom ops.

The graph is the custom-op export with its sr function bodies stripped, so ORT cannot inline the
standard-op fallback: every sr node runs our kernel, exactly as the TensorRT plugins would on a GPU."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from models.spec import ModelSpec
from pipeline.backends.base import BackendStatus, installed
from pipeline.backends.ort_backend import OrtBackend, onnx_source_problem
from pipeline.contract import DOMAIN
from pipeline.errors import PipelineError, first_line, install_command
from pipeline.export.sr_ops import strip_sr_functions
from pipeline.native import kernels_cpu, ort_ops
from pipeline.native.libraries import cpu_kernels_library
from pipeline.native.ort_ops import session_with_sr_kernels
from pipeline.native.ort_session import cpu_session_options


def sr_node_count(model) -> int:
    return sum(1 for n in model.graph.node if n.domain == DOMAIN)


class OrtSrKernelsBackend(OrtBackend):
    PROVIDER = "cpu"

    def __init__(self, model: str | None, precision: str = "fp32", *, onnx: str | Path | None = None, weights=None,
                 threads: int | None = None, exporter: str = "dynamo", io_dtype: str = "fp32", log=None):
        super().__init__(model, precision, onnx=onnx, weights=weights, threads=threads, exporter=exporter,
                         ops="custom", io_dtype=io_dtype, log=log)
        self.sr_nodes: int | str = "?"  # counted when loaded

    @staticmethod
    def machine_problem() -> str | None:
        """Why this install cannot run our kernels in ORT, or None: the one reason `backends` lists and `sr
        --backend ort-sr-kernels` stops with."""
        if not installed("onnxruntime_extensions"):
            return f"onnxruntime-extensions is not installed (the export extra: {install_command('export')})"
        try:
            kernels_cpu.library()
        except PipelineError as e:
            return str(e)
        return None

    @classmethod
    def status(cls, spec: ModelSpec, precision: str, *, onnx=None, engine=None, weights=None) -> BackendStatus:
        if engine is not None:
            return cls.no("an engine file runs on TensorRT only")
        problem = cls.machine_problem() or onnx_source_problem(spec, precision, onnx, weights)
        if problem:
            return cls.no(problem)
        note = "" if spec.dynamic_scale else f"; {spec.name} has no sr ops, so this is the plain ort graph"
        return cls.ok(f"ONNX Runtime CPU + our sr kernels ({cpu_kernels_library().name}){note}")

    def load(self) -> OrtSrKernelsBackend:
        problem = self.machine_problem()  # a missing library is one line here, not an abort inside ORT (see ort_ops)
        if problem:
            raise PipelineError(problem)
        path = self.resolve_onnx()
        stripped = strip_sr_functions(onnx.load(str(path)))
        if stripped.functions and any(f.domain == DOMAIN for f in stripped.functions):
            raise PipelineError(f"{path.name}: sr function bodies survived stripping; our kernels would not run")
        try:
            sess = session_with_sr_kernels(stripped, cpu_session_options(self.threads))
        except PipelineError:
            raise
        except Exception as e:  # ORT raises its own exception types
            raise PipelineError(f"ort-sr-kernels cannot load {path.name}: {first_line(e)}") from None
        self.provider = "cpu"
        self.device = "cpu"
        self.sr_nodes = sr_node_count(stripped)
        self._attach(sess, path)
        return self

    def decided(self) -> dict[str, str]:
        return {}  # always the CPU provider: not an option of this backend, nothing for its Choice to name

    @classmethod
    def settles(cls, precision: str, options: dict) -> dict[str, str]:
        return {}

    def _run(self, feeds: dict) -> np.ndarray:
        return ort_ops.run(self.session, feeds, [self._out_name])[0]  # a kernel error is a line, not an abort

    def describe(self) -> str:
        return (f"ort-sr-kernels (CPUExecutionProvider + our sr kernels on {self.sr_nodes} nodes, "
                f"{self.precision})")
