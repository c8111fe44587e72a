"""Artifact caches of a test module's own."""
from __future__ import annotations

from pathlib import Path


def own_cache(tmp_path_factory, session_cache: Path, name: str) -> Path:
    """An artifact cache of a module's own (its int8 files, quality records, picks) that shares the session's ONNX
    exports."""
    cache = tmp_path_factory.mktemp(name)
    (session_cache / "onnx").mkdir(exist_ok=True)
    (cache / "onnx").symlink_to(session_cache / "onnx", target_is_directory=True)
    return cache
