"""What this machine has: GPU and driver, CUDA, PyTorch, ONNX Runtime, TensorRT, cudart/cuBLAS, our plugin library.

Every probe returns Check objects and never raises: a missing package or a broken library is a line in the report.
"""
from __future__ import annotations

import ctypes
import shutil
import subprocess

from pipeline.doctor.results import FAIL, INFO, PASS, SKIP, Check
from pipeline.errors import PipelineError, first_line, install_command
from pipeline.native.cuda_driver import driver, torch_gpu_visible
from pipeline.native.cuda_runtime import find_runtime_libraries, missing_hint, preload
from pipeline.native.libraries import LibraryMissing, plugin_build_info, trt_plugin_library

TORCH_FIX = "install a CUDA 13 build of PyTorch (the project's default torch wheel on Linux x86-64)"
TRT_FIX = f"`{install_command('gpu')}` (tensorrt-cu13, TensorRT 11) or `pip install tensorrt-cu13`"
PLUGIN_FIX = ("`make plugins` with TensorRT headers available: TENSORRT_ROOT=<dir with include/NvInfer.h>, the "
              "TensorRT dev package, or `make trt-headers` (fetches those matching the installed tensorrt)")


def _nvidia_smi() -> str:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return ""
    try:
        out = subprocess.run([exe, "--query-gpu=name,driver_version,compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return "; ".join(line.strip() for line in out.stdout.splitlines() if line.strip())


def gpu() -> tuple[Check, bool]:
    d = driver()
    smi = _nvidia_smi()
    if d.count:
        detail = f"{d.count} GPU(s)" + (f": {smi}" if smi else "") + (f" ({d.version_text})" if d.version else "")
        return Check("GPU and driver", INFO, detail, data={"count": d.count, "driver": d.version_text,
                                                            "nvidia_smi": smi}), True
    return Check("GPU and driver", SKIP, d.problem, fix="run on a machine with an NVIDIA GPU and its driver",
                 data={"count": 0, "driver": d.version_text}), False


def nvcc() -> Check:
    import os
    from pathlib import Path

    candidate = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "nvcc"
    exe = str(candidate) if candidate.is_file() else shutil.which("nvcc")
    if exe is None:
        return Check("CUDA toolkit (nvcc)", SKIP, "nvcc not found, so the CUDA kernels and plugins cannot be built",
                     fix="install the CUDA 13 toolkit and set CUDA_HOME")
    out = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
    release = next((line.split("release")[-1].strip() for line in out.splitlines() if "release" in line), "?")
    return Check("CUDA toolkit (nvcc)", INFO, f"{exe}: release {release}", data={"nvcc": exe, "release": release})


def torch_cuda(gpu_present: bool) -> tuple[Check, bool]:
    try:
        import torch
    except ImportError as e:
        return Check("PyTorch CUDA", SKIP, f"PyTorch not importable ({first_line(e)})", fix=TORCH_FIX), False
    facts = {"torch": torch.__version__, "cuda_build": torch.version.cuda}
    if torch_gpu_visible()[0]:
        props = torch.cuda.get_device_properties(0)
        facts.update(device=props.name, capability=f"{props.major}.{props.minor}")
        return Check("PyTorch CUDA", PASS, f"torch {torch.__version__} (CUDA {torch.version.cuda}) on {props.name} "
                     f"(sm_{props.major}{props.minor})", data=facts), True
    if gpu_present:
        why = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
        return Check("PyTorch CUDA", FAIL, f"torch {torch.__version__} ({why}) sees no GPU although the driver does",
                     fix=TORCH_FIX + ", and a driver new enough for its CUDA version", data=facts), False
    return Check("PyTorch CUDA", SKIP, f"torch {torch.__version__} (CUDA build {torch.version.cuda}); no GPU here",
                 data=facts), False


def onnxruntime_providers() -> Check:
    try:
        import onnxruntime as ort
    except ImportError as e:
        return Check("ONNX Runtime", SKIP, f"not importable ({first_line(e)})", fix="pip install onnxruntime")
    providers = ort.get_available_providers()
    return Check("ONNX Runtime", INFO, f"{ort.__version__}: {', '.join(providers)}",
                 data={"version": ort.__version__, "providers": providers})


def tensorrt() -> tuple[Check, str | None]:
    try:
        import tensorrt as trt
    except (ImportError, OSError) as e:  # OSError: the bindings without libnvinfer
        return Check("TensorRT", SKIP, f"not importable ({first_line(e)})", fix=TRT_FIX), None
    return Check("TensorRT", INFO, f"tensorrt {trt.__version__}", data={"version": trt.__version__}), trt.__version__


def cuda_runtime(gpu_present: bool) -> Check:
    found = find_runtime_libraries()
    loaded = preload()
    bad = {name: loaded[name] for name in found if loaded[name].startswith("not loadable")}
    data = {name: str(path) if path else None for name, path in found.items()}
    if not bad:
        return Check("cudart and cuBLAS", PASS, ", ".join(f"{n} ({loaded[n]})" for n in found), data=data)
    detail = "; ".join(f"{n}: {why}" for n, why in bad.items())
    return Check("cudart and cuBLAS", FAIL if gpu_present else SKIP, detail, fix=missing_hint(), data=data)


def _creators(path) -> int:
    lib = ctypes.CDLL(str(path))
    get = lib.getCreators
    get.argtypes = [ctypes.POINTER(ctypes.c_int32)]
    get.restype = ctypes.c_void_p
    count = ctypes.c_int32(0)
    return count.value if get(ctypes.byref(count)) else 0


def _header_match(built: str, installed: str | None) -> Check:
    if not installed:
        return Check("plugin headers vs TensorRT", SKIP, f"built against TensorRT {built} headers; TensorRT not "
                     "installed to compare", fix=TRT_FIX)
    if built.split(".")[0] != installed.split(".")[0]:
        return Check("plugin headers vs TensorRT", FAIL, f"built against TensorRT {built} headers, installed "
                     f"TensorRT is {installed}", fix="`make trt-headers && make plugins` (headers of the installed "
                     "release), or TENSORRT_ROOT=<matching headers>")
    return Check("plugin headers vs TensorRT", PASS, f"built against {built} headers, installed {installed}")


def plugin_library(trt_version: str | None, torch_cuda_ok: bool, gpu_present: bool = True) -> list[Check]:
    try:
        path = trt_plugin_library()
    except PipelineError as e:
        # Where TensorRT and a GPU are here, a missing library is what stops the first run: a failure, not a skip.
        status = FAIL if trt_version and torch_cuda_ok else SKIP
        if isinstance(e, LibraryMissing):  # its fix once, in the fix column (it was said in the detail too)
            return [Check("plugin library", status, e.problem, fix=e.fix)]
        return [Check("plugin library", status, str(e), fix=PLUGIN_FIX)]
    info = plugin_build_info(path)
    checks = [Check("plugin library", PASS, f"{path} (TensorRT headers {info.get('tensorrt_headers', '?')}, "
                    f"CUDA {info.get('cuda_toolkit', '?')})", data={"path": str(path), **info})]
    if info.get("tensorrt_headers"):
        checks.append(_header_match(info["tensorrt_headers"], trt_version))
    try:
        preload()
        count = _creators(path)  # dlopens it: TensorRT's own loading path, minus TensorRT
    except (PipelineError, OSError, AttributeError) as e:
        runtime_missing = any(status.startswith("not loadable") for status in preload().values())
        if runtime_missing:  # not the library's fault: cudart/cuBLAS are not here (a GPU machine would need them)
            checks.append(Check("plugin library loads", FAIL if gpu_present else SKIP, first_line(e),
                                fix=missing_hint()))
        else:
            checks.append(Check("plugin library loads", FAIL, first_line(e), fix=PLUGIN_FIX))
        return checks
    checks.append(Check("plugin library loads", PASS, "dlopen without libnvinfer"))
    ok = count == 2
    checks.append(Check("plugin creators", PASS if ok else FAIL, f"getCreators returns {count} creator(s)"
                        + (" (DynamicResize, DeformConv2d)" if ok else ", expected 2"), fix="" if ok else PLUGIN_FIX))
    return checks
