"""The machine facts every report opens with: CPU, GPU, memory and the versions that ran (report.json's
`environment`), and the list a report shows them in."""
from __future__ import annotations

import os
import platform

import numpy as np
import onnxruntime as ort
import psutil

from pipeline.htmlreport.document import Items, items
from pipeline.native.cpu import cpu_name
from pipeline.native.cuda_driver import gpu_visible


def environment() -> dict:
    env = {"python": platform.python_version(), "platform": platform.platform(), "numpy": np.__version__,
           "cpu": cpu_name(), "logical_cores": os.cpu_count()}
    env["physical_cores"] = psutil.cpu_count(logical=False)
    env["memory_gb"] = round(psutil.virtual_memory().total / 2**30, 1)
    try:  # optional at run time (the deploy runtime has no torch); CUDA queries may fail on a broken driver
        import torch

        env["torch"] = torch.__version__
        env["torch_threads"] = torch.get_num_threads()
        env["cuda_build"] = torch.version.cuda
    except Exception:
        pass
    seen, gpu = gpu_visible()
    env["gpu"] = gpu if seen else None
    env["onnxruntime"] = ort.__version__
    env["ort_providers"] = ort.get_available_providers()
    try:
        import tensorrt  # noqa: F401

        env["tensorrt"] = tensorrt.__version__
    except Exception as e:
        env["tensorrt"] = f"not importable ({type(e).__name__})"
    return env


def env_items(env: dict) -> Items:
    """The machine facts as the list every report opens with."""
    gpu = env.get("gpu") or "none"
    return items(
        f"CPU: {env.get('cpu')} ({env.get('physical_cores', '?')} physical / {env.get('logical_cores')} logical cores"
        f", {env.get('memory_gb', '?')} GB RAM)",
        f"GPU: {gpu}",
        f"torch {env.get('torch')} (CUDA build {env.get('cuda_build')}), onnxruntime {env.get('onnxruntime')} "
        f"({', '.join(env.get('ort_providers', []))}), TensorRT {env.get('tensorrt')}",
        f"Python {env.get('python')}, numpy {env.get('numpy')}, {env.get('platform')}",
    )
