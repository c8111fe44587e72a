import pytest

from pipeline.errors import PipelineError
from pipeline.native import libraries as native


@pytest.fixture(scope="session")
def cpu_kernels():
    """The CPU kernel library `make plugins` builds; built here (same cmake commands) when a run starts without it."""
    try:
        return native.cpu_kernels_library()
    except PipelineError:
        native.build_plugins()
        return native.cpu_kernels_library()


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
