"""`python -m pipeline engine`: ONNX -> TensorRT engine(s) with our sr plugins."""
from __future__ import annotations

from pathlib import Path

from pipeline.artifacts.identity import resolve
from pipeline.artifacts.onnx_file import check_onnx_file, onnx_metadata
from pipeline.cli import options
from pipeline.engine import (
    DERIVED,
    ENGINE_PRECISIONS,
    Profile,
    build_engine,
    default_profile,
    engine_precision,
    ensure_engine,
    profiles_from_config,
    tensorrt_problem,
    validate_profile,
)
from pipeline.errors import PipelineError


def add_arguments(parser) -> None:
    parser.add_argument("--onnx", type=Path, metavar="FILE",
                        help="ONNX file to build (exported by `python -m pipeline export`)")
    parser.add_argument("--output", type=Path, metavar="FILE",
                        help="engine file to write (a .json sidecar is written next to it)")
    parser.add_argument("--all", action="store_true", help="build every custom-op ONNX file in --onnx-dir")
    parser.add_argument("--onnx-dir", type=Path, default=Path("outputs/onnx"), metavar="DIR",
                        help="with --all: folder of ONNX files to build, as `export --all` writes them "
                             "(default: outputs/onnx)")
    options.add_output_dir_arg(parser, "outputs/engines", flag="--output-dir", what="engine folder (with --all)")
    parser.add_argument("--baseline", action="store_true",
                        help="with --all: also build the --ops standard ONNX files (TensorRT's own Resize/DeformConv)")
    parser.add_argument("--precision", choices=(*ENGINE_PRECISIONS, "all"),
                        help="the engine's precision (default: the file's own, fp32 or fp16; a strongly typed engine "
                             "has its graph's). bf16 and int8 build from an fp32 file: bf16 converts its graph (our "
                             "sr ops stay fp32; GPUs of compute capability 8.0+), int8 uses its Q/DQ file (made "
                             "once, calibrated on the training images, as OpenVINO's). With --all: which to build "
                             "(default all: every file at its own)")
    parser.add_argument("--batch", help="MIN,OPT,MAX batch (default 1,1,4)")
    parser.add_argument("--height", help="MIN,OPT,MAX input height (default 8,256,512)")
    parser.add_argument("--width", help="MIN,OPT,MAX input width (default 8,256,512)")
    parser.add_argument("--scale", help="MIN,OPT,MAX scale the size input may take (default 2,3,4 within the "
                                        "model's range)")
    parser.add_argument("--profile-config", type=Path, help="JSON with one or more profiles (overrides the flags)")
    parser.add_argument("--workspace", type=int, default=1024,
                        help="builder workspace limit in MiB (default 1024); refused below what our DeformConv2d "
                             "layers need for the profile")
    parser.add_argument("--tf32", action="store_true",
                        help="let FP32 math use TF32 (TensorRT layers and our DeformConv2d GEMMs): faster, ~1e-3 "
                             "relative error. Default off, so FP32 engines stay FP32-accurate; the sidecar records it")
    parser.add_argument("--opt-level", type=int, default=3, choices=range(0, 6), metavar="0-5",
                        help="builder optimization level (default 3)")
    parser.add_argument("--timing-cache", type=Path, help="timing cache file reused across builds "
                        "(default $SRDEPLOY_CACHE/trt-timing.cache)")
    parser.add_argument("--plugin-lib", type=Path,
                        help="plugin library (default: pipeline.native.libraries.trt_plugin_library())")
    parser.add_argument("--force", action="store_true", help="rebuild even when a fresh engine exists")
    parser.add_argument("--quiet", action="store_true", help="no progress line")


def profiles_from_args(args, spec) -> list[Profile]:
    if args.profile_config:
        return profiles_from_config(args.profile_config, spec)
    base = default_profile(spec)
    d = {"batch": args.batch or base.batch, "height": args.height or base.height,
         "width": args.width or base.width, "scale": args.scale or base.scale}
    return [validate_profile(Profile.from_dict(d), spec)]


def _folder_jobs(args) -> list[tuple[Path, Path, str]]:
    """--all: (onnx, engine, precision) for every file in --onnx-dir that --precision and --baseline select."""
    if not args.onnx_dir.is_dir():
        raise PipelineError(f"ONNX folder not found: {args.onnx_dir} (run `make onnx` first)")
    want = args.precision or "all"
    jobs = []
    for f in sorted(args.onnx_dir.glob("*.onnx")):
        meta = onnx_metadata(check_onnx_file(f))
        if meta.get("ops", "custom") == "standard" and not args.baseline:
            continue
        own = meta.get("precision", "fp32")
        if want in DERIVED and own == "fp32":
            jobs.append((f, args.output_dir / f"{f.stem}-{want}.engine", want))
        elif want in ("all", own):
            jobs.append((f, args.output_dir / f"{f.stem}.engine", own))
    if not jobs:
        raise PipelineError(f"no matching ONNX files in {args.onnx_dir} (run `make onnx` first)")
    options.check_output_dir(args.output_dir, "--output-dir")
    return jobs


def _jobs(args) -> list[tuple[Path, Path, str]]:
    """(onnx, engine, precision) triples to build, validated before TensorRT is touched."""
    if args.all and args.onnx:
        raise PipelineError("--all builds a folder; do not combine it with --onnx")
    if args.all:
        return _folder_jobs(args)
    if not args.onnx or not args.output:
        raise PipelineError("give --onnx FILE --output FILE.engine, or --all --onnx-dir DIR --output-dir DIR")
    if args.precision == "all":
        raise PipelineError("--precision all goes with --all; for one file give fp32, fp16, bf16 or int8")
    precision = engine_precision(onnx_metadata(check_onnx_file(args.onnx)), args.precision)
    options.check_output_file(args.output, "--output")
    return [(args.onnx, args.output, precision)]


def plan(args) -> list[tuple[Path, Path, str, list[Profile]]]:
    """(onnx, engine, precision, profiles) for every engine to build: the model and its scale contract come from
    each ONNX file's metadata (no PyTorch, no checkpoint reloaded), checked before TensorRT is touched."""
    return [(onnx_file, engine_file, precision, profiles_from_args(args, resolve(onnx=onnx_file)))
            for onnx_file, engine_file, precision in _jobs(args)]


def run(args) -> int:
    if args.all and args.onnx:
        raise PipelineError("--all builds a folder; do not combine it with --onnx")
    if args.onnx:  # a hostile or broken file is refused the same way on every machine
        check_onnx_file(args.onnx)
    # Environment first: on a machine without a GPU/TensorRT nothing else matters (one line, no traceback).
    problem = tensorrt_problem()
    if problem:
        raise PipelineError(problem)
    for onnx_file, engine_file, precision, profiles in plan(args):
        opts = dict(precision=precision, plugin_lib=args.plugin_lib, workspace_mb=args.workspace,
                    opt_level=args.opt_level, timing_cache=args.timing_cache, progress=not args.quiet, tf32=args.tf32)
        if args.force:
            build_engine(onnx_file, engine_file, profiles, **opts)
        else:
            ensure_engine(onnx_file, engine_file, profiles, **opts)
    return 0

