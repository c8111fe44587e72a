"""Artifact caches of a test module's own."""
from __future__ import annotations

from pathlib import Path

import pytest


def own_cache(tmp_path_factory, session_cache: Path, name: str) -> Path:
    """An artifact cache of a module's own (its int8 files, quality records, picks) that shares the session's ONNX
    exports."""
    cache = tmp_path_factory.mktemp(name)
    (session_cache / "onnx").mkdir(exist_ok=True)
    (cache / "onnx").symlink_to(session_cache / "onnx", target_is_directory=True)
    return cache


def one_thread_own_cache():
    """A module's autouse fixture (`_env = one_thread_own_cache()`): PyTorch on one thread (a shared 2-core machine:
    no spin contention) and an empty artifact cache of the module's own."""

    @pytest.fixture(scope="module", autouse=True)
    def _env(tmp_path_factory):
        import torch  # the tests that use it run models

        torch.set_num_threads(1)
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("SRDEPLOY_CACHE", str(tmp_path_factory.mktemp("cache")))
            yield

    return _env
