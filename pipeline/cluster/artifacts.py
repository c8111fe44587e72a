"""A Choice's files, shared with every actor through Ray's object store.

The driver chooses once (pipeline.backends.choose: the files made in its artifact cache exactly as a local run makes
them, and named in the Choice); each actor writes the same bytes to the same place in its own node's cache when they
are not there yet, so the backend it loads finds them cached and never exports or quantizes again. Given files
(--onnx, --engine, --weights) land in a folder of their own there, and the actor's Choice points at them."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from pipeline.artifacts.atomic import atomic_write
from pipeline.artifacts.cache import cache_dir
from pipeline.artifacts.stamp import file_sha256
from pipeline.backends import Choice


@dataclass(frozen=True)
class SharedFile:
    path: str         # on the driver
    rel: str          # relative to a node's artifact cache
    sha256: str
    ref: object       # ray.ObjectRef of the bytes


@dataclass(frozen=True)
class Shared:
    choice: Choice
    files: tuple[SharedFile, ...] = field(default_factory=tuple)

    def describe(self) -> list[dict]:
        return [{"file": f.rel, "sha256": f.sha256} for f in self.files]


def prepare(ray, choice: Choice) -> Shared:
    """Driver side: exactly the files `choice` names, their bytes put in the object store."""
    files = []
    for f in choice.files:
        with open(f.path, "rb") as fh:
            files.append(SharedFile(f.path, f.rel, f.sha256, ray.put(fh.read())))
    return Shared(choice, tuple(files))


def materialize(ray, shared: Shared) -> Choice:
    """Actor side: the shared files in this node's cache (written only when missing or different); returns the
    Choice with its given files at their paths here."""
    root = cache_dir()
    for f in shared.files:
        dst = root / f.rel
        if not (dst.is_file() and file_sha256(dst) == f.sha256):
            os.makedirs(dst.parent, exist_ok=True)
            atomic_write(dst, ray.get(f.ref))
    return shared.choice.moved({f.path: str(root / f.rel) for f in shared.files})
