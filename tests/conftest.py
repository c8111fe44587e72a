import os
import shutil
import tempfile
from pathlib import Path

import pytest

from pipeline.errors import PipelineError
from pipeline.native import libraries as native
from tests.caches import own_cache

_CACHE_ENV = "SRDEPLOY_CACHE"
_saved_cache_env: list[str | None] = []


def pytest_configure(config):
    """One artifact cache for the whole session, never the user's ~/.cache/srdeploy: ONNX exports are made
    once and shared by every test (and the subprocesses they start), then removed with the session. Under
    pytest-xdist (`make test` runs two workers) the workers share the controller's: the cache's files are made
    under file locks, once, whichever process asks first."""
    _saved_cache_env.append(os.environ.get(_CACHE_ENV))
    shared = getattr(config, "workerinput", {}).get(_CACHE_ENV)
    os.environ[_CACHE_ENV] = shared or tempfile.mkdtemp(prefix="srdeploy-test-cache-")


# Longest first: the files that take most of the suite's time (serial seconds on a 2-core EPYC: 170, 130, 80, 80,
# 70, 50) start before the many short ones, which then fill the gaps, so two xdist workers end together (`make
# test` passes --no-loadscope-reorder, which keeps this order). A file missing here only runs later.
LONGEST_FIRST = ("test_sr_segments.py", "test_ray.py", "test_byom_stages.py", "test_quantize_quality.py",
                 "test_quality_gate.py", "test_triton_serve.py", "test_realesrgan_stages.py",
                 "test_realesrgan_executors.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONGEST_FIRST)))  # stable: the rest keep their order


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """pytest-xdist, in the controller: each worker gets the controller's cache."""
    node.workerinput[_CACHE_ENV] = os.environ[_CACHE_ENV]


def pytest_unconfigure(config):
    if not hasattr(config, "workerinput"):  # the controller (or a plain run) made it and removes it
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


@pytest.fixture(scope="module")
def int8_cache(tmp_path_factory, session_cache):
    """$SRDEPLOY_CACHE set to a cache of the module's own (own_cache) while its tests run, int8 files calibrated on
    one crop per image."""
    from pipeline.export import quantize

    cache = own_cache(tmp_path_factory, session_cache, "int8-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(_CACHE_ENV, str(cache))
        mp.setattr(quantize, "CROPS", 1)
        yield cache


@pytest.fixture(scope="session")
def weights(tmp_path_factory):
    """--weights for srcnn from PyTorch: None when the shipped weights are present (the default then), else a
    deterministic file built from the model spec. Modules that need other weights define their own `weights`."""
    torch = pytest.importorskip("torch")
    from models.lookup import get_spec

    spec = get_spec("srcnn")
    if spec.weights_path.is_file():
        return None
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("weights") / "srcnn.pt"
    torch.save(spec.build().state_dict(), path)
    return str(path)


@pytest.fixture(scope="session")
def cpu_kernels():
    """The CPU kernel library `make plugins` builds; built here (same cmake commands) when a run starts without it."""
    try:
        return native.cpu_kernels_library()
    except PipelineError:
        native.build_plugins()
        return native.cpu_kernels_library()


@pytest.fixture(scope="session")
def png_library():
    """The PNG codec's library `make plugins` builds; built here (same cmake commands) when a run starts without it."""
    try:
        return native.png_library()
    except PipelineError:
        native.build_png()
        return native.png_library()


@pytest.fixture(scope="session")
def gpu_plugin_lib():
    """For GPU + TensorRT tests: skips (with the reason) without a CUDA device or an importable tensorrt; where both
    are here, a missing plugin library fails the test with the fix instead of skipping."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    try:
        import tensorrt  # noqa: F401
    except Exception as e:  # the bindings wheel alone cannot import without the TensorRT libraries
        pytest.skip(f"tensorrt not importable: {e}")
    try:
        return native.trt_plugin_library()
    except PipelineError as e:
        pytest.fail(f"TensorRT plugin library missing on a machine with a GPU and TensorRT: {e}")
