"""`python -m pipeline triton --model NAME --output REPO`: a Triton Inference Server model repository."""
from __future__ import annotations

from pathlib import Path

from pipeline import backends
from pipeline.cli import options
from pipeline.engine import tensorrt_problem
from pipeline.serve import SERVED, served_backend, triton_env, write_repository

# --backend here is the repository's format (trt or ort, pipeline.serve's), not a backend request's; write_repository
# checks the --onnx/--engine files
BACKEND = options.BackendArgs(precision="graph", files=("onnx", "engine", "weights"), check_files=False,
                              exclusive=True)


def add_arguments(p) -> None:
    options.add_model_args(p)
    p.add_argument("--output", required=True, type=Path, metavar="REPO",
                   help="model repository folder (REPO/<name>/ is written)")
    engines, files = served_backend(engine=True), served_backend(engine=False)
    p.add_argument("--backend", choices=tuple(SERVED),
                   help=f"{engines}: TensorRT plan (needs a GPU and TensorRT to build, or --engine); "
                        f"{files}: ONNX Runtime on the exported ONNX (default: {engines} where TensorRT can build the "
                        f"engine or --engine gives one, else {files})")
    BACKEND.add_parser_arguments(p)
    p.add_argument("--name", help="model name in the repository (default: the model's)")
    p.add_argument("--plugin-lib", type=Path, metavar="FILE", help="TensorRT plugin library the engine was built "
                   "with (default: build/plugins/libsr_trt_plugins.so)")
    p.add_argument("--instances", type=int, default=1, help="model instances per device (default: 1)")
    p.add_argument("--kind", choices=("gpu", "cpu"),
                   help="instance kind (default: gpu for a GPU-only backend, else cpu)")
    p.add_argument("--max-batch", type=int, help=f"{served_backend(engine=False)}: most images per execution "
                   "(default: the engine profile's, 4)")
    p.add_argument("--sr-name", default="sr", help="name of the Python-backend model that takes and returns images "
                   "(`serve`, `sr --triton`); 'none' writes only the plain model (default: sr)")
    p.add_argument("--python-env", metavar="PATH", help="the sr model's Python environment (EXECUTION_ENV_PATH: a "
                   "venv folder or a conda-pack .tar.gz as the server sees it; 'none': the server's own Python; "
                   "default: the one `make triton-env` / `python -m pipeline.serve.triton_env` made)")


def _python_env(value: str | None) -> str | None:
    """None: the default env; '': none named (the server's own Python)."""
    if value is None:
        return None
    return "" if value.lower() == "none" else value


def _backend(args) -> str:
    """--backend, or what this machine can serve (backends.triton_pick decides): TensorRT where it can build the
    engine (or --engine gives one), else ONNX Runtime, said in one line."""
    asked_or_engine = args.backend is not None or args.engine is not None
    problem = None if asked_or_engine else tensorrt_problem()
    name, why = backends.triton_pick(args.backend, args.engine is not None, problem,
                                     engines=served_backend(engine=True), files=served_backend(engine=False))
    if problem is not None:
        print(why)
    return name


def _env_note(args) -> None:
    """The default Python environment the sr model names must exist before `serve`: say how to make it."""
    if args.python_env is None and args.sr_name.lower() != "none":
        problem = triton_env.problem()
        if problem:
            print(f"note: {problem}; `serve` needs it, an official Triton container needs --python-env")


def run(args) -> int:
    args.backend = _backend(args)
    # With --onnx/--engine the model is the file's: write_repository resolves it after its option checks.
    model = args.model if args.onnx is not None or args.engine is not None else options.model_from_args(args)
    request = BACKEND.parse(args)
    weights = options.weights_from_args(args)
    repo = options.check_output_dir(args.output)
    result = write_repository(model, repo, backend=args.backend, precision=request.precision,
                              name=args.name, onnx=request.onnx, engine=request.engine, plugin_lib=args.plugin_lib,
                              weights=weights, instances=args.instances, kind=args.kind,
                              max_batch=args.max_batch,
                              sr_name=None if args.sr_name.lower() == "none" else args.sr_name,
                              python_env=_python_env(args.python_env))
    print(f"wrote {result.config_file} and {result.model_file}")
    if result.sr_config_file is not None:
        print(f"wrote {result.sr_config_file} (Python backend: images in, images out)")
    if result.plugin_file is not None:
        print(f"plugin library: {result.plugin_file}")
    _env_note(args)
    print(f"start the server with:\n  python -m pipeline serve {result.model_dir.parent}\nor:\n  {result.command}")
    return 0
