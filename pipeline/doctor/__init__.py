"""`python -m pipeline doctor`: what this machine can run, proven by running it.

    results  Check (one outcome) and the exit codes: 0 all present passed, 1 a failure, 3 no CUDA GPU
    facts    GPU/driver, nvcc, PyTorch CUDA, ONNX Runtime providers, TensorRT, cudart/cuBLAS, the plugin library
    runs     the CPU backends and our CPU kernels (cpu_probe, a child process), plugin self-test, plugin GPU
             harness, CUDA kernels vs torch, TensorRT engines vs PyTorch
    cpu_probe  one tiny real inference on each CPU backend, our CPU kernels against known answers
    report   doctor.md / doctor.json

Every probe turns its own errors into a failed or skipped check, so a run never ends in a traceback.
"""
from __future__ import annotations

from pathlib import Path

from pipeline.doctor import facts, report, runs
from pipeline.doctor.results import EXIT_FAILED, EXIT_NO_GPU, EXIT_OK, FAIL, Check, exit_code

__all__ = ["EXIT_FAILED", "EXIT_NO_GPU", "EXIT_OK", "Check", "diagnose"]


def _engine_readiness(trt_version: str | None, torch_cuda_ok: bool, plugin_checks: list[Check]) -> str | None:
    if not torch_cuda_ok:
        return "needs PyTorch with a CUDA GPU"
    if trt_version is None:
        return "TensorRT is not installed (" + facts.TRT_FIX + ")"
    if any(c.status != "pass" for c in plugin_checks):
        return "the plugin library is not usable (see above)"
    return None


def _guarded(checks: list[Check], name: str, fn, default):
    """fn()'s result; an unexpected error becomes a failed check (the doctor never ends in a traceback)."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - any bug in a probe is reported, not raised
        checks.append(Check(name, FAIL, f"the check itself crashed: {type(e).__name__}: {facts.first_line(e)}",
                            fix="report this; the other checks still ran"))
        return default


def collect(models: list[str], engines: bool = True, log=print) -> tuple[list[Check], bool]:
    """Every check this machine allows, in report order; (checks, GPU present)."""
    checks: list[Check] = []
    gpu_check, gpu_present = _guarded(checks, "GPU and driver", facts.gpu, (None, False))
    torch_check, torch_cuda_ok = _guarded(checks, "PyTorch CUDA", lambda: facts.torch_cuda(gpu_present), (None, False))
    trt_check, trt_version = _guarded(checks, "TensorRT", facts.tensorrt, (None, None))
    checks += [c for c in (gpu_check, _guarded(checks, "CUDA toolkit (nvcc)", facts.nvcc, None), torch_check,
                           _guarded(checks, "ONNX Runtime", facts.onnxruntime_providers, None), trt_check,
                           _guarded(checks, "cudart and cuBLAS", lambda: facts.cuda_runtime(gpu_present), None))
               if c is not None]
    checks += _guarded(checks, "CPU backends", lambda: runs.cpu_side(models[0]), [])
    plugin_checks = _guarded(checks, "plugin library",
                             lambda: facts.plugin_library(trt_version, torch_cuda_ok, gpu_present), [])
    checks += plugin_checks
    checks += [c for c in (_guarded(checks, "plugin self-test", runs.selftest, None),) if c is not None]
    checks += _guarded(checks, "plugin GPU harness", lambda: runs.harness(gpu_present), [])
    checks += _guarded(checks, "CUDA kernels vs torch", lambda: runs.cuda_kernels(torch_cuda_ok), [])
    if engines:
        ready = _engine_readiness(trt_version, torch_cuda_ok, plugin_checks)
        checks += _guarded(checks, "TensorRT engines vs PyTorch", lambda: runs.engines(ready, models, log=log), [])
    return checks, gpu_present


def diagnose(output: Path, models: list[str], *, engines: bool = True, log=print) -> int:
    """Run every check, print one line each (failures with their fix), write the reports; return the exit code."""
    checks, gpu_present = collect(models, engines, log=lambda msg: None)
    code = exit_code(checks, gpu_present)
    for c in checks:
        log(c.line())
    md, js = report.write(Path(output), checks, code)
    failures = sum(c.status == FAIL for c in checks)
    log(f"doctor: {len(checks)} checks, {failures} failed; {md} and {js} (exit {code})")
    return code
