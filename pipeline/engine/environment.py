"""What TensorRT engines need on this machine, and the facts an engine is tied to (sidecar keys)."""
from __future__ import annotations

from pathlib import Path

from models.spec import file_sha256
from pipeline.errors import first_line, install_command
from pipeline.native.cuda_driver import driver, gpu_visible
from pipeline.native.libraries import trt_plugin_library

INSTALL_HINT = (f"on a machine with an NVIDIA GPU run `{install_command('gpu')}` "
                "(TensorRT 11 for CUDA 13: tensorrt-cu13)")


def _gpu_problem() -> str | None:
    seen, why = gpu_visible()
    return None if seen else why


def _trt_import_problem() -> str | None:
    try:
        import tensorrt  # noqa: F401
    except (ImportError, OSError) as e:  # OSError: bindings present but libnvinfer missing
        return f"TensorRT is not installed ({first_line(e)})"
    return None


def tensorrt_problem() -> str | None:
    """None when TensorRT engines can be built and run here, else one line saying what is missing and how to get it."""
    missing = [p for p in (_gpu_problem(), _trt_import_problem()) if p]
    if not missing:
        return None
    return "TensorRT engines need a CUDA GPU and TensorRT 11: " + " and ".join(missing) + "; " + INSTALL_HINT


def current_environment(plugin_lib: Path | None = None) -> dict:
    """The facts an engine is tied to; GPU facts from the CUDA driver (`cuda`: its API version)."""
    import tensorrt as trt

    if plugin_lib is None:
        plugin_lib = trt_plugin_library()
    d = driver()
    return {"tensorrt": trt.__version__, "cuda": d.api_version, "gpu": d.name,
            "compute_capability": d.compute_capability, "plugin_library": str(plugin_lib),
            "plugin_sha256": file_sha256(Path(plugin_lib))}

