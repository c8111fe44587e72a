"""`engine` stage: ONNX -> TensorRT 11 engine with our sr plugins, plus a JSON sidecar per engine.

    python -m pipeline engine --onnx model.onnx --output model.engine [--batch 1,1,4 --height 8,256,512 ...]
    python -m pipeline engine --all --onnx-dir outputs/onnx --output-dir outputs/engines [--baseline]

The plugin library is loaded through TensorRT's plugin registry, the sr function bodies are stripped
so the ONNX parser falls back to our plugins, and the network is strongly typed (TensorRT 11 always
is), so an FP16 engine comes from the FP16 ONNX graph. Profiles, sidecars and staleness checks are plain
Python below (tested without TensorRT); only `build_engine` and `current_environment` need it.
"""
from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from .errors import PipelineError

INSTALL_HINT = ("on a machine with an NVIDIA GPU run `.venv/bin/pip install -e '.[gpu]'` "
                "(TensorRT 11 for CUDA 13: tensorrt-cu13)")
SIDECAR_VERSION = 1
# Keys of the sidecar that must match the running machine for an engine to be usable.
ENV_KEYS = ("tensorrt", "gpu", "compute_capability", "plugin_sha256")


# -- what is missing ----------------------------------------------------------------------------------
def _gpu_problem() -> str | None:
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA GPU is visible"
    return None


def _trt_import_problem() -> str | None:
    try:
        import tensorrt  # noqa: F401
    except (ImportError, OSError) as e:  # OSError: bindings present but libnvinfer missing
        detail = str(e).splitlines()[0] if str(e) else type(e).__name__
        return f"TensorRT is not installed ({detail})"
    return None


def tensorrt_problem() -> str | None:
    """None when TensorRT engines can be built and run here, else one line saying what is missing and how to get it."""
    missing = [p for p in (_gpu_problem(), _trt_import_problem()) if p]
    if not missing:
        return None
    return "TensorRT engines need a CUDA GPU and TensorRT 11: " + " and ".join(missing) + "; " + INSTALL_HINT


# -- profiles -----------------------------------------------------------------------------------------
def _triple(value, kind=int, what="value") -> tuple:
    if isinstance(value, str):
        parts = [p for p in value.replace(" ", "").split(",") if p]
    else:
        parts = list(value) if isinstance(value, (list, tuple)) else [value]
    try:
        vals = [kind(p) for p in parts]
    except (TypeError, ValueError):
        raise PipelineError(f"{what}: expected MIN,OPT,MAX numbers, got {value!r}") from None
    if len(vals) == 1:
        vals = vals * 3
    if len(vals) != 3:
        raise PipelineError(f"{what}: expected MIN,OPT,MAX (3 values), got {value!r}")
    return tuple(vals)


@dataclass(frozen=True)
class Profile:
    """One optimisation profile: min/opt/max of batch, input height and width, and the scale range that
    the run-time `size` shape tensor may take (sizes derived with models.registry.output_size)."""

    batch: tuple[int, int, int] = (1, 1, 4)
    height: tuple[int, int, int] = (8, 256, 512)
    width: tuple[int, int, int] = (8, 256, 512)
    scale: tuple[float, float, float] = (2.0, 3.0, 4.0)

    def input_shapes(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        return tuple((self.batch[i], 3, self.height[i], self.width[i]) for i in range(3))

    def size_values(self) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
        """min/opt/max values of the int64 [2] size input (H_out, W_out)."""
        from models.registry import output_size

        return tuple(output_size(self.height[i], self.width[i], self.scale[i]) for i in range(3))

    def to_dict(self) -> dict:
        d = {k: list(v) for k, v in asdict(self).items()}
        d["size"] = [list(s) for s in self.size_values()]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Profile":
        unknown = set(d) - {"batch", "height", "width", "scale", "size"}
        if unknown:
            raise PipelineError(f"profile: unknown keys {sorted(unknown)} (allowed: batch, height, width, scale)")
        default = cls()
        return cls(batch=_triple(d.get("batch", default.batch), int, "batch"),
                   height=_triple(d.get("height", default.height), int, "height"),
                   width=_triple(d.get("width", default.width), int, "width"),
                   scale=_triple(d.get("scale", default.scale), float, "scale"))


def default_profile(spec) -> Profile:
    """Default profile for a model: x2..x4 (its own factor for a static model) on inputs up to 512x512
    (bigger images are tiled by the sr stage), batch up to 4."""
    lo, hi = spec.scale_range
    if not spec.dynamic_scale:
        return Profile(scale=(lo, lo, lo))
    smin, smax = max(lo, 2.0), min(hi, 4.0)
    sopt = min(max(spec.default_scale, smin), smax)
    return Profile(scale=(smin, sopt, smax))


def validate_profile(profile: Profile, spec) -> Profile:
    """Raise PipelineError (one line) if the profile is unordered, empty or outside the model's scale range."""
    for what in ("batch", "height", "width", "scale"):
        lo, opt, hi = getattr(profile, what)
        if not (lo <= opt <= hi):
            raise PipelineError(f"profile {what}: need MIN <= OPT <= MAX, got {lo:g},{opt:g},{hi:g}")
        if lo < 1 or (what != "scale" and any(int(v) != v for v in (lo, opt, hi))):
            raise PipelineError(f"profile {what}: values must be integers >= 1, got {lo:g},{opt:g},{hi:g}")
    for s in profile.scale:
        try:
            spec.check_scale(s)
        except ValueError as e:
            raise PipelineError(f"profile scale: {e}") from None
    if not spec.dynamic_scale and len(set(profile.scale)) != 1:
        raise PipelineError(f"profile scale: model '{spec.name}' has a fixed factor; use {spec.default_scale:g} only")
    out_max = profile.size_values()[2]
    if out_max[0] * out_max[1] * profile.batch[2] > 2**31 - 1:
        raise PipelineError(f"profile: max output {profile.batch[2]}x3x{out_max[0]}x{out_max[1]} is too large for one engine")
    return profile


def profiles_from_config(path: Path, spec) -> list[Profile]:
    """A JSON config: {"profiles": [{"batch": [1,1,4], "height": [8,256,512], "width": ..., "scale": [2,3,4]}]}
    (or a single profile object, or a list). Values may be 'MIN,OPT,MAX' strings."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as e:
        raise PipelineError(f"cannot read profile config {path}: {e.strerror}") from None
    except ValueError as e:
        raise PipelineError(f"profile config {path} is not valid JSON: {e}") from None
    if isinstance(data, dict) and "profiles" in data:
        data = data["profiles"]
    items = data if isinstance(data, list) else [data]
    if not items or not all(isinstance(p, dict) for p in items):
        raise PipelineError(f"profile config {path}: expected a profile object or a list of them")
    return [validate_profile(Profile.from_dict(p), spec) for p in items]


def profile_for_input(profiles: list[Profile], n: int, h: int, w: int, out_h: int, out_w: int) -> int:
    """Index of the first profile that admits this batch, or PipelineError naming the limits."""
    for i, p in enumerate(profiles):
        (smin_h, smin_w), _, (smax_h, smax_w) = p.size_values()
        if (p.batch[0] <= n <= p.batch[2] and p.height[0] <= h <= p.height[2] and p.width[0] <= w <= p.width[2]
                and smin_h <= out_h <= smax_h and smin_w <= out_w <= smax_w):
            return i
    limits = "; ".join(f"batch {p.batch[0]}-{p.batch[2]}, input {p.height[0]}-{p.height[2]} x {p.width[0]}-{p.width[2]}, "
                       f"output {p.size_values()[0][0]}-{p.size_values()[2][0]} x {p.size_values()[0][1]}-{p.size_values()[2][1]}"
                       for p in profiles)
    raise PipelineError(f"input {n}x3x{h}x{w} -> {out_h}x{out_w} is outside the engine's profiles ({limits}); "
                        "use tiling or rebuild the engine with a wider profile")


# -- sidecar ------------------------------------------------------------------------------------------
def sidecar_path(engine: Path) -> Path:
    return Path(str(engine) + ".json")


def make_sidecar(env: dict, *, onnx_file: Path, onnx_sha256: str, model: str, precision: str, ops: str,
                 profiles: list[Profile], io: dict | None = None, build_seconds: float | None = None) -> dict:
    return {
        "sidecar_version": SIDECAR_VERSION,
        **{k: env.get(k) for k in ("tensorrt", "cuda", "gpu", "compute_capability", "plugin_library", "plugin_sha256")},
        "onnx": str(onnx_file),
        "onnx_sha256": onnx_sha256,
        "model": model,
        "precision": precision,
        "ops": ops,
        "profiles": [p.to_dict() for p in profiles],
        "io": io or {},
        "build_seconds": build_seconds,
        "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def read_sidecar(engine: Path) -> dict | None:
    try:
        return json.loads(sidecar_path(engine).read_text())
    except (OSError, ValueError):
        return None


def sidecar_problems(sidecar: dict | None, env: dict, onnx_sha256: str | None = None) -> list[str]:
    """Why an engine cannot be used on this machine (empty list = fresh). `env` = current_environment()."""
    if sidecar is None:
        return ["no readable sidecar (.engine.json), so its TensorRT/GPU/plugin build is unknown"]
    if sidecar.get("sidecar_version") != SIDECAR_VERSION:
        return [f"sidecar version {sidecar.get('sidecar_version')} != {SIDECAR_VERSION}"]
    problems = []
    names = {"tensorrt": "TensorRT", "gpu": "GPU", "compute_capability": "compute capability",
             "plugin_sha256": "plugin library"}
    for key in ENV_KEYS:
        if sidecar.get(key) != env.get(key):
            was, now = sidecar.get(key), env.get(key)
            if key == "plugin_sha256":
                was, now = (str(was)[:12], str(now)[:12])
            problems.append(f"{names[key]} {was} (built) != {now} (here)")
    if onnx_sha256 is not None and sidecar.get("onnx_sha256") != onnx_sha256:
        problems.append("the ONNX file changed since the build")
    return problems


def sidecar_profiles(sidecar: dict) -> list[Profile]:
    return [Profile.from_dict(p) for p in sidecar.get("profiles", [])]


def check_engine(engine: Path, env: dict, onnx_sha256: str | None = None) -> dict:
    """Sidecar of a usable engine, or PipelineError saying why it is stale/foreign and how to rebuild."""
    engine = Path(engine)
    if not engine.is_file():
        raise PipelineError(f"engine not found: {engine} (build it with `python -m pipeline engine` / `make engine`)")
    sidecar = read_sidecar(engine)
    problems = sidecar_problems(sidecar, env, onnx_sha256)
    if problems:
        raise PipelineError(f"engine {engine.name} is stale or foreign: {'; '.join(problems)}; rebuild it with "
                            f"`python -m pipeline engine --onnx {sidecar.get('onnx', 'MODEL.onnx') if sidecar else 'MODEL.onnx'} "
                            f"--output {engine}`")
    return sidecar


# -- TensorRT (needs the library and a GPU) -----------------------------------------------------------
def current_environment(plugin_lib: Path | None = None) -> dict:
    import tensorrt as trt
    import torch

    from models.registry import file_sha256

    if plugin_lib is None:
        from .native import trt_plugin_library

        plugin_lib = trt_plugin_library()
    props = torch.cuda.get_device_properties(0)
    return {"tensorrt": trt.__version__, "cuda": torch.version.cuda, "gpu": props.name,
            "compute_capability": f"{props.major}.{props.minor}", "plugin_library": str(plugin_lib),
            "plugin_sha256": file_sha256(Path(plugin_lib))}


_LOADED_LIBS: dict[str, object] = {}


def load_plugins(plugin_lib: Path):
    """Register our plugin creators (sr::DynamicResize, sr::DeformConv2d) with TensorRT's plugin registry."""
    import tensorrt as trt

    key = str(Path(plugin_lib).resolve())
    if key not in _LOADED_LIBS:
        registry = trt.get_plugin_registry()
        _LOADED_LIBS[key] = registry.load_library(key)
        for op in ("DynamicResize", "DeformConv2d"):
            if registry.get_creator(op, "1", "sr") is None:
                raise PipelineError(f"{plugin_lib} does not register the TensorRT plugin sr::{op} v1")
    return _LOADED_LIBS[key]


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


def onnx_info(path: Path) -> tuple[object, dict[str, str]]:
    import onnx

    try:
        model = onnx.load(str(path))
    except Exception as e:
        raise PipelineError(f"cannot read ONNX file {path}: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    return model, {p.key: p.value for p in model.metadata_props}


def build_engine(onnx_file: Path, output: Path, profiles: list[Profile], *, plugin_lib: Path | None = None,
                 workspace_mb: int = 1024, opt_level: int = 3, timing_cache: Path | None = None,
                 progress: bool = True, log=print) -> dict:
    """Build and serialize an engine (atomically) and its sidecar; return the sidecar."""
    import tensorrt as trt

    from models.registry import file_sha256

    from .artifacts import cache_dir
    from .atomic import atomic_write
    from .export import strip_sr_functions

    problem = tensorrt_problem()
    if problem:
        raise PipelineError(problem)
    if plugin_lib is None:
        from .native import trt_plugin_library

        plugin_lib = trt_plugin_library()
    onnx_file, output = Path(onnx_file), Path(output)
    model, meta = onnx_info(onnx_file)
    ops = meta.get("ops", "custom")
    precision = meta.get("precision", "fp32")
    if ops == "custom":
        load_plugins(plugin_lib)
        model = strip_sr_functions(model)  # no function bodies: the parser falls back to our plugins
    t0 = time.perf_counter()
    logger = _make_logger()
    builder = trt.Builder(logger)
    # TensorRT 11 networks are always strongly typed (kSTRONGLY_TYPED is deprecated and ignored): tensor types
    # come from the graph, so the FP16 ONNX graph gives an FP16 engine without any builder precision flag.
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(model.SerializeToString()):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise PipelineError(f"TensorRT cannot parse {onnx_file.name}: {errors or 'unknown parser error'}")
    inputs = {network.get_input(i).name for i in range(network.num_inputs)}
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(workspace_mb) << 20)
    config.builder_optimization_level = int(opt_level)
    timing_cache = Path(timing_cache) if timing_cache else cache_dir() / "trt-timing.cache"
    blob = timing_cache.read_bytes() if timing_cache.is_file() else b""
    cache = config.create_timing_cache(blob)
    config.set_timing_cache(cache, False)
    if progress:
        config.progress_monitor = _progress_monitor()
    for p in profiles:
        prof = builder.create_optimization_profile()
        prof.set_shape("input", *p.input_shapes())
        if "size" in inputs:
            prof.set_shape_input("size", *[list(v) for v in p.size_values()])
        config.add_optimization_profile(prof)
    serialized = builder.build_serialized_network(network, config)
    if progress:
        sys.stderr.write("\n")
    if serialized is None:
        raise PipelineError(f"TensorRT failed to build an engine from {onnx_file.name} (see the TensorRT log above)")
    atomic_write(output, bytes(serialized))
    atomic_write(timing_cache, bytes(config.get_timing_cache().serialize()))
    env = current_environment(plugin_lib)
    io = {"inputs": sorted(inputs), "has_size_input": "size" in inputs}
    sidecar = make_sidecar(env, onnx_file=onnx_file, onnx_sha256=file_sha256(onnx_file),
                           model=meta.get("model", "?"), precision=precision, ops=ops, profiles=profiles,
                           io=io, build_seconds=round(time.perf_counter() - t0, 2))
    atomic_write(sidecar_path(output), json.dumps(sidecar, indent=2).encode())
    log(f"engine: {output} ({precision}, {ops} ops, {len(profiles)} profile(s), {sidecar['build_seconds']} s)")
    return sidecar


def plan_engine(engine: Path, env: dict, onnx_sha256: str, profiles: list[Profile]) -> tuple[str, str]:
    """What to do with a cached engine: ("use", why) / ("build", why) / ("rebuild", why). Pure logic."""
    if not Path(engine).is_file():
        return "build", "no engine yet"
    sidecar = read_sidecar(engine)
    problems = sidecar_problems(sidecar, env, onnx_sha256)
    if problems:
        return "rebuild", "; ".join(problems)
    if sidecar.get("profiles") != [p.to_dict() for p in profiles]:
        return "rebuild", "profiles changed"
    return "use", f"up to date (TensorRT {env.get('tensorrt')}, {env.get('gpu')})"


def ensure_engine(onnx_file: Path, output: Path, profiles: list[Profile], *, rebuild_stale: bool = True,
                  log=print, **build_opts) -> dict:
    """Use `output` if its sidecar matches this machine, ONNX file and profiles; else (re)build it, or
    with rebuild_stale=False refuse a stale one with the reason."""
    from models.registry import file_sha256

    env = current_environment(build_opts.get("plugin_lib"))
    onnx_sha = file_sha256(onnx_file)
    action, why = plan_engine(output, env, onnx_sha, profiles)
    if action == "use":
        log(f"engine: {output} is {why}")
        return read_sidecar(output)
    if action == "rebuild":
        if not rebuild_stale:
            check_engine(output, env, onnx_sha)  # raises with the reasons and the rebuild command
            raise PipelineError(f"engine {output} was built with other profiles; rebuild it ({why})")
        log(f"engine {Path(output).name}: rebuilding ({why})")
    return build_engine(onnx_file, output, profiles, log=log, **build_opts)


# -- CLI ----------------------------------------------------------------------------------------------
def add_arguments(parser) -> None:
    parser.add_argument("--onnx", type=Path, help="ONNX file to build (exported by `python -m pipeline export`)")
    parser.add_argument("--output", type=Path, help="engine file to write (a .json sidecar is written next to it)")
    parser.add_argument("--all", action="store_true", help="build every custom-op ONNX file in --onnx-dir")
    parser.add_argument("--onnx-dir", type=Path, default=Path("outputs/onnx"))
    parser.add_argument("--output-dir", type=Path, default=Path("outputs/engines"))
    parser.add_argument("--baseline", action="store_true",
                        help="with --all: also build the --ops standard ONNX files (TensorRT's own Resize/DeformConv)")
    parser.add_argument("--precision", choices=("fp32", "fp16", "all"), default="all",
                        help="with --all: which graphs to build (the precision of a graph is its own; default all)")
    parser.add_argument("--batch", help="MIN,OPT,MAX batch (default 1,1,4)")
    parser.add_argument("--height", help="MIN,OPT,MAX input height (default 8,256,512)")
    parser.add_argument("--width", help="MIN,OPT,MAX input width (default 8,256,512)")
    parser.add_argument("--scale", help="MIN,OPT,MAX scale the size input may take (default 2,3,4 within the model's range)")
    parser.add_argument("--profile-config", type=Path, help="JSON with one or more profiles (overrides the flags)")
    parser.add_argument("--workspace", type=int, default=1024, help="builder workspace limit in MiB (default 1024)")
    parser.add_argument("--opt-level", type=int, default=3, choices=range(0, 6), metavar="0-5",
                        help="builder optimization level (default 3)")
    parser.add_argument("--timing-cache", type=Path, help="timing cache file reused across builds "
                        "(default $SRDEPLOY_CACHE/trt-timing.cache)")
    parser.add_argument("--plugin-lib", type=Path, help="plugin library (default: pipeline.native.trt_plugin_library())")
    parser.add_argument("--force", action="store_true", help="rebuild even when a fresh engine exists")
    parser.add_argument("--quiet", action="store_true", help="no progress line")


def profiles_from_args(args, spec) -> list[Profile]:
    if args.profile_config:
        return profiles_from_config(args.profile_config, spec)
    base = default_profile(spec)
    d = {"batch": args.batch or base.batch, "height": args.height or base.height,
         "width": args.width or base.width, "scale": args.scale or base.scale}
    return [validate_profile(Profile.from_dict(d), spec)]


def _jobs(args) -> list[tuple[Path, Path, dict]]:
    """(onnx, engine, metadata) pairs to build, validated before TensorRT is touched."""
    from .backends.ort_backend import onnx_metadata

    if args.all:
        if not args.onnx_dir.is_dir():
            raise PipelineError(f"ONNX folder not found: {args.onnx_dir} (run `make onnx` first)")
        jobs = []
        for f in sorted(args.onnx_dir.glob("*.onnx")):
            meta = onnx_metadata(f)
            if meta.get("ops", "custom") == "standard" and not args.baseline:
                continue
            if args.precision != "all" and meta.get("precision", "fp32") != args.precision:
                continue
            jobs.append((f, args.output_dir / f"{f.stem}.engine", meta))
        if not jobs:
            raise PipelineError(f"no matching ONNX files in {args.onnx_dir} (run `make onnx` first)")
        return jobs
    if not args.onnx or not args.output:
        raise PipelineError("give --onnx FILE --output FILE.engine, or --all --onnx-dir DIR --output-dir DIR")
    if not args.onnx.is_file():
        raise PipelineError(f"ONNX file not found: {args.onnx}")
    return [(args.onnx, args.output, onnx_metadata(args.onnx))]


def run(args) -> int:
    from models.registry import get_spec

    if args.all and args.onnx:
        raise PipelineError("--all builds a folder; do not combine it with --onnx")
    # Environment first: on a machine without a GPU/TensorRT nothing else matters (one line, no traceback).
    problem = tensorrt_problem()
    if problem:
        raise PipelineError(problem)
    jobs = _jobs(args)
    for onnx_file, engine_file, meta in jobs:
        model = meta.get("model")
        try:
            spec = get_spec(model)
        except KeyError:
            raise PipelineError(f"{onnx_file} has no known 'model' in its metadata (got {model!r}); re-export it") from None
        profiles = profiles_from_args(args, spec)
        opts = dict(plugin_lib=args.plugin_lib, workspace_mb=args.workspace, opt_level=args.opt_level,
                    timing_cache=args.timing_cache, progress=not args.quiet)
        if args.force:
            build_engine(onnx_file, engine_file, profiles, **opts)
        else:
            ensure_engine(onnx_file, engine_file, profiles, **opts)
    return 0
