"""Derived cache files (int8 Q/DQ files) verified before use, and made by one process at a time.

    file_sha256(path) -> str                         read without following a link
    content_sha256(path) -> str                      the file's and its ONNX external data's (what its numbers are)
    stamp(path, recipe, source)                      write `<file>.stamp.json`: recipe, source SHA-256 (and its
                                                     external data's, each), own SHA-256
    stamp_problem(path, recipe, source) -> str|None  why a cached file may not be used (None: it may)
    made_once(path) -> context manager               an exclusive lock beside `path` (a second process waits)

A derived file is used only when it is a regular file (not a link), its stamp names the recipe, the source file's
SHA-256 and that of every external-data file the source names (an ONNX file's weights may live in `w.bin` beside
it: replacing that file changes the numbers, not the .onnx bytes) as they are now, and its own bytes still hash to
the stamp's: a truncated, foreign or linked file, or one made from other weights, is made again.
"""
from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from models.spec import file_sha256 as models_file_sha256
from pipeline.artifacts.atomic import atomic_write
from pipeline.artifacts.confine import inside_problem
from pipeline.artifacts.onnx_file import OnnxFile, external_data_files

STAMP_SUFFIX = ".stamp.json"


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a regular file's bytes, opened without following a link (OSError otherwise)."""
    return models_file_sha256(path, follow_links=False)


def data_files(source) -> dict[str, str]:
    """SHA-256 of each external-data file an ONNX file names (its relative location -> hash); {} for a file with
    none, or one that is not ONNX. OSError when a named file cannot be read as a regular file inside its folder."""
    path = Path(source)
    if path.suffix != ".onnx":
        return {}
    out = {}
    for rel in _data_locations(source):
        problem = inside_problem(Path(rel), path.parent)
        if problem:
            raise OSError(f"its external data {rel} {problem}")
        out[rel] = file_sha256(path.parent / rel)
    return out


def _data_locations(source) -> tuple[str, ...]:
    """The external-data files an ONNX file names: from an opened file's parsed graph (no second parse), else
    parsed without its data, once per version of the file (its size, mtime and inode)."""
    if isinstance(source, OnnxFile):
        return external_data_files(source.model)
    try:
        st = os.stat(source, follow_symlinks=False)
    except OSError:
        return ()
    return _parsed_locations(str(source), st.st_size, st.st_mtime_ns, st.st_ino)


@functools.lru_cache(maxsize=64)
def _parsed_locations(path: str, size: int, mtime_ns: int, inode: int) -> tuple[str, ...]:
    import onnx


    try:
        return external_data_files(onnx.load(path, load_external_data=False))
    except Exception:  # not a readable ONNX file: its own hash is all there is (its loader says what is wrong)
        return ()


def content_sha256(path: str | Path) -> str:
    """What a file's numbers are: its SHA-256, or for an ONNX file with external data, a SHA-256 of its own and each
    external-data file's (quality records, engines and picks are kept for this)."""
    own, data = file_sha256(path), data_files(path)
    if not data:
        return own
    return hashlib.sha256(json.dumps({"file": own, "data": data}, sort_keys=True).encode()).hexdigest()


def stamp_path(path: Path) -> Path:
    return path.parent / (path.name + STAMP_SUFFIX)


def stamp(path: Path, recipe: str, source: Path) -> None:
    """Record what `path` was made by (`recipe`) and from (`source`'s SHA-256 and its external data's), and its own
    SHA-256."""
    record = {"recipe": recipe, "source_sha256": file_sha256(source), "source_data_sha256": data_files(source),
              "sha256": file_sha256(path), "size": path.stat().st_size}
    atomic_write(stamp_path(path), json.dumps(record, indent=2) + "\n")


def _source_problem(record: dict, source: Path) -> str | None:
    if record.get("source_sha256") != file_sha256(source):
        return "it was made from another source file"
    data, was = data_files(source), record.get("source_data_sha256")
    was = was if isinstance(was, dict) else {}  # a stamp from before external data was hashed: none recorded
    changed = sorted(rel for rel in set(data) | set(was) if was.get(rel) != data.get(rel))
    if changed:
        return f"its source's external data changed since it was made ({', '.join(changed)})"
    return None


def stamp_problem(path: Path, recipe: str, source: Path) -> str | None:
    """Why the cached `path` may not be used (missing, a link, no or a damaged stamp, another recipe or source, its
    source's external data changed, changed or truncated bytes), or None."""
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
        problem = _source_problem(record, source)
        if problem:
            return problem
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
