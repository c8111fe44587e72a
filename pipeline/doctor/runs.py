"""What the doctor runs, as far as the machine allows: a tiny inference on each CPU backend and our CPU kernels
(pipeline.doctor.cpu_probe, in a child process), the plugin self-test, the plugin GPU harness, our CUDA kernels
against torch on the GPU, and TensorRT engines of every model against PyTorch."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from pipeline.doctor.facts import PLUGIN_FIX
from pipeline.doctor.results import FAIL, PASS, SKIP, Check
from pipeline.errors import PipelineError, first_line
from pipeline.native import kernels_cuda
from pipeline.native.cuda_runtime import subprocess_env
from pipeline.native.libraries import trt_plugin_library
from pipeline.precisions import GRAPH

HARNESS_NAME = "trt_plugin_gpu_harness"
SELFTEST_NAME = "trt_plugin_selftest"
HARNESS_NO_GPU = 3  # trt_plugin_gpu_harness's exit code when it finds no CUDA device
KERNELS_FIX = "`make plugins` on this machine (needs nvcc), then `pytest -m gpu tests/test_kernels_cuda.py`"
_SUMMARY = re.compile(r"# (\d+) checks, (\d+) failed")


def _program(name: str) -> Path | None:
    try:
        path = trt_plugin_library().parent / name
    except PipelineError:
        return None
    return path if path.is_file() else None


def _run(argv: list[str], timeout: int) -> tuple[int, str]:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=subprocess_env())
    except subprocess.TimeoutExpired:
        return -1, f"timed out after {timeout} s"
    except OSError as e:
        return -1, first_line(e)
    return proc.returncode, proc.stdout + proc.stderr


def _summary(out: str) -> str:
    m = _SUMMARY.search(out)
    fails = [line[5:] for line in out.splitlines() if line.startswith("FAIL")]
    text = f"{m.group(1)} checks, {m.group(2)} failed" if m else "no summary line"
    return text + (f"; first failures: {' | '.join(fails[:3])}" if fails else "")


def selftest() -> Check:
    exe = _program(SELFTEST_NAME)
    if exe is None:
        return Check("plugin self-test", SKIP, f"{SELFTEST_NAME} not built", fix=PLUGIN_FIX)
    rc, out = _run([str(exe)], timeout=300)
    return Check("plugin self-test", PASS if rc == 0 else FAIL, f"exit {rc}: {_summary(out)}",
                 fix="" if rc == 0 else f"run {exe} and read its FAIL lines")


def harness(gpu_present: bool) -> list[Check]:
    exe = _program(HARNESS_NAME)
    if exe is None:
        return [Check("plugin GPU harness", SKIP, f"{HARNESS_NAME} not built", fix=PLUGIN_FIX)]
    host_only = [] if gpu_present else ["--host-only"]
    rc, out = _run([str(exe), *host_only], timeout=900)
    name = "plugin GPU harness" if gpu_present else "plugin GPU harness (host-side steps)"
    checks = [Check(name, PASS if rc == 0 else FAIL, f"exit {rc}: {_summary(out)}",
                    fix="" if rc == 0 else f"run {exe} and read its FAIL lines", data={"exit": rc})]
    if not gpu_present:
        checks.append(Check("plugin GPU harness (enqueue, CUDA graphs)", SKIP, "no CUDA GPU here",
                            fix="run `python -m pipeline doctor` on a GPU machine"))
    return checks


def cpu_side(model: str) -> list[Check]:
    """pipeline.doctor.cpu_probe's checks: each CPU backend's tiny inference and our CPU kernels. The probe needs
    numpy and ONNX Runtime; a Python without them skips it, and a probe that dies fails with its last words."""
    rc, out = _run([sys.executable, "-m", "pipeline.doctor.cpu_probe", model], timeout=600)
    checks = []
    for line in out.splitlines():
        if line.startswith("{"):
            try:
                checks.append(Check(**json.loads(line)))
            except (ValueError, TypeError):
                continue
    last = next((ln for ln in reversed(out.splitlines()) if ln.strip() and not ln.startswith("{")), f"exit {rc}")
    if rc != 0 and "ModuleNotFoundError" in last:
        checks.append(Check("CPU backends", SKIP, f"this Python cannot run them: {last.strip()}",
                            fix="pip install 'srdeploy[cpu]'"))
    elif rc != 0:
        checks.append(Check("CPU backends", FAIL, f"the probe ended with exit {rc}: {last.strip()}",
                            fix=f"run `{sys.executable} -m pipeline.doctor.cpu_probe {model}` and read its error"))
    return checks


def _max_err(out, ref) -> float:
    return float((out.float() - ref.float()).abs().max().item())


def cuda_kernels(torch_cuda_ok: bool) -> list[Check]:
    """Our CUDA launchers (libsr_kernels_cuda.so) against F.interpolate and torchvision on the GPU."""
    if not torch_cuda_ok:
        return [Check("CUDA kernels vs torch", SKIP, "needs PyTorch with a CUDA GPU")]
    import torch
    import torch.nn.functional as F


    try:
        from torchvision.ops import deform_conv2d
    except ImportError:  # the reference only: DynamicResize is still checked against F.interpolate
        deform_conv2d = None
    checks = [] if deform_conv2d is not None else [
        Check("CUDA DeformConv2d vs torchvision", SKIP, "torchvision is not installed (the reference)",
              fix="pip install 'srdeploy[export]'")]
    gen = torch.Generator(device="cuda").manual_seed(0)
    for dtype, tol in ((torch.float32, 1e-4), (torch.float16, 1e-2)):
        name = "fp32" if dtype == torch.float32 else "fp16"
        try:
            x = torch.rand(2, 3, 37, 29, device="cuda", generator=gen).to(dtype)
            ref = F.interpolate(x.float(), size=(91, 70), mode="bicubic", align_corners=False)
            err = _max_err(kernels_cuda.dynamic_resize(x, (91, 70)), ref)
            checks.append(Check(f"CUDA DynamicResize vs F.interpolate ({name})", PASS if err <= tol else FAIL,
                                f"max abs error {err:.2e} (tolerance {tol:g})"))
            if deform_conv2d is None:
                continue
            inp = torch.rand(2, 16, 24, 20, device="cuda", generator=gen).to(dtype)
            w = (torch.rand(8, 16, 3, 3, device="cuda", generator=gen) - 0.5).to(dtype) / 6
            off = (torch.rand(2, 18, 24, 20, device="cuda", generator=gen) * 4 - 2).to(dtype)
            mask = torch.rand(2, 9, 24, 20, device="cuda", generator=gen).to(dtype)
            bias = torch.rand(8, device="cuda", generator=gen).to(dtype)
            ref = deform_conv2d(inp.float(), off.float(), w.float(), bias.float(), padding=1, mask=mask.float())
            out = kernels_cuda.deform_conv2d(inp, w, off, bias=bias, mask=mask, padding=1)
            err = _max_err(out, ref)
            checks.append(Check(f"CUDA DeformConv2d vs torchvision ({name})", PASS if err <= tol else FAIL,
                                f"max abs error {err:.2e} (tolerance {tol:g})"))
        except (PipelineError, RuntimeError, OSError) as e:
            checks.append(Check(f"CUDA kernels vs torch ({name})", FAIL, first_line(e), fix=KERNELS_FIX))
    return checks


def engines(ready: str | None, models: list[str], log=print) -> list[Check]:
    """Each model's TensorRT engine (FP32 with TF32 off, FP16) against PyTorch at the compare stage's tolerances.
    `ready`: None when TensorRT, a GPU and the plugin library are here, else why not."""
    if ready is not None:
        return [Check("TensorRT engines vs PyTorch", SKIP, ready)]
    from pipeline.analysis.compare import compare_model  # numpy and PyTorch: doctor starts on a bare Python

    checks = []
    for model in models:
        try:
            result = compare_model(model, backends=["trt"], precisions=GRAPH, log=log)
        except (PipelineError, RuntimeError, OSError, ValueError) as e:
            checks.append(Check(f"TensorRT engine {model}", FAIL, first_line(e), fix="`python -m pipeline compare "
                                f"--model {model} --backends trt` shows the details"))
            continue
        for row in result["rows"]:
            label = f"TensorRT engine {model} {row['precision']} x{row['scale']:g}"
            if row["status"] in ("pass", "fail"):
                detail = (f"max abs {row['max_abs']:.2e}, PSNR {row['psnr_db']:.1f} dB ({row['criterion']}); "
                          f"{row.get('describe', '')}")
                checks.append(Check(label, PASS if row["status"] == "pass" else FAIL, detail,
                                    fix="" if row["status"] == "pass" else
                                    f"`python -m pipeline compare --model {model} --bisect` names the diverging node",
                                    data={k: row.get(k) for k in ("max_abs", "psnr_db", "seconds")}))
            else:
                checks.append(Check(label, FAIL, row.get("reason", row["status"]),
                                    fix="`python -m pipeline engine` on the model's ONNX shows the build log"))
    return checks
