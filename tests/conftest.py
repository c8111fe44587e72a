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
