"""Model files made once on the driver and shared with every actor through Ray's object store.

The driver exports the ONNX graph (with the folded graphs and reference outputs that travel beside it) into its
artifact cache exactly as a local run would; each actor writes the same bytes to the same place in its own
node's cache when they are not there yet, so the backend it loads finds them cached and never exports again.
Files given with --onnx/--engine are shipped the same way (siblings and sidecar too) and handed over by path."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from models.spec import file_sha256
from pipeline.artifacts.atomic import atomic_write
from pipeline.artifacts.cache import cache_dir
from pipeline.artifacts.onnx_file import folded_variants, onnx_metadata, reference_file
from pipeline.engine import sidecar_path
from pipeline.export.cached import onnx_for

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


def with_siblings(onnx_file: Path) -> list[Path]:
    """An exported ONNX file and the files its metadata names beside it (folded variants, reference outputs)."""
    meta = onnx_metadata(onnx_file)
    siblings = [*folded_variants(onnx_file, meta).values(), reference_file(onnx_file, meta)]
    return [Path(onnx_file), *(p for p in siblings if p is not None and p.is_file())]


def _made_here(backend: str, model: str, precision: str, weights, log) -> list[Path]:
    """The cached export `backend` would make if missing (ort-folded: the fp32 one carrying the folded graphs)."""
    if backend == "torch":
        return []  # the weights only
    return with_siblings(onnx_for(model, "fp32" if backend == "ort-folded" else precision, "custom",
                                  weights=weights, log=log))


def prepare(ray, backend: str, model: str, precision: str, *, weights=None, onnx=None, engine=None,
            log=None) -> Shared:
    """Driver side: make the files once and put their bytes in the object store."""
    root = cache_dir()
    shared = Shared()

    def put(path: Path, rel: str) -> None:
        shared.files.append(SharedFile(rel, file_sha256(path), ray.put(path.read_bytes())))

    given = {"onnx": onnx, "engine": engine}
    if onnx is None and engine is None:
        for path in _made_here(backend, model, precision, weights, log):
            put(path, path.relative_to(root).as_posix())
        return shared
    for attr, path in given.items():
        if path is None:
            continue
        path = Path(path)
        folder = f"{SHARED}/{file_sha256(path)[:16]}"  # the files keep their names: metadata refers to them
        files = with_siblings(path) if attr == "onnx" else [path, sidecar_path(path)]
        for f in files:
            if f.is_file():
                put(f, f"{folder}/{f.name}")
        setattr(shared, attr, f"{folder}/{path.name}")
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
