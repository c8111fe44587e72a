"""Model files made once on the driver and shared with every actor through Ray's object store.

The driver exports the ONNX graph (and, for ort-folded, the folded graph) into its artifact cache exactly as
a local run would; each actor writes the same bytes to the same place in its own node's cache when they are
not there yet, so the backend it loads finds them cached and never exports again. A file given with
--onnx/--engine is shipped the same way and handed to the backend by path."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from models.registry import file_sha256
from pipeline.artifacts.atomic import atomic_write
from pipeline.artifacts.cache import cache_dir, onnx_for
from pipeline.engine import sidecar_path

ONNX_BACKENDS = ("auto", "ort", "ort-cpu", "ort-cuda", "ort-trt", "ort-sr-kernels", "trt")
SHARED = "shared"  # cache sub-folder for the user's own files


@dataclass
class SharedFile:
    rel: str          # path relative to the artifact cache
    sha256: str
    ref: object       # ray.ObjectRef of the bytes


@dataclass
class Shared:
    files: list[SharedFile] = field(default_factory=list)
    onnx: str | None = None     # relative path of the user's --onnx, handed to the backend
    engine: str | None = None   # likewise --engine

    def describe(self) -> list[dict]:
        return [{"file": f.rel, "sha256": f.sha256} for f in self.files]


def _files_for(backend: str, model: str, precision: str, scale: float, weights, log) -> list[Path]:
    """Cache files `backend` would export if missing, made here."""
    if backend in ONNX_BACKENDS:
        return [onnx_for(model, precision, "custom", weights=weights, log=log)]
    if backend == "ort-folded":
        from pipeline.backends.ort_folded_backend import folded_onnx_for

        files = [onnx_for(model, "fp32", "custom", weights=weights, log=log)]  # non-integer scales, tiny images
        if float(scale).is_integer():
            files.append(folded_onnx_for(model, int(scale), weights))
        return files
    return []  # torch: the weights only


def prepare(ray, backend: str, model: str, precision: str, scale: float, *, weights=None, onnx=None, engine=None,
            log=None) -> Shared:
    """Driver side: make the files once and put their bytes in the object store."""
    root = cache_dir()
    shared = Shared()

    def put(path: Path, rel: str) -> None:
        sha = file_sha256(path)
        shared.files.append(SharedFile(rel, sha, ray.put(path.read_bytes())))

    if onnx is not None or engine is not None:
        for given, attr in ((onnx, "onnx"), (engine, "engine")):
            if given is None:
                continue
            given = Path(given)
            rel = f"{SHARED}/{file_sha256(given)[:16]}-{given.name}"
            put(given, rel)
            if attr == "engine" and sidecar_path(given).is_file():
                put(sidecar_path(given), str(sidecar_path(Path(rel))))
            setattr(shared, attr, rel)
        return shared
    for path in _files_for(backend, model, precision, scale, weights, log):
        put(path, path.relative_to(root).as_posix())
    return shared


def materialize(ray, shared: Shared) -> dict:
    """Actor side: the shared files in this node's cache (written only when missing or different);
    returns the backend options (onnx=/engine=) that point at the user's files."""
    root = cache_dir()
    for f in shared.files:
        dst = root / f.rel
        if not (dst.is_file() and file_sha256(dst) == f.sha256):
            os.makedirs(dst.parent, exist_ok=True)
            atomic_write(dst, ray.get(f.ref))
    return {k: str(root / rel) for k, rel in (("onnx", shared.onnx), ("engine", shared.engine)) if rel}
