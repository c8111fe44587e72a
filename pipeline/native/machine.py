"""The machine a measurement holds for, as one JSON text: CPU, cores, GPU and the runtimes' versions. `--backend
auto`'s timings and `--precision auto`'s picks and quality records are keyed by it, so a measurement made on
another machine (or with other libraries) is never read as this one's."""
from __future__ import annotations

import functools
import importlib.metadata
import json
import os

from pipeline.native.cpu import BF16_ENV, bf16_problem, cpu_name
from pipeline.native.cuda_driver import gpu_visible


@functools.cache  # read once a process: each run's records are keyed by it (~1.5 ms a read of the metadata)
def package_version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def fingerprint() -> str:
    """CPU, cores, GPU, torch and ONNX Runtime versions (what a backend timing depends on)."""
    gpu = gpu_visible()
    return json.dumps({"cpu": cpu_name(), "cores": os.cpu_count(), "gpu": gpu[1] if gpu[0] else None,
                       "torch": package_version("torch"), "ort": package_version("onnxruntime")}, sort_keys=True)


def numerics() -> dict:
    """fingerprint() and what else decides a lower precision's numbers: OpenVINO's version and whether bf16
    arithmetic is used (int8's float parts run bf16 or f32)."""
    return {**json.loads(fingerprint()), "openvino": package_version("openvino") or "?",
            "bf16": bf16_problem() is None, "bf16_env": os.environ.get(BF16_ENV)}
