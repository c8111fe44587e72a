"""ONNX -> serialized TensorRT engine (atomic) + sidecar, and the cached-engine policy."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from pipeline.artifacts.atomic import atomic_write
from pipeline.artifacts.cache import cache_dir
from pipeline.artifacts.onnx_file import load_onnx
from pipeline.artifacts.stamp import content_sha256
from pipeline.engine.environment import current_environment, tensorrt_problem
from pipeline.engine.plugins import load_plugins
from pipeline.engine.precision import (
    bf16_problem,
    derivation,
    engine_graph,
    engine_precision,
    engine_source,
    graph_note,
)
from pipeline.engine.profiles import Profile
from pipeline.engine.sidecar import (
    check_engine,
    make_sidecar,
    plan_engine,
    read_sidecar,
    sidecar_path,
)
from pipeline.engine.workspace import check_workspace
from pipeline.errors import PipelineError
from pipeline.export.sr_ops import strip_sr_functions
from pipeline.native.libraries import trt_plugin_library


def _make_logger():
    import tensorrt as trt

    return trt.Logger(trt.Logger.WARNING)


def _progress_monitor(stream=sys.stderr):
    import tensorrt as trt

    class Progress(trt.IProgressMonitor):
        """One line, rewritten in place: the innermost builder phase and its step count."""

        def __init__(self):
            trt.IProgressMonitor.__init__(self)
            self.phases: dict[str, tuple[int, int]] = {}

        def phase_start(self, phase_name, parent_phase, num_steps):
            self.phases[phase_name] = (0, num_steps)
            self._show(phase_name)

        def step_complete(self, phase_name, step):
            self.phases[phase_name] = (step + 1, self.phases.get(phase_name, (0, 0))[1])
            self._show(phase_name)
            return True  # False would cancel the build

        def phase_finish(self, phase_name):
            self.phases.pop(phase_name, None)

        def _show(self, phase):
            done, total = self.phases.get(phase, (0, 0))
            stream.write(f"\r  building: {phase} {done}/{total}".ljust(72))
            stream.flush()

    return Progress()


class _Build:
    """One engine build's TensorRT objects (builder, network, config), shared by its steps."""

    def __init__(self):
        import tensorrt as trt

        self.trt = trt
        self.logger = _make_logger()
        self.builder = trt.Builder(self.logger)

    def parse(self, model, onnx_file: Path) -> set[str]:
        """The network from the ONNX graph; returns its input names."""
        trt = self.trt
        # TensorRT 11 networks are always strongly typed (kSTRONGLY_TYPED is deprecated and ignored): tensor types
        # come from the graph, so the FP16 ONNX graph gives an FP16 engine without any builder precision flag.
        self.network = self.builder.create_network(0)
        parser = trt.OnnxParser(self.network, self.logger)
        if not parser.parse(model.SerializeToString()):
            errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
            raise PipelineError(f"TensorRT cannot parse {onnx_file.name}: {errors or 'unknown parser error'}")
        return {self.network.get_input(i).name for i in range(self.network.num_inputs)}

    def configure(self, profiles: list[Profile], inputs: set[str], *, workspace_mb: int, opt_level: int,
                  tf32: bool, timing_cache: Path, progress: bool) -> None:
        """Workspace, optimisation level, TF32 on or off, the timing cache, the profiles."""
        trt = self.trt
        self.config = config = self.builder.create_builder_config()
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(workspace_mb) << 20)
        config.builder_optimization_level = int(opt_level)
        if tf32:
            config.set_flag(trt.BuilderFlag.TF32)
        else:
            config.clear_flag(trt.BuilderFlag.TF32)  # on by default in TensorRT
        blob = timing_cache.read_bytes() if timing_cache.is_file() else b""
        cache = config.create_timing_cache(blob)
        config.set_timing_cache(cache, False)
        if progress:
            config.progress_monitor = _progress_monitor()
        for p in profiles:
            prof = self.builder.create_optimization_profile()
            prof.set_shape("input", *p.input_shapes())
            if "size" in inputs:
                prof.set_shape_input("size", *[list(v) for v in p.size_values()])
            config.add_optimization_profile(prof)

    def serialize(self) -> tuple[bytes | None, bytes]:
        """The engine (None when the build failed) and the updated timing cache."""
        serialized = self.builder.build_serialized_network(self.network, self.config)
        return (None if serialized is None else bytes(serialized)), bytes(self.config.get_timing_cache().serialize())


def build_engine(onnx_file: Path, output: Path, profiles: list[Profile], *, precision: str | None = None,
                 plugin_lib: Path | None = None, workspace_mb: int = 1024, opt_level: int = 3,
                 timing_cache: Path | None = None, progress: bool = True, tf32: bool = False, log=print) -> dict:
    """Build and serialize an engine (atomically) and its sidecar; return the sidecar.

    precision: None or the file's own builds the file as it is; bf16 and int8 build from an fp32 file the graph
    pipeline.engine.precision makes of it. tf32=False (default) keeps FP32 math FP32: TensorRT's TF32 flag off and
    our DeformConv2d GEMMs without TF32, so FP32 engines meet the 1e-4 accuracy checks; tf32=True allows TF32 in
    both, for speed."""
    problem = tensorrt_problem()
    if problem:
        raise PipelineError(problem)
    if plugin_lib is None:
        plugin_lib = trt_plugin_library()
    onnx_file, output = Path(onnx_file), Path(output)
    model, meta = load_onnx(onnx_file)
    ops = meta.get("ops", "custom")
    precision = engine_precision(meta, precision)
    env = current_environment(plugin_lib)
    problem = bf16_problem(env["compute_capability"]) if precision == "bf16" else None
    if problem:
        raise PipelineError(problem)
    check_workspace(workspace_mb, model, profiles, precision)  # before TensorRT spends time on a doomed build
    graph = graph_note(*engine_source(onnx_file, precision, profiles))
    model = engine_graph(onnx_file, model, precision, profiles, log=log)
    if ops == "custom":
        load_plugins(plugin_lib)
        # No function bodies: the parser falls back to our plugins.
        model = strip_sr_functions(model, allow_tf32=tf32)
    t0 = time.perf_counter()
    build = _Build()
    inputs = build.parse(model, onnx_file)
    timing_cache = Path(timing_cache) if timing_cache else cache_dir() / "trt-timing.cache"
    build.configure(profiles, inputs, workspace_mb=workspace_mb, opt_level=opt_level, tf32=tf32,
                    timing_cache=timing_cache, progress=progress)
    serialized, timings = build.serialize()
    if progress:
        sys.stderr.write("\n")
    if serialized is None:
        raise PipelineError(f"TensorRT failed to build an engine from {onnx_file.name} (see the TensorRT log above)")
    atomic_write(output, serialized)
    atomic_write(timing_cache, timings)
    io = {"inputs": sorted(inputs), "has_size_input": "size" in inputs}
    sidecar = make_sidecar(env, onnx_file=onnx_file, onnx_sha256=content_sha256(onnx_file),
                           model=meta.get("model", "?"), precision=precision, ops=ops, profiles=profiles,
                           io=io, build_seconds=round(time.perf_counter() - t0, 2), tf32=tf32,
                           workspace_mb=int(workspace_mb), derivation=derivation(precision))
    sidecar["onnx_metadata"] = meta  # the model spec travels with the engine (pipeline.artifacts.identity.resolve)
    sidecar["graph"] = graph  # the graph parsed: the file's own, or (bf16, int8) the folded one beside it
    atomic_write(sidecar_path(output), json.dumps(sidecar, indent=2).encode())
    log(f"engine: {output} ({precision} from the {graph}, TF32 {'on' if tf32 else 'off'}, {ops} ops, "
        f"{len(profiles)} profile(s), {sidecar['build_seconds']} s)")
    return sidecar


def ensure_engine(onnx_file: Path, output: Path, profiles: list[Profile], *, rebuild_stale: bool = True,
                  log=print, **build_opts) -> dict:
    """Use `output` if its sidecar matches this machine, ONNX file and profiles; else (re)build it, or
    with rebuild_stale=False refuse a stale one with the reason."""

    env = current_environment(build_opts.get("plugin_lib"))
    onnx_sha = content_sha256(onnx_file)  # its external data too: other weights, another engine
    action, why = plan_engine(output, env, onnx_sha, profiles, tf32=bool(build_opts.get("tf32", False)),
                              precision=build_opts.get("precision"))
    if action == "use":
        log(f"engine: {output} is {why}")
        return read_sidecar(output)
    if action == "rebuild":
        if not rebuild_stale:
            check_engine(output, env, onnx_sha)  # raises with the reasons and the rebuild command
            raise PipelineError(f"engine {output} was built with other profiles; rebuild it ({why})")
        log(f"engine {Path(output).name}: rebuilding ({why})")
    return build_engine(onnx_file, output, profiles, log=log, **build_opts)

