"""Cache of exported ONNX files and TensorRT engines under $SRDEPLOY_CACHE (default ~/.cache/srdeploy).

Each artifact's file name is its key: model, weights SHA-256 (prefix), precision, ops, exporter, I/O dtype
(and the profile for engines), so changing any of them gives a new file instead of silently reusing an old
one. Missing artifacts are created (ONNX via pipeline.export.export_model) into a temp file in the cache
folder and renamed into place, so a crash or a concurrent run never leaves a half-written artifact.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from models.spec import WeightsError, get_spec
from models.spec import weights_path as spec_weights_path
from pipeline.artifacts.confine import file_token
from pipeline.errors import PipelineError

# The choices every artifact key is made of (export, backends and the CLI read them here).
PRECISIONS = ("fp32", "fp16")
OPS = ("custom", "standard")
EXPORTERS = ("dynamo", "torchscript")
# Part of every ONNX cache key: bumped when exports gain something the runtime relies on, so older cached files
# are not reused. 2: the model spec in the metadata, reference outputs and folded variants beside the file.
# 3: sr::DynamicResize's body and the folded border strips are tile-exact (tiled output equals whole, bit for bit).
ONNX_LAYOUT = 3


def cache_dir() -> Path:
    root = os.environ.get("SRDEPLOY_CACHE") or Path.home() / ".cache" / "srdeploy"
    return Path(root).expanduser()


def weights_path(model: str, weights: str | Path | None = None) -> Path:
    try:
        return spec_weights_path(get_spec(model), weights)
    except KeyError as e:
        raise PipelineError(str(e.args[0])) from None
    except WeightsError as e:
        raise PipelineError(str(e)) from None


def weights_sha256(model: str, weights: str | Path | None = None) -> str:
    """The weights' identity in cache keys (ModelSpec.weights_sha256: a file's hash, a factory's tensors')."""
    try:
        return get_spec(model).weights_sha256(weights)
    except KeyError as e:
        raise PipelineError(str(e.args[0])) from None
    except WeightsError as e:
        raise PipelineError(str(e)) from None


def _check_choice(what: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise PipelineError(f"unknown {what} '{value}' (choose from: {', '.join(allowed)})")


def onnx_name(model: str, weights_sha: str, precision: str = "fp32", ops: str = "custom",
              exporter: str = "dynamo", io_dtype: str = "fp32") -> str:
    """Cache file name = the key. 16 hex digits of the weights hash are plenty to tell weight files apart."""
    _check_choice("precision", precision, PRECISIONS)
    _check_choice("io dtype", io_dtype, PRECISIONS)
    _check_choice("ops", ops, OPS)
    _check_choice("exporter", exporter, EXPORTERS)
    io = "" if io_dtype == "fp32" else f"-io{io_dtype}"
    return f"{file_token(model)}-{precision}{io}-{ops}-{exporter}-w{weights_sha[:16]}-v{ONNX_LAYOUT}.onnx"


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
    sha = weights_sha256(model, weights)
    token = getattr(get_spec(model), "cache_token", model)  # a user's model: its name + identity, file-name safe
    return folder / onnx_name(token, sha, precision, ops, exporter, io_dtype)


def onnx_for(model: str, precision: str = "fp32", ops: str = "custom", *, exporter: str = "dynamo",
             io_dtype: str = "fp32", weights: str | Path | None = None, cache: Path | None = None,
             verify: bool = True, log=None) -> Path:
    """Path of the cached ONNX file for this key; exported (atomically) when missing."""
    path = cached_onnx(model, precision, ops, exporter=exporter, io_dtype=io_dtype, weights=weights, cache=cache)
    folder = path.parent
    if path.is_file() and path.stat().st_size > 0:
        return path
    try:  # PyTorch (the `export` extra) is needed only here, to make a missing file
        from pipeline.export import export_model
    except ImportError as e:
        raise PipelineError(f"no cached ONNX file for {model} and exporting one needs PyTorch ({e}): install "
                            "the export extra (pip install 'srdeploy[export]') or pass --onnx FILE") from None
    folder.mkdir(parents=True, exist_ok=True)
    if log is not None:
        log(f"exporting {model} ({precision}, {ops} ops, {exporter}) to the ONNX cache: {path}")
    # Export into a private temp folder next to the target, then rename: atomic even if two runs race. The
    # siblings the export writes (folded variants, reference outputs) move first, the file naming them last.
    with tempfile.TemporaryDirectory(prefix=".export-", dir=folder) as tmp:
        tmp_file = Path(tmp) / path.name
        export_model(model, tmp_file, exporter=exporter, ops=ops, precision=precision, io_dtype=io_dtype,
                     weights=weights_path(model, weights), verify=verify)
        if not tmp_file.is_file():
            raise PipelineError(f"export of {model} produced no file at {tmp_file}")
        for sibling in Path(tmp).iterdir():
            if sibling != tmp_file:
                os.replace(sibling, folder / sibling.name)
        os.replace(tmp_file, path)
    return path


def engine_for(onnx_file: Path, profile: dict, *, cache: Path | None = None) -> Path:
    """Where the engine for an ONNX file + profile lives in the cache (it is built by pipeline.engine)."""
    folder = Path(cache) if cache is not None else cache_dir() / "engines"
    return folder / engine_name(onnx_file, profile)
