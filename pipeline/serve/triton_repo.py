"""Writes a Triton model repository: REPO/<name>/config.pbtxt and REPO/<name>/1/model.onnx (ONNX Runtime
backend; the ONNX file with its sr function bodies runs as is) or 1/model.plan (TensorRT backend, with our
plugin library copied next to the repository, since Triton would take a folder inside it for a model)."""
from __future__ import annotations

import os
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

from models.spec import ModelSpec, file_sha256
from pipeline.artifacts.atomic import atomic_path, atomic_write
from pipeline.artifacts.cache import engine_for
from pipeline.artifacts.confine import file_token, open_inside, open_regular, safe_component
from pipeline.artifacts.identity import resolve
from pipeline.artifacts.onnx_file import check_onnx_file, check_onnx_precision, external_data_files, load_onnx
from pipeline.contract import DOMAIN
from pipeline.engine import default_profile, ensure_engine, sidecar_profiles, tensorrt_problem
from pipeline.engine.sidecar import load_sidecar, sidecar_onnx
from pipeline.errors import PipelineError, first_line
from pipeline.export.cached import onnx_for
from pipeline.native.libraries import trt_plugin_library
from pipeline.serve import protocol, python_repo, triton_env
from pipeline.serve.triton_config import (
    PLATFORMS,
    ModelIO,
    card_parameters,
    io_from_onnx,
    io_from_sidecar,
    profile_max_batch,
    served,
    served_backend,
    served_platform,
    triton_config,
)

VERSION = "1"  # Triton loads the highest numbered version folder; we write one


@dataclass
class RepoResult:
    model_dir: Path
    model_file: Path
    config_file: Path
    config: dict
    plugin_file: Path | None
    command: str
    sr_config_file: Path | None = None  # the Python-backend `sr` model beside it (pipeline.serve.python_repo)


@dataclass
class _Artifact:
    """What goes into the repository: the model file, its I/O, batching limit and facts."""
    source: Path
    io: ModelIO
    max_batch: int
    meta: dict
    plugin_sha256: str | None = None   # engines built with our plugins
    facts: dict | None = None
    data_files: tuple[str, ...] = ()   # ONNX external data, relative to the model file's folder


def _copy(src: Path, dst: Path, *, inside: Path | None = None) -> None:
    """Copy from one open descriptor (no check-then-use by name): `src` itself, or with `inside`, the file `src`
    (relative) inside that folder reached without following links."""
    fd = open_inside(inside, src) if inside is not None else open_regular(src)
    with os.fdopen(fd, "rb") as f, atomic_path(dst) as tmp, open(tmp, "wb") as out:
        shutil.copyfileobj(f, out, 1 << 20)


def _ort_artifact(spec: ModelSpec, precision: str, onnx: Path | None, weights, max_batch: int | None,
                  log) -> _Artifact:
    if onnx is not None:
        check_onnx_file(onnx)  # external data inside its folder, siblings confined, the file loads
        check_onnx_precision(Path(onnx), precision)
    else:
        onnx = onnx_for(spec.name, precision, "custom", weights=weights, log=log)
    proto, meta = load_onnx(Path(onnx), external_data=False)
    bodies = {(f.domain, f.name) for f in proto.functions if f.node}
    if any(n.domain == DOMAIN and (n.domain, n.op_type) not in bodies for n in proto.graph.node):
        raise PipelineError(f"{onnx} has sr nodes without function bodies; ONNX Runtime in Triton needs the bodies "
                            "(use the exported file, not the one stripped for TensorRT)")
    _check_ort_loads(Path(onnx))
    limit = max_batch or default_profile(spec).batch[2]
    return _Artifact(Path(onnx), io_from_onnx(proto), limit, meta, data_files=external_data_files(proto))


def _check_ort_loads(onnx: Path) -> None:
    """Triton's ONNX Runtime backend must be able to load the file: try it here (CPU) before anything is
    written, so an unknown-domain op or unreadable external data is one line, not a broken repository."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 4  # ORT's own log lines would come before our one-line error
    try:
        ort.InferenceSession(str(onnx), so, providers=["CPUExecutionProvider"])
    except Exception as e:  # ORT raises its own exception types
        raise PipelineError(f"ONNX Runtime cannot load {onnx}, so Triton could not either: {first_line(e)}") from None


def _engine_sidecar(spec: ModelSpec, precision: str, onnx: Path | None, engine: Path | None, weights, plugin_lib,
                    log):
    """(engine file, sidecar): the given engine, or the cached build the trt backend uses (needs a GPU and
    TensorRT)."""
    if engine is None:
        problem = tensorrt_problem()
        if problem:
            raise PipelineError(f"{problem} (or give a built engine with --engine FILE, its .json sidecar next to it, "
                                "or write the ONNX Runtime model with --backend ort)")
        if onnx is not None:
            check_onnx_precision(Path(onnx), precision)
        onnx = onnx or onnx_for(spec.name, precision, "custom", weights=weights, log=log)
        profiles = [default_profile(spec)]
        engine = engine_for(onnx, {"profiles": [p.to_dict() for p in profiles]})
        ensure_engine(Path(onnx), engine, profiles, plugin_lib=plugin_lib, log=log)
    engine = Path(engine)
    if not engine.is_file():
        raise PipelineError(f"TensorRT engine not found: {engine}")
    sidecar = load_sidecar(engine)  # its profiles and plugin build: a missing or malformed one is one line
    if sidecar.get("precision") != precision:
        raise PipelineError(f"{engine.name} is a {sidecar.get('precision')} engine, but precision {precision} "
                            "was requested")
    return engine, sidecar


def _trt_artifact(spec: ModelSpec, precision: str, onnx: Path | None, engine: Path | None, weights, plugin_lib,
                  log) -> _Artifact:
    engine, sidecar = _engine_sidecar(spec, precision, onnx, engine, weights, plugin_lib, log)
    onnx_file = Path(onnx) if onnx else sidecar_onnx(engine, sidecar)  # never a path outside the engine's folder
    if onnx_file is not None and onnx_file.is_file():
        proto, meta = load_onnx(onnx_file, external_data=False)
        io = io_from_onnx(proto)
    else:  # the ONNX file stayed on the build machine: the sidecar says enough
        io, meta = io_from_sidecar(sidecar), {}
    meta = {"precision": sidecar.get("precision"), "ops": sidecar.get("ops"), **meta}
    profiles = sidecar_profiles(sidecar)
    if not profiles:
        raise PipelineError(f"sidecar of {engine.name} lists no optimisation profiles")
    facts = {k: str(sidecar[k]) for k in ("tensorrt", "gpu", "compute_capability", "tf32") if k in sidecar}
    facts["profiles"] = "; ".join(f"batch {p.batch[0]}-{p.batch[2]}, input {p.height[0]}-{p.height[2]} x "
                                  f"{p.width[0]}-{p.width[2]}, scale {p.scale[0]:g}-{p.scale[2]:g}" for p in profiles)
    plugin_sha = sidecar.get("plugin_sha256") if sidecar.get("ops", "custom") == "custom" else None
    return _Artifact(engine, io, profile_max_batch(profiles), meta, plugin_sha, facts)


def _plugin(repo: Path, plugin_lib: Path | None, want_sha: str) -> Path:
    """Copy the plugin library the engine was built with next to the repository; refuse another build of it."""
    if plugin_lib is None:
        plugin_lib = trt_plugin_library()
    plugin_lib = Path(plugin_lib)
    if not plugin_lib.is_file():
        raise PipelineError(f"plugin library not found: {plugin_lib}")
    have = file_sha256(plugin_lib)
    if have != want_sha:
        raise PipelineError(f"plugin library {plugin_lib} (sha256 {have[:12]}) is not the one the engine was built "
                            f"with ({str(want_sha)[:12]}); give that build with --plugin-lib")
    dst = protocol.plugin_folder(repo) / plugin_lib.name
    _copy(plugin_lib, dst)
    return dst


def server_command(repo: Path, plugin: Path | None) -> str:
    cmd = ["tritonserver", "--model-repository", str(repo.resolve())]
    if plugin is not None:
        cmd.append(f"--backend-config=tensorrt,plugins={plugin.resolve()}")
    return shlex.join(cmd)


def write_repository(model: str | None, repo: Path, *, backend: str = "trt", precision: str = "fp32",
                     name: str | None = None, onnx: Path | None = None, engine: Path | None = None,
                     plugin_lib: Path | None = None, weights=None, instances: int = 1, kind: str | None = None,
                     max_batch: int | None = None, sr_name: str | None = "sr", python_env: str | None = None,
                     log=print) -> RepoResult:
    """Write REPO/<name>/ for `model` (None: the one the `onnx` or `engine` file holds) and, unless sr_name is None,
    the Python-backend model REPO/<sr_name>/ (its environment: `python_env`, default the one `make triton-env`
    made); returns what was written and the tritonserver command."""
    desc = served(backend)
    if engine is not None and not desc.runs_engines:
        raise PipelineError(f"--engine is a TensorRT engine: use it with --backend {served_backend(engine=True)}")
    if max_batch is not None and desc.runs_engines:
        raise PipelineError(f"--max-batch applies to --backend {served_backend(engine=False)}; an engine's batch "
                            "limit is its profile's")
    kind = kind or ("gpu" if desc.gpu_only else "cpu")
    if desc.gpu_only and kind != "gpu":
        raise PipelineError(f"--backend {backend} runs on the GPU only: use --kind gpu with it")
    # One plain path component (no '..', '/', '.'): the model folder stays a child of the repository.
    name = safe_component(name, "--name") if name is not None else None
    sr_name = safe_component(sr_name, "--sr-name") if sr_name else None
    repo = Path(repo)
    if repo.exists() and not repo.is_dir():
        raise PipelineError(f"--output {repo} is a file; give a folder for the model repository")
    if onnx is not None:
        check_onnx_file(onnx)
    if engine is not None and not Path(engine).is_file():
        raise PipelineError(f"TensorRT engine not found: {engine}")
    # Which model, before anything is made: the file's (a --model naming another is refused), else --model's.
    spec = resolve(model, onnx=onnx, engine=engine)
    name = name or file_token(spec.name)
    if sr_name == name:
        raise PipelineError(f"the plain model and the sr model would both be named '{name}'; change --name or "
                            "--sr-name")
    if desc.runs_engines:
        art = _trt_artifact(spec, precision, onnx, engine, weights, plugin_lib, log)
    else:
        art = _ort_artifact(spec, precision, onnx, weights, max_batch, log)
    params = card_parameters(spec, weights, art.meta)
    params.update(art.facts or {})
    if not art.io.triton_batchable:
        params["max_images_per_request"] = str(art.max_batch)
    text, config = triton_config(name, backend, art.io, max_batch=art.max_batch, instances=instances, kind=kind,
                                 parameters=params)
    model_dir = repo / name
    model_file = model_dir / VERSION / PLATFORMS[served_platform(backend)].model_file
    plugin = _plugin(repo, plugin_lib, art.plugin_sha256) if art.plugin_sha256 else None
    for rel in art.data_files:  # the model's external data travels with it (checked inside its folder)
        _copy(Path(rel), model_file.parent / rel, inside=art.source.parent)
    _copy(art.source, model_file)
    atomic_write(model_dir / "config.pbtxt", text)
    sr_config_file = None
    if sr_name:

        env = str(triton_env.env_dir()) if python_env is None else python_env
        sr_config_file = python_repo.write_sr_model(repo, art.source if desc.runs_engines else model_file,
                                                    name=sr_name, backend=backend, env=env or None, instances=instances,
                                                    kind=kind, parameters=params)
    return RepoResult(model_dir, model_file, model_dir / "config.pbtxt", config, plugin, server_command(repo, plugin),
                      sr_config_file)
