"""Derived cache files (int8 Q/DQ files) verified before use, and made by one process at a time.

    file_sha256(path) -> str                         read without following a link
    stamp(path, recipe, source)                      write `<file>.stamp.json`: recipe, source SHA-256, own SHA-256
    stamp_problem(path, recipe, source) -> str|None  why a cached file may not be used (None: it may)
    made_once(path) -> context manager               an exclusive lock beside `path` (a second process waits)

A derived file is used only when it is a regular file (not a link), its stamp names the recipe and the source
file's SHA-256 it is made of now, and its own bytes still hash to the stamp's: a truncated, foreign or linked file
is made again.
"""
from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from models.spec import file_sha256 as models_file_sha256
from pipeline.artifacts.atomic import atomic_write

STAMP_SUFFIX = ".stamp.json"


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a regular file's bytes, opened without following a link (OSError otherwise)."""
    return models_file_sha256(path, follow_links=False)


def stamp_path(path: Path) -> Path:
    return path.parent / (path.name + STAMP_SUFFIX)


def stamp(path: Path, recipe: str, source: Path) -> None:
    """Record what `path` was made by (`recipe`) and from (`source`'s SHA-256), and its own SHA-256."""
    record = {"recipe": recipe, "source_sha256": file_sha256(source), "sha256": file_sha256(path),
              "size": path.stat().st_size}
    atomic_write(stamp_path(path), json.dumps(record, indent=2) + "\n")


def stamp_problem(path: Path, recipe: str, source: Path) -> str | None:
    """Why the cached `path` may not be used (missing, a link, no or a damaged stamp, another recipe or source,
    changed or truncated bytes), or None."""
    if path.is_symlink():
        return "it is a link"
    if not path.exists():
        return "it is missing"
    try:
        record = json.loads(stamp_path(path).read_text())
    except (OSError, ValueError):
        return "it has no readable stamp (made by an older version or interrupted)"
    if not isinstance(record, dict) or not all(isinstance(record.get(k), str) for k in ("recipe", "sha256")):
        return "its stamp is damaged"
    if record["recipe"] != recipe:
        return f"it was made by recipe {record['recipe']!r}, not {recipe!r}"
    try:
        if record.get("source_sha256") != file_sha256(source):
            return "it was made from another source file"
        if record["sha256"] != file_sha256(path):
            return "its bytes changed since it was made (truncated or replaced)"
    except OSError as e:
        return f"it cannot be read ({e.strerror or e})"
    return None


@contextmanager
def made_once(path: Path) -> Iterator[None]:
    """Hold an exclusive lock (`.<name>.lock` beside `path`) while making it: a second process making the same file
    waits here, then finds it made. The lock goes with the process (flock), so a killed maker leaves none held."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path.parent / f".{path.name}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError:  # a folder that cannot be written: the maker's own write says so, in its words
        fd = None
    try:
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        if fd is not None:
            os.close(fd)  # releases the lock
