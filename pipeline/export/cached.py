"""The cached ONNX export a runtime uses when no --onnx file is given: made here (PyTorch) on a cache miss.

Where it lives and its key are pipeline.artifacts.cache's; this module fills the cache. PyTorch (the `export`
extra) is imported only on a miss, so a runtime with the file already cached never loads it.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from pipeline.artifacts.cache import cached_onnx, check_cache_writable, weights_path
from pipeline.artifacts.onnx_file import folded_problem, folded_variants, onnx_metadata
from pipeline.errors import PipelineError, install_command


def cached_problem(path: Path) -> str | None:
    """Why a cached export may not be used (a link, unreadable, a folded variant not the one exported with it), or
    None: it is exported again then."""
    if path.is_symlink():
        return "is a link"
    if not path.is_file() or path.stat().st_size == 0:
        return "is not a file" if not path.is_file() else "is empty"
    try:
        meta = onnx_metadata(path)
        return folded_problem(path, folded_variants(path, meta), meta)
    except PipelineError as e:
        return f"cannot be used ({e})"


def onnx_for(model: str, precision: str = "fp32", ops: str = "custom", *, exporter: str = "dynamo",
             io_dtype: str = "fp32", weights: str | Path | None = None, cache: Path | None = None,
             verify: bool = True, log=None) -> Path:
    """Path of the cached ONNX file for this key; exported (atomically) when missing."""
    path = cached_onnx(model, precision, ops, exporter=exporter, io_dtype=io_dtype, weights=weights, cache=cache)
    folder = path.parent
    again = ""
    if path.exists() or path.is_symlink():
        problem = cached_problem(path)
        if problem is None:
            return path
        again = f" again (the cached {path.name} {problem})"
        path.unlink()  # a link goes, never what it points at
    try:
        from pipeline.export.core import export_model  # PyTorch: needed only here, to make a missing file
    except ImportError as e:
        raise PipelineError(f"no cached ONNX file for {model} and exporting one needs PyTorch ({e}): install "
                            f"the export extra ({install_command('export')}) or pass --onnx FILE") from None
    if cache is None:
        check_cache_writable(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if log is not None:
        log(f"exporting {model} ({precision}, {ops} ops, {exporter}) to the ONNX cache, once (a few seconds){again}: "
            f"{path}")
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
