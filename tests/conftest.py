import pytest

from pipeline import native
from pipeline.errors import PipelineError


@pytest.fixture(scope="session")
def cpu_kernels():
    """The CPU kernel library `make plugins` builds; built here (same cmake commands) when a run starts without it."""
    try:
        return native.cpu_kernels_library()
    except PipelineError:
        native.build_plugins()
        return native.cpu_kernels_library()
