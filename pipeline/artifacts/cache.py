"""Cache of exported ONNX files and TensorRT engines under $SRDEPLOY_CACHE (default ~/.cache/srdeploy).

Each artifact's file name is its key: model, weights SHA-256 (prefix), precision, ops, exporter, I/O dtype
(and the profile for engines), so changing any of them gives a new file instead of silently reusing an old
one. This module says where an artifact lives; the makers fill it (pipeline.export.cached.onnx_for,
pipeline.engine.ensure_engine), into a temp file renamed into place.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

from models.spec import ModelSpec
from pipeline.artifacts.atomic import folder_problem
from pipeline.artifacts.confine import file_token
from pipeline.artifacts.identity import check_weights, resolve
from pipeline.errors import PipelineError, check_choice
from pipeline.precisions import GRAPH, version

# The choices every artifact key is made of besides the precision (pipeline.precisions: GRAPH, the ONNX files'
# precisions and I/O types); export, backends and the CLI read them here.
OPS = ("custom", "standard")
EXPORTERS = ("dynamo", "torchscript")
SIZE_INPUTS = ("size", "scale")  # how a run-time-factor graph takes its output size


CACHE_ENV = "SRDEPLOY_CACHE"
_CHECKED: set[Path] = set()  # cache roots made or checked already (once per process)


def cache_dir() -> Path:
    """The artifact cache's root. Its files are run (ONNX graphs, engines, int8 files) and trusted (quality records,
    picks), so a new cache is made owner-only (0700: nobody else can read, plant or swap a file in it), and an
    existing one that others may write to is warned about, once."""
    root = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "srdeploy").expanduser()
    _secure(root)
    return root


def _secure(root: Path) -> None:
    if root in _CHECKED:
        return
    _CHECKED.add(root)
    try:
        os.makedirs(root.parent, exist_ok=True)
        os.mkdir(root, 0o700)  # new: owner-only (a later mkdir inside needs no mode: no one else can enter)
        return
    except FileExistsError:
        pass
    except OSError:  # cannot be made here: check_cache_writable says so before any work that writes
        return
    try:
        mode = root.stat().st_mode
    except OSError:
        return
    if mode & 0o022:
        print(f"srdeploy: warning: the artifact cache {root} is writable by other users (mode {mode & 0o777:o}): "
              f"a file planted there could be run or trusted; chmod go-w {root} (or set {CACHE_ENV} to a folder "
              "of your own)", file=sys.stderr)


def check_cache_writable(folder: Path | None = None) -> None:
    """One line naming $SRDEPLOY_CACHE when the cache (or `folder` in it) cannot be created or written; called
    before work that will write there (an export on first use), not after it."""
    folder = cache_dir() if folder is None else Path(folder)
    problem = folder_problem(folder)
    if problem:
        where = (f"{CACHE_ENV}={os.environ[CACHE_ENV]}" if os.environ.get(CACHE_ENV)
                 else f"the artifact cache (default; set {CACHE_ENV} to another folder)")
        raise PipelineError(f"{where}: {folder} {problem}")


def weights_path(model: str, weights: str | Path | None = None) -> Path:
    return check_weights(resolve(model), weights)


def weights_sha256(model: str, weights: str | Path | None = None) -> str:
    """The weights' identity in cache keys (ModelSpec.weights_sha256: a file's hash, a factory's tensors')."""
    return _weights_sha256(resolve(model), weights)


def _weights_sha256(spec: ModelSpec, weights: str | Path | None) -> str:
    check_weights(spec, weights)  # a missing or unusable weights file: one PipelineError line
    return spec.weights_sha256(weights)


def onnx_name(model: str, weights_sha: str, precision: str = "fp32", ops: str = "custom",
              exporter: str = "dynamo", io_dtype: str = "fp32") -> str:
    """Cache file name = the key. 16 hex digits of the weights hash are plenty to tell weight files apart."""
    check_choice("precision", precision, GRAPH)
    check_choice("io dtype", io_dtype, GRAPH)
    check_choice("ops", ops, OPS)
    check_choice("exporter", exporter, EXPORTERS)
    io = "" if io_dtype == "fp32" else f"-io{io_dtype}"
    return f"{file_token(model)}-{precision}{io}-{ops}-{exporter}-w{weights_sha[:16]}-v{version('graph')}.onnx"


def profile_key(profile: dict) -> str:
    """Short stable hash of an engine optimisation profile (any JSON-able description)."""
    blob = json.dumps(profile, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def engine_name(onnx_file: str | Path, profile: dict) -> str:
    return f"{Path(onnx_file).stem}-p{profile_key(profile)}.engine"


def cached_onnx(model: str, precision: str = "fp32", ops: str = "custom", *, exporter: str = "dynamo",
                io_dtype: str = "fp32", weights: str | Path | None = None, cache: Path | None = None) -> Path:
    """Where the cached ONNX file for this key lives (it may not exist yet)."""
    folder = Path(cache) if cache is not None else cache_dir() / "onnx"
    spec = resolve(model)
    sha = _weights_sha256(spec, weights)
    return folder / onnx_name(spec.cache_token, sha, precision, ops, exporter, io_dtype)


def engine_for(onnx_file: Path, profile: dict, *, cache: Path | None = None) -> Path:
    """Where the engine for an ONNX file + profile lives in the cache (it is built by pipeline.engine)."""
    folder = Path(cache) if cache is not None else cache_dir() / "engines"
    return folder / engine_name(onnx_file, profile)
