"""TensorRT runner: engine + execution context, enqueued with execute_async_v3 on a CUDA stream.

Device buffers are torch CUDA tensors that only grow, so rebinding to another tile shape sets shapes and
addresses and allocates nothing; the `size` shape tensor is fed from host memory (TensorRT reads shape-tensor
values on the host); with `cuda_graph=True` the enqueue of each bound shape is captured once it was seen GRAPH_AFTER
times and kept (the GRAPHS latest shapes, as the torch backend does), so tile groups of one shape replay their graph
on every image instead of recapturing it. `infer_pixels` / `submit_pixels` send integer pixels through
double-buffered pinned slots (pipeline.backends.pixels.PixelSlots) and convert them on the device around the same
bound buffers. One lock serialises calls: the context, its buffers, the graph and the slots are shared. The engine
comes from `engine=FILE` (refused if its sidecar says it is stale/foreign) or from the artifact cache, where it is
built when missing and rebuilt when stale."""
from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

from models.spec import ModelSpec, output_size
from pipeline.artifacts.cache import engine_for
from pipeline.artifacts.identity import resolve
from pipeline.artifacts.onnx_file import path_or_file
from pipeline.backends import pixels as px
from pipeline.backends.base import (
    ENGINE_BYTES_PER_OUTPUT_PIXEL,
    Backend,
    BackendStatus,
    DeviceMemory,
    check_precision,
    installed,
)
from pipeline.backends.checks import check_batch, check_scale
from pipeline.backends.ort_backend import onnx_source_problem
from pipeline.engine import (
    DERIVED,
    INSTALL_HINT,
    Profile,
    check_engine,
    current_environment,
    default_profile,
    ensure_engine,
    load_plugins,
    profile_for_input,
    sidecar_profiles,
    sidecar_tf32,
    source_precision,
    tensorrt_problem,
    validate_profile,
)
from pipeline.errors import PipelineError
from pipeline.export.cached import onnx_for
from pipeline.native.cuda_driver import gpu_visible
from pipeline.native.libraries import trt_plugin_library


class TrtBackend(Backend):
    # bf16 and int8: strongly typed engines made from the fp32 file (pipeline.engine.precision)
    GRAPH_AFTER = 2  # a bound shape is captured once seen this often: one-off edge crops run directly
    GRAPHS = 4  # captured shapes kept

    def __init__(self, model: str | None, precision: str = "fp32", *, engine: str | Path | None = None,
                 onnx: str | Path | None = None, profile: dict | None = None, weights=None,
                 cuda_graph: bool = False, device: int = 0, log=None):
        self.precision = check_precision(precision, self.DESCRIPTOR.precisions)
        self.spec = resolve(model, onnx, engine)
        self.model_name = self.spec.name
        self.engine_path = Path(engine) if engine is not None else None
        self.onnx_path = path_or_file(onnx)  # an opened file keeps its parsed metadata
        self.profile = profile
        self.weights = weights
        self.cuda_graph = bool(cuda_graph)
        self.device = f"cuda:{device}"
        self.log = log or (lambda msg: None)
        self.context: Any = None  # TensorRT's IExecutionContext, once loaded
        self.engine_file: Path | None = None  # the engine loaded
        self.tf32: bool | None = None  # whether it may use TF32 (its sidecar says), once loaded
        self.graph: str | None = None  # the graph it was built from (its sidecar says), once loaded

    @classmethod
    def status(cls, spec: ModelSpec, precision: str, *, onnx=None, engine=None, weights=None) -> BackendStatus:
        gpu = gpu_visible()
        if not gpu[0] or not installed("tensorrt"):  # asked without importing torch (seconds) or TensorRT
            missing = [m for m, bad in ((gpu[1], not gpu[0]), ("TensorRT is not installed", not installed("tensorrt")))
                       if bad]
            return cls.no("TensorRT engines need a CUDA GPU and TensorRT 11: " + " and ".join(missing) + "; "
                          + INSTALL_HINT)
        problem = tensorrt_problem()
        if problem:
            return cls.no(problem)
        try:
            trt_plugin_library()
        except PipelineError as e:
            return cls.no(str(e))
        problem = None if engine is not None else onnx_source_problem(spec, source_precision(precision), onnx, weights)
        if problem:
            return cls.no(problem)
        import tensorrt as trt

        return cls.ok(f"TensorRT {trt.__version__} with our sr plugins")

    def model_file(self) -> Path | None:
        """The engine loaded (None before load): what a bf16/int8 engine's measured held-out loss is kept for, so
        `--precision auto` holds every engine to its budget, and a rebuilt engine (its own tactics, perhaps its own
        graph) is measured anew."""
        return self.engine_file

    def model_options(self) -> dict:
        """The options that load the same model as an engine of another precision (the fp32 reference)."""
        return {"onnx": self.onnx_path, "weights": self.weights, "profile": self.profile}

    # -- loading ---------------------------------------------------------------------------------------
    def _engine_and_sidecar(self, env: dict, plugin_lib: Path) -> tuple[Path, dict]:
        if self.engine_path is not None:  # the user's file: refuse when stale, never rebuild behind their back
            sidecar = check_engine(self.engine_path, env)  # its model was checked when self.spec was resolved
            if sidecar.get("precision") != self.precision:
                raise PipelineError(f"{self.engine_path.name} is a {sidecar.get('precision')} engine, "
                                    f"but precision {self.precision} was requested")
            return self.engine_path, sidecar
        derived = self.precision in DERIVED  # bf16 and int8 engines are made from the fp32 file
        onnx = self.onnx_path or onnx_for(self.model_name, source_precision(self.precision), "custom",
                                          weights=self.weights, log=self.log)
        profile = Profile.from_dict(self.profile) if self.profile else default_profile(self.spec)
        profiles = [validate_profile(profile, self.spec)]
        key = {"profiles": [p.to_dict() for p in profiles], **({"precision": self.precision} if derived else {})}
        path = engine_for(onnx, key)
        sidecar = ensure_engine(onnx, path, profiles, precision=self.precision, plugin_lib=plugin_lib, log=self.log)
        return path, sidecar

    def load(self) -> TrtBackend:
        problem = tensorrt_problem()
        if problem:
            raise PipelineError(problem)
        import tensorrt as trt
        import torch

        plugin_lib = trt_plugin_library()
        load_plugins(plugin_lib)
        env = current_environment(plugin_lib)
        path, sidecar = self._engine_and_sidecar(env, plugin_lib)
        self.profiles = sidecar_profiles(sidecar)
        self.tf32 = sidecar_tf32(sidecar)
        self.graph = sidecar.get("graph")  # bf16/int8: the folded graph or the model's (pipeline.engine.precision)
        self._logger = trt.Logger(trt.Logger.WARNING)
        self._runtime = trt.Runtime(self._logger)
        engine = self._runtime.deserialize_cuda_engine(path.read_bytes())
        if engine is None:
            raise PipelineError(f"TensorRT could not deserialize {path} (see the TensorRT log above)")
        self.engine = engine
        self.engine_file = path
        self.context = engine.create_execution_context()
        self.stream = torch.cuda.Stream(device=self.device)
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        inputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        outputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.OUTPUT]
        if "input" not in inputs or len(outputs) != 1:
            raise PipelineError(f"{path.name}: expected inputs 'input'[, 'size'] and one output, "
                                f"got {inputs} -> {outputs}")
        self.out_name = outputs[0]
        to_torch = {trt.DataType.FLOAT: torch.float32, trt.DataType.HALF: torch.float16}
        try:
            self.in_dtype = to_torch[engine.get_tensor_dtype("input")]
            self.out_dtype = to_torch[engine.get_tensor_dtype(self.out_name)]
        except KeyError:
            raise PipelineError(f"{path.name}: unsupported I/O dtype (expected float32 or float16)") from None
        self.has_size = "size" in inputs
        if self.has_size != self.spec.dynamic_scale:
            raise PipelineError(f"{path.name}: 'size' input {'present' if self.has_size else 'missing'}, "
                                f"which does not fit model {self.model_name}")
        if self.has_size:
            if engine.get_tensor_dtype("size") != trt.DataType.INT64:
                raise PipelineError(f"{path.name}: the 'size' input must be int64")
            if not engine.is_shape_inference_io("size"):  # a shape tensor: its values are read on the host
                raise PipelineError(f"{path.name}: 'size' is not a shape tensor (rebuild from a stripped graph)")
            self.h_size = torch.zeros(2, dtype=torch.int64).pin_memory()
        self._active_profile = None
        self._bound = None
        self._graphs: OrderedDict = OrderedDict()  # (bound shape, buffer addresses) -> captured CUDA graph
        self._seen: Counter = Counter()  # the same key -> runs without a graph
        self._runs_bound = 0  # runs since the last rebind
        self._buffers = px.Buffers(self.device)  # the bound input and output, grown only
        self._lock = threading.RLock()
        self._slots = px.PixelSlots(self.device, self._lock)
        self._tables = {}  # sample dtype -> float table on the device (pipeline.backends.pixels)
        return self

    # -- inference -------------------------------------------------------------------------------------
    def _bind(self, profile_idx: int, n: int, h: int, w: int, oh: int, ow: int) -> None:
        """(Re)bind shapes and buffers; only when the shape changes, so same-size batches reuse everything."""

        ctx, s = self.context, self.stream
        if profile_idx != self._active_profile:
            ctx.set_optimization_profile_async(profile_idx, s.cuda_stream)
            self._active_profile = profile_idx
        if not ctx.set_input_shape("input", (n, 3, h, w)):
            raise PipelineError(f"trt: input shape {n}x3x{h}x{w} rejected by the engine")
        if self.has_size:
            self.h_size[0], self.h_size[1] = oh, ow
            ctx.set_tensor_address("size", self.h_size.data_ptr())  # host memory: it is a shape tensor
        out_shape = tuple(ctx.get_tensor_shape(self.out_name))
        if out_shape != (n, 3, oh, ow):
            raise PipelineError(f"trt: engine output shape {out_shape} != expected {(n, 3, oh, ow)}")
        self.d_in = self._buffers.get("input", (n, 3, h, w), self.in_dtype)
        self.d_out = self._buffers.get("output", out_shape, self.out_dtype)
        ctx.set_tensor_address("input", self.d_in.data_ptr())
        ctx.set_tensor_address(self.out_name, self.d_out.data_ptr())
        self._bound = (profile_idx, n, h, w, oh, ow)
        self._runs_bound = 0

    def _enqueue(self) -> None:
        if not self.context.execute_async_v3(self.stream.cuda_stream):
            raise PipelineError("trt: execute_async_v3 failed (see the TensorRT log)")

    def _run_bound(self) -> None:
        """Enqueue the bound engine on self.stream (the caller is inside `torch.cuda.stream(self.stream)`). With
        cuda_graph=True a bound shape seen GRAPH_AFTER times is captured and its graph kept for the next times it
        is bound (keyed by the buffers' addresses too: a grown buffer retires the graphs of the old one). The first
        run after a rebind is always direct: TensorRT applies a shape change at its next enqueue, so the context's
        state for this shape is current before a graph is captured or replayed."""
        import torch

        key = (self._bound, self.d_in.data_ptr(), self.d_out.data_ptr())
        graph = self._graphs.get(key) if self.cuda_graph and self._runs_bound > 0 else None
        if graph is None and (not self.cuda_graph or self._runs_bound == 0 or self._seen[key] < self.GRAPH_AFTER - 1):
            self._runs_bound += 1
            if self.cuda_graph:
                self._seen[key] += 1
            self._enqueue()
            return
        if graph is None:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=self.stream):
                self._enqueue()
            self._graphs[key] = graph
            self._seen.pop(key, None)
            while len(self._graphs) > self.GRAPHS:
                self._graphs.popitem(last=False)
        self._graphs.move_to_end(key)
        self._runs_bound += 1
        graph.replay()

    def _bind_for(self, n: int, h: int, w: int, out_h: int, out_w: int) -> None:
        idx = profile_for_input(self.profiles, n, h, w, out_h, out_w)  # before anything is launched
        key = (idx, n, h, w, out_h, out_w)
        if key != self._bound:
            self._bind(*key)

    def infer(self, batch: np.ndarray, scale: float) -> np.ndarray:
        """Float NCHW in and out (gray images, compare): pageable copies, as rare callers need no staging."""
        import torch

        if self.context is None:
            raise PipelineError("trt backend used before load()")
        s = check_batch(batch, self.spec, scale, self.name)
        with self._lock, torch.cuda.stream(self.stream):
            self._bind_for(s.n, s.h, s.w, s.out_h, s.out_w)
            self.d_in.copy_(torch.from_numpy(np.ascontiguousarray(batch)).to(self.device))  # fp16 engines: cast
            self._run_bound()
            return self.d_out.float().cpu().numpy()

    def infer_pixels(self, pixels: np.ndarray, scale: float, out=None) -> np.ndarray:
        return self.submit_pixels(pixels, scale).result(out)

    def submit_pixels(self, pixels: np.ndarray, scale: float) -> px.Pending:
        """Integers up through a pinned slot; conversion (BGR -> RGB) into the engine's bound input and out of its
        bound output on self.stream by pipeline.backends.pixels' rule; integers queued for download into the
        slot. Returns at once (collect with `result`)."""
        import torch

        if self.context is None:
            raise PipelineError("trt backend used before load()")
        px.check_pixels(pixels, self.name)
        n, h, w, _ = pixels.shape
        out_h, out_w = output_size(h, w, check_scale(self.spec, scale))
        with self._lock, torch.cuda.stream(self.stream):
            self._bind_for(n, h, w, out_h, out_w)
            if pixels.dtype not in self._tables:
                self._tables[pixels.dtype] = px.unit_table(pixels.dtype, self.device)
            slot, d_px = self._slots.upload(pixels)
            self.d_in.copy_(px.torch_to_unit(d_px, self._tables[pixels.dtype]))  # NCHW, fp16 for fp16 engines
            self._run_bound()
            samples = torch.empty((n, out_h, out_w, 3), dtype=d_px.dtype, device=self.device)
            return self._slots.download(slot, samples, px.torch_to_samples(self.d_out, samples))

    def device_memory(self) -> DeviceMemory | None:
        """The device's free memory and what a call adds per output pixel: the engine's activations were
        allocated with its context (for its largest profile), so only the I/O buffers grow. Tiles are then
        bounded by the profiles (`max_input_size`), not by memory, wherever an image fits them."""
        import torch

        if self.context is None:
            return None
        free, _total = torch.cuda.mem_get_info(self.device)
        return DeviceMemory(int(free), ENGINE_BYTES_PER_OUTPUT_PIXEL)

    def describe(self) -> str:
        graph = ", CUDA graph" if self.cuda_graph else ""
        tf32 = "" if self.precision != "fp32" or self.tf32 is None else f", TF32 {'on' if self.tf32 else 'off'}"
        source = f" from the {self.graph.split(' (')[0]}" if self.graph and self.precision in DERIVED else ""
        return f"trt ({self.device}, {self.precision}{source}{tf32}{graph}, {self.engine_file or '?'})"
