"""OpenVINO on the CPU: the exported file as it is (our sr ops through its ONNX frontend's conversion extensions,
pipeline.native.openvino_ops), in fp32 or bf16 (its inference precision; AMX/AVX512-BF16 CPUs only), or int8: the
file's Q/DQ version (pipeline.export.quantize).

SRCNN's folded variants (bicubic folded into conv1, exact at integer scales) run where the file carries them, as
ort-folded does; other scales and small images run the model's own graph. `last_path` says which ran.
"""
from __future__ import annotations

import re
import threading
from pathlib import Path

import numpy as np

from models.spec import ModelSpec
from pipeline.artifacts.identity import check_weights, resolve
from pipeline.artifacts.onnx_file import (
    check_onnx_precision,
    folded_problem,
    folded_variants,
    onnx_metadata,
    path_or_file,
)
from pipeline.backends import pixels as px
from pipeline.backends.base import Backend, BackendStatus, installed
from pipeline.backends.checks import check_batch
from pipeline.backends.ort_backend import fp32_source, onnx_source_problem
from pipeline.errors import PipelineError, check_choice, first_line
from pipeline.export.cached import onnx_for
from pipeline.export.quantize import int8_cached, int8_file, int8_path
from pipeline.native.cpu import bf16_problem
from pipeline.native.machine import package_version
from pipeline.native.openvino_bf16 import compile_config
from pipeline.native.openvino_ops import extensions
from pipeline.native.ort_session import physical_cores
from pipeline.precisions import DEFAULT


def inference_hint(precision: str) -> str:
    """OpenVINO's inference precision for `precision` on this CPU: f32 for fp32, else bf16 where the CPU has bf16
    arithmetic. The file is the fp32 export, or for int8 its Q/DQ version, whose float parts (the layers the int8
    recipe leaves out) run bf16: its int8 layers take the time, the float ones are accurate enough in bf16 (measured
    with the file: pipeline.quality). bf16 itself is refused without bf16 arithmetic (see status); int8's float
    parts fall back to f32, and its loss is measured per machine."""
    return "f32" if precision == DEFAULT or bf16_problem() else "bf16"


_WHERE = re.compile(r"(Exception from|Check '.*' failed at) \S+:\d+:?")  # OpenVINO's source locations
# a conversion extension's refusal (ours: pipeline.native.openvino_ops) inside OpenVINO's conversion report
_REFUSED = (re.compile(r"PipelineError: (?P<why>[^\n]+)"),
            re.compile(r"While validating ONNX node '[^'\n]*': (?P<why>[^\n]+)"))


def openvino_cause(e: BaseException) -> str:
    """OpenVINO's message without the source locations it opens with (`core.cpp:84:`): its first line that says
    something, with the next one when it only introduces it (`FrontEnd API failed with GeneralFailure:`); an sr
    op's refusal from its conversion report."""
    for refused in _REFUSED:
        if m := refused.search(str(e)):
            return m["why"].strip()
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip() and not _WHERE.fullmatch(ln.strip())]
    if not lines:
        return first_line(e)
    return f"{lines[0]} {lines[1]}" if lines[0].endswith(":") and len(lines) > 1 else lines[0]


def version() -> str:
    return package_version("openvino") or "?"


def layer_times(request, feeds: dict, calls: int) -> list[dict]:
    """An infer request's (compiled with PERF_COUNT) executed layers summed per op type and kernel, the median over
    `calls` calls after one that allocates, largest first: {"op", "kernel", "ms"}."""
    request.infer(feeds)
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(calls):
        request.infer(feeds)
        call: dict[tuple[str, str], float] = {}
        for layer in request.profiling_info:
            if layer.status == layer.Status.EXECUTED:
                key = (layer.node_type, layer.exec_type)
                call[key] = call.get(key, 0.0) + layer.real_time.total_seconds() * 1e3
        for key, ms in call.items():
            times.setdefault(key, []).append(ms)
    rows = [{"op": op, "kernel": kernel, "ms": round(float(np.median(v)), 3)} for (op, kernel), v in times.items()]
    return sorted(rows, key=lambda r: -r["ms"])


def check_output(y: np.ndarray, s) -> None:
    """The output's shape against the checked batch `s` (pipeline.backends.checks.check_batch)."""
    if y.shape != (s.n, 3, s.out_h, s.out_w):
        raise PipelineError(f"openvino: output {y.shape} != expected {(s.n, 3, s.out_h, s.out_w)}")


class StreamPending(px.Pending):
    """A request started on one of OpenVINO's streams: `result(out)` waits for it and converts its output as
    infer_pixels does (the request goes back to the free ones once its output is read)."""

    def __init__(self, request, free: list, feeds: dict, shape, depth: int):
        self.request, self.free, self.feeds, self.shape, self.depth = request, free, feeds, shape, depth

    def result(self, out=None):
        try:
            self.request.wait()
            y = self.request.get_output_tensor(0).data
            check_output(y, self.shape)
            samples, counts = px.samples_checked(y, self.depth)
        except RuntimeError as e:  # OpenVINO's errors
            raise PipelineError(f"openvino: {openvino_cause(e)}") from None
        finally:
            self.feeds = None
        self.free.append(self.request)  # only now: its output was read
        return px.Ready(samples, counts).result(out)


class OpenVinoBackend(Backend):

    def __init__(self, model: str | None, precision: str = "fp32", *, onnx: str | Path | None = None, weights=None,
                 threads: int | None = None, exporter: str = "dynamo", log=None, progress=None, chatter=None,
                 float_parts: str | None = None):
        self.precision = check_choice("precision", precision, self.DESCRIPTOR.precisions)
        if float_parts is not None and precision != "int8":
            raise PipelineError(f"float_parts applies to openvino int8 only, not {precision}")
        # int8's float layers: what its Choice says, else bf16 where the CPU has it (inference_hint)
        self.hint = inference_hint(precision) if float_parts is None else \
            check_choice("int8 float parts", float_parts, ("bf16", "f32"))
        self.spec = resolve(model, onnx)
        self.model_name = self.spec.name
        self.onnx_path = path_or_file(onnx)  # an opened file keeps its parsed metadata
        self.weights, self.threads, self.exporter, self.log = weights, threads, exporter, log
        self.progress, self.chatter = progress, chatter  # an int8 file's calibration: its bar, the quantizer's talk
        self.device = "cpu"
        self.compiled: dict[int, tuple] = {}  # 0: the model's graph; k: the folded xk graph -> (request, min_lr)
        self.variants: dict[int, Path] = {}
        self.last_path = None
        self._lock = threading.Lock()  # one infer request per graph, shared by the threads that call infer
        self.streams = 1  # run_streams: submissions at once
        self.streamed: dict[tuple[int, int], tuple] = {}  # (graph, streams) -> (compiled, free requests, names)

    @classmethod
    def status(cls, spec: ModelSpec, precision: str, *, onnx=None, engine=None, weights=None) -> BackendStatus:
        if engine is not None:
            return cls.no("an engine file runs on TensorRT only")
        if precision not in cls.DESCRIPTOR.precisions:
            runs = " and ".join(cls.DESCRIPTOR.precisions)
            return cls.no(f"runs {runs} (the fp32 file, at OpenVINO's inference precision)")
        if not installed("openvino"):
            return cls.no("OpenVINO is not installed (pip install 'openvino==2026.4.*')")
        if precision == "bf16" and (why := bf16_problem()):
            return cls.no(why)
        problem = onnx_source_problem(spec, "fp32", onnx, weights)
        if problem:
            return cls.no(problem)
        return cls.ok(f"OpenVINO {version()} CPU, {precision}; sr ops through its ONNX frontend's conversion "
                      "extensions (folded SRCNN at integer scales)")

    def resolve_onnx(self) -> Path:
        """The fp32 file: the given one (checked) or the cached export (made on a miss)."""
        if self.onnx_path is not None:
            check_onnx_precision(self.onnx_path, "fp32")
            return self.onnx_path
        check_weights(self.spec, self.weights)
        return onnx_for(self.model_name, "fp32", exporter=self.exporter, weights=self.weights, log=self.log)

    def load(self) -> OpenVinoBackend:
        # bf16 asked for, or int8 with bf16 float parts: never run f32 silently in its place
        if "bf16" in (self.precision, self.hint) and (why := bf16_problem()):
            raise PipelineError(f"openvino {self.precision}{'' if self.precision == 'bf16' else ' bf16 float parts'}: "
                                f"{why}")
        self.onnx_file = self.resolve_onnx()
        # the folded graphs only speed integer scales up: a file copied without its siblings runs its own graph
        self.variants = {k: p for k, p in folded_variants(self.onnx_file).items() if p.is_file()}
        if problem := folded_problem(self.onnx_file, self.variants):
            raise PipelineError(f"openvino cannot run {self.onnx_file.name}: {problem}; export it again")
        # the graph the default scale runs, now: a file OpenVINO cannot read fails here, before any image (int8: the
        # model's own graph, which an integer scale with a folded graph never runs, is quantized when first needed)
        k = int(self.spec.default_scale) if float(self.spec.default_scale).is_integer() else 0
        self._graph(k if self.precision == "int8" and k in self.variants else 0)
        return self

    def _compile(self, path: Path, profile: bool = False, streams: int = 1):
        import openvino as ov


        hint = self.hint
        core = ov.Core()
        threads = self._threads()
        # our own kernels (the bf16 DeformConv2d) take a stream's share of the threads, as OpenVINO's own do
        for ext in extensions(self.threads if streams == 1 else max(1, threads // streams), bf16=hint == "bf16"):
            core.add_extension(ext)
        config = {"INFERENCE_PRECISION_HINT": hint}
        if streams > 1:  # each stream runs one request on threads / streams cores
            config |= {"NUM_STREAMS": streams, "INFERENCE_NUM_THREADS": threads}
        else:
            config["PERFORMANCE_HINT"] = "LATENCY"
            if self.threads:
                config["INFERENCE_NUM_THREADS"] = int(self.threads)
        if profile:  # per-layer counters (op_breakdown): a compilation of its own, so infer's request keeps none
            config["PERF_COUNT"] = True
        try:
            model = core.read_model(str(path))
            return core.compile_model(model, "CPU", {**config, **compile_config(model)})
        except Exception as e:  # OpenVINO raises RuntimeError subclasses of its own
            raise PipelineError(f"OpenVINO cannot load {path.name}: {openvino_cause(e)}") from None

    def _file(self, scale: int) -> Path | None:
        """The file the model's graph (0) or the folded xk graph runs: int8, its Q/DQ file (made on a miss)."""
        path = self.onnx_file if scale == 0 else self.variants.get(scale)
        if path is None or self.precision != "int8":
            return path
        return int8_file(path, scale or self.spec.default_scale, log=self.log, progress=self.progress,
                         chatter=self.chatter)

    def _graph(self, scale: int) -> tuple | None:
        """(infer request, input names, smallest LR side) of the model's graph (0) or the folded xk graph."""
        if scale not in self.compiled:
            path = self._file(scale)
            if path is None:
                return None
            compiled = self._compile(path)
            min_lr = int(onnx_metadata(path).get("min_lr", 0)) if scale else 0
            names = {n for port in compiled.inputs for n in port.get_names()}
            self.compiled[scale] = (compiled.create_infer_request(), names, min_lr)
        return self.compiled[scale]

    def model_file(self) -> Path | None:
        """int8: the model graph's Q/DQ file (a new recipe is a new file); else the fp32 file."""
        return int8_path(self.onnx_file) if self.precision == "int8" else self.onnx_file

    def run_file(self, scale: float) -> Path | None:
        """The file that runs at `scale`: the folded graph's at an integer scale that has one (int8: its Q/DQ
        file, made now on a miss), else the model graph's."""
        k = int(round(float(scale)))
        return self._file(k if k == float(scale) and k in self.variants else 0)

    def files(self, scale: float) -> list[Path]:
        """The fp32 file (its folded siblings travel beside it) and, for int8, the Q/DQ files of the model's graph
        and of the graph that runs at `scale`: a small image runs the model's graph at any scale."""
        return list(dict.fromkeys(p for p in (self.onnx_file, self._file(0), self.run_file(scale)) if p is not None))

    def _which(self, s, scale: float) -> int:
        """The graph a checked batch `s` runs at `scale`: the folded xk graph where it has one and the image is not
        smaller than its strips, else the model's own (0)."""
        k = int(round(float(scale)))
        folded = self._graph(k) if k == float(scale) and k in self.variants else None
        return k if folded is not None and min(s.h, s.w) >= folded[2] else 0

    def _feeds(self, batch: np.ndarray, s, names: set) -> dict:
        feeds = {"input": np.ascontiguousarray(batch, dtype=np.float32)}
        if "size" in names:
            feeds["size"] = np.array([s.out_h, s.out_w], dtype=np.int64)
        return feeds

    def infer(self, batch: np.ndarray, scale: float) -> np.ndarray:
        s = check_batch(batch, self.spec, scale, self.name)
        k = self._which(s, scale)
        request, names, _ = self._graph(k)
        feeds = self._feeds(batch, s, names)
        with self._lock:
            self._ran(k)
            request.infer(feeds)
            y = np.array(request.get_output_tensor(0).data, dtype=np.float32)  # a copy: the request reuses it
        check_output(y, s)
        return y

    # -- streams: several submissions at once, each on its share of the cores (a folder's images) ----------------

    def run_streams(self, wanted: int) -> int:
        """OpenVINO's CPU streams for submit_pixels: up to `wanted`, at most one per core (the graphs compiled for
        them on first use, beside the one-call graphs `infer` keeps)."""
        self.streams = max(1, min(int(wanted), self._threads()))
        return self.streams

    def _threads(self) -> int:
        """The inference threads the streams share: the given count, else one per physical core."""
        return self.threads or physical_cores()

    def _ran(self, k: int) -> None:
        self.last_path = f"folded x{k}" if k else "model graph"

    def _stream_request(self, k: int):
        """A free infer request of graph k compiled for `streams` streams, and its input names (a new request when
        all are busy: a caller keeping more in flight waits in OpenVINO's queue, never on a request in use)."""
        with self._lock:
            got = self.streamed.get((k, self.streams))
            if got is None:
                compiled = self._compile(self._file(k), streams=self.streams)
                names = {n for port in compiled.inputs for n in port.get_names()}
                got = self.streamed[(k, self.streams)] = (compiled, [], names)
            compiled, free, names = got
            return (free.pop() if free else compiled.create_infer_request()), free, names

    def submit_pixels(self, pixels: np.ndarray, scale: float) -> px.Pending:
        """One stream's request started now when streams are on (run_streams), collected by `result`; else the
        one-call path, computed now."""
        if self.streams == 1:
            return super().submit_pixels(pixels, scale)
        import openvino as ov

        px.check_pixels(pixels, self.name)
        unit = px.to_unit(pixels)
        s = check_batch(unit, self.spec, scale, self.name)
        k = self._which(s, scale)
        request, free, names = self._stream_request(k)
        feeds = self._feeds(unit, s, names)
        for name, value in feeds.items():  # the tensors share the arrays, which the pending keeps alive
            request.set_tensor(name, ov.Tensor(value, shared_memory=True))
        self._ran(k)
        request.start_async()
        return StreamPending(request, free, feeds, s, 16 if pixels.dtype == np.uint16 else 8)

    def op_breakdown(self, size: int, scale: float, calls: int = 5) -> list[dict] | None:
        """OpenVINO's per-layer counters (PERF_COUNT) of the graph that runs a `size`x`size` image at `scale`."""
        k = int(round(float(scale)))
        folded = k == float(scale) and k in self.variants and size >= self._graph(k)[2]
        compiled = self._compile(self._file(k if folded else 0), profile=True)
        x = np.random.default_rng(0).random((1, 3, size, size), dtype=np.float32)
        feeds = {"input": x}
        if "size" in {n for port in compiled.inputs for n in port.get_names()}:
            out = round(size * float(scale))
            feeds["size"] = np.array([out, out], dtype=np.int64)
        return layer_times(compiled.create_infer_request(), feeds, calls)

    def decided(self) -> dict[str, str]:
        return {"float_parts": self.hint} if self.precision == "int8" else {}

    @classmethod
    def planned_files(cls, model: str, precision: str, scale: float, options: dict) -> list[Path] | None:
        """files(scale) of a load: the fp32 file and, for int8, the cached Q/DQ files (made on a miss: None)."""
        fp32 = fp32_source(model, options) if precision in cls.DESCRIPTOR.precisions else None
        if fp32 is None:
            return None
        variants = {k: p for k, p in folded_variants(fp32).items() if p.is_file()}
        if folded_problem(fp32, variants):
            return None
        k = int(round(float(scale)))
        runs = variants[k] if k == float(scale) and k in variants else fp32  # as run_file picks it
        if precision != "int8":
            return list(dict.fromkeys((fp32, runs)))
        int8 = [int8_cached(p) for p in (fp32, runs)]
        return None if None in int8 else list(dict.fromkeys((fp32, *int8)))  # type: ignore[arg-type]

    @classmethod
    def settles(cls, precision: str, options: dict) -> dict[str, str]:
        """int8's float parts: the ones asked for, else bf16 where the CPU has it (inference_hint)."""
        return {"float_parts": options.get("float_parts") or inference_hint(precision)} if precision == "int8" else {}

    def describe(self) -> str:
        ran = f", last: {self.last_path}" if self.last_path else ""
        floats = f", float parts {self.hint}" if self.precision == "int8" else ""
        return f"openvino {version()} (cpu, {self.precision}{floats}{ran})"
