import os
import shutil
import tempfile
from pathlib import Path

import pytest

from pipeline.errors import PipelineError
from pipeline.native import libraries as native

_CACHE_ENV = "SRDEPLOY_CACHE"
_saved_cache_env: list[str | None] = []


def pytest_configure(config):
    """One artifact cache for the whole session, never the user's ~/.cache/srdeploy: ONNX exports are made
    once and shared by every test (and the subprocesses they start), then removed with the session."""
    _saved_cache_env.append(os.environ.get(_CACHE_ENV))
    os.environ[_CACHE_ENV] = tempfile.mkdtemp(prefix="srdeploy-test-cache-")


def pytest_unconfigure(config):
    shutil.rmtree(os.environ[_CACHE_ENV], ignore_errors=True)
    saved = _saved_cache_env.pop()
    if saved is None:
        os.environ.pop(_CACHE_ENV, None)
    else:
        os.environ[_CACHE_ENV] = saved


@pytest.fixture(scope="session")
def session_cache() -> Path:
    """The session's artifact cache folder ($SRDEPLOY_CACHE while the tests run)."""
    return Path(os.environ[_CACHE_ENV])


@pytest.fixture(scope="session")
def cpu_kernels():
    """The CPU kernel library `make plugins` builds; built here (same cmake commands) when a run starts without it."""
    try:
        return native.cpu_kernels_library()
    except PipelineError:
        native.build_plugins()
        return native.cpu_kernels_library()
