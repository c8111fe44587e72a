"""ONNX Runtime with our own CPU kernels (libsr_kernels_cpu) registered as sr-domain custom ops.

The graph is the custom-op export with its sr function bodies stripped, so ORT cannot inline the
standard-op fallback: every sr node runs our kernel, exactly as the TensorRT plugins would on a GPU."""
from __future__ import annotations

import inspect

from pipeline.backends.ort_backend import OrtBackend, cpu_session_options
from pipeline.contract import DOMAIN
from pipeline.errors import PipelineError


def sr_node_count(model) -> int:
    return sum(1 for n in model.graph.node if n.domain == DOMAIN)


class OrtSrKernelsBackend(OrtBackend):
    name = "ort-sr-kernels"

    def __init__(self, model: str, precision: str = "fp32", **opts):
        opts.pop("provider", None)
        opts["ops"] = "custom"
        super().__init__(model, precision, provider="cpu", **opts)

    def load(self) -> OrtSrKernelsBackend:
        import onnx

        try:
            from pipeline.export import strip_sr_functions
            from pipeline.native.ort_ops import session_with_sr_kernels
        except ImportError as e:
            raise PipelineError(f"ort-sr-kernels needs pipeline.export and pipeline.native.ort_ops ({e})") from None
        path = self._onnx_file()
        stripped = strip_sr_functions(onnx.load(str(path)))
        if stripped.functions and any(f.domain == DOMAIN for f in stripped.functions):
            raise PipelineError(f"{path.name}: sr function bodies survived stripping; our kernels would not run")
        so = cpu_session_options(self.threads)
        params = inspect.signature(session_with_sr_kernels).parameters
        kwargs = {}
        for key in ("sess_options", "session_options", "options"):
            if key in params:
                kwargs[key] = so
                break
        try:
            sess = session_with_sr_kernels(stripped, **kwargs)
        except PipelineError:
            raise
        except Exception as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise PipelineError(f"ort-sr-kernels cannot load {path.name}: {first}") from None
        self.session = sess
        self.provider = "cpu"
        self.device = "cpu"
        self.onnx_file = path
        self.sr_nodes = sr_node_count(stripped)
        self._inputs = {i.name: i for i in sess.get_inputs()}
        if "input" not in self._inputs:
            raise PipelineError(f"{path.name} has no input named 'input'")
        import numpy as np

        self._in_dtype = np.float16 if self._inputs["input"].type == "tensor(float16)" else np.float32
        self._out_name = sess.get_outputs()[0].name
        return self

    def describe(self) -> str:
        return f"ort-sr-kernels (CPUExecutionProvider + our sr kernels on {getattr(self, 'sr_nodes', '?')} nodes, {self.precision})"
