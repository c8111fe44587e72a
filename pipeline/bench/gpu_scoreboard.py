"""The GPU scoreboard's measurements (`make gpu-check`, scripts/gpu_scoreboard.py): one prepared command, device
time being rare and short. Sections, in order (each a generator of its growing part, pipeline.bench.scoreboard
writes every yield): the machine; an fp16/bf16 GEMM's TFLOP/s; per model and precision the torch backend's bare net
at 512^2 (ms, TFLOP/s), `infer_pixels` (ms), the device output check (ms, % of the net) and the folder run's share of
pure inference (16 x 512^2, pipeline.bench.folder); a 720p -> 4K video against inference alone and the encoder alone
(pipeline.bench.video); DeformConv2d fused / im2col vs torchvision; the plugin harness run 4 times at once.
Without a GPU every section records "skipped: <reason>". torch is imported inside the functions: it is the
measuring instrument, optional for the deploy runtime.
"""
from __future__ import annotations

import re
import shutil
import statistics
import subprocess
import time
from typing import Any

import numpy as np

from models.spec import output_size
from pipeline import backends
from pipeline.artifacts.identity import resolve
from pipeline.backends import pixels as px
from pipeline.bench import kernels
from pipeline.bench.folder import folder_throughput
from pipeline.bench.roofline import flops_per_output_pixel
from pipeline.bench.scoreboard import HARNESS_COPIES, Skip
from pipeline.bench.timing import cuda_times_ms
from pipeline.bench.video import video_fps
from pipeline.errors import PipelineError, first_line
from pipeline.native.cuda_driver import driver, gpu_visible, torch_gpu_visible
from pipeline.native.cuda_runtime import subprocess_env
from pipeline.native.libraries import trt_plugin_library
from pipeline.precisions import DEFAULT, HALF

MODELS = ("srcnn-x3", "deform-srcnn")
PRECISIONS = (DEFAULT, *HALF)  # fp32 and the 16-bit floats: what the torch backend runs on a GPU
SIZE = 512  # the bare net's and the folder's input side
FOLDER_IMAGES = 16
VIDEO_INPUT = (1280, 720)  # 720p -> 4K at x3
VIDEO_FRAMES = 48
VIDEO_PRECISION = "fp16"
RUNNER = "torch"  # the backend every model section runs: the registered model on the device, no export needed
HARNESS_NAME = "trt_plugin_gpu_harness"


def _need_torch_gpu() -> None:
    try:
        import torch  # noqa: F401 - the measuring instrument
    except ImportError:
        raise Skip("PyTorch is not installed") from None
    ok, why = torch_gpu_visible()
    if not ok:
        raise Skip(why)


def _driver_version() -> str:
    """The NVIDIA driver's version (nvidia-smi's, e.g. 580.65.06), else the driver API version libcuda reports."""
    exe = shutil.which("nvidia-smi")
    if exe:
        out = subprocess.run([exe, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30).stdout.strip().splitlines()
        if out:
            return out[0]
    return driver().version_text


def machine():
    _need_torch_gpu()
    import torch

    props = torch.cuda.get_device_properties(0)
    yield {"gpu": props.name, "driver": _driver_version(), "torch": torch.__version__,
           "torch_cuda": torch.version.cuda, "capability": f"{props.major}.{props.minor}",
           "memory_gib": round(props.total_memory / 2**30, 1)}


def gemm(n: int = 8192, iters: int = 20):
    """TFLOP/s of an n x n x n matrix product (2 n^3 operations), best of `iters` between CUDA events."""
    _need_torch_gpu()
    import torch

    tflops: dict[str, float] = {}
    for name, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        a, b = (torch.randn(n, n, device="cuda", dtype=dtype) for _ in range(2))
        ms = min(cuda_times_ms(lambda a=a, b=b: torch.mm(a, b), iters, warmup=3))
        tflops[name] = round(2 * n**3 / (ms / 1e3) / 1e12, 1)
        del a, b
        yield {"tflops": dict(tflops), "shape": f"{n}x{n}x{n}, best of {iters} (CUDA events)"}


def _synced_ms(fn, iters: int, warmup: int = 3) -> float:
    """Median ms of fn with the whole device synchronised before and after each call: the backend runs on its own
    stream, which events recorded on the caller's stream would not bracket."""
    import torch

    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(1e3 * (time.perf_counter() - t0))
    return statistics.median(times)


def _model_row(model: str, precision: str, size: int, images: int, iters: int, log) -> dict:
    row: dict = {"model": model, "precision": precision, "size": size}
    try:
        return _measure_model(row, images, iters, log)
    except (PipelineError, ImportError, RuntimeError) as e:  # this pair cannot run here (e.g. no torchvision)
        return row | {"error": first_line(e)}


def _measure_model(row: dict, images: int, iters: int, log) -> dict:
    import torch

    model, size = row["model"], row["size"]
    be: Any = backends.create(RUNNER, model, row["precision"], device="cuda")  # a TorchBackend: forward_on_device
    scale = resolve(model).default_scale
    out_h, out_w = output_size(size, size, scale)
    x = torch.rand(1, 3, size, size, device="cuda")
    torch.cuda.synchronize()  # made on this stream, read on the backend's
    row["net_ms"] = _synced_ms(lambda: be.forward_on_device(x, scale), iters)
    row["net_tflops"] = flops_per_output_pixel(model) * out_h * out_w / (row["net_ms"] / 1e3) / 1e12
    y = be.forward_on_device(x, scale)
    torch.cuda.synchronize()  # made on the backend's stream; checked on this one
    with torch.inference_mode():  # as the backend runs it (y is an inference tensor)
        row["check_ms"] = statistics.median(cuda_times_ms(lambda: px.torch_nonfinite(y), iters))
    row["check_pct"] = 100.0 * row["check_ms"] / row["net_ms"]
    img = np.random.default_rng(0).integers(0, 256, (1, size, size, 3), dtype=np.uint8)
    row["infer_pixels_ms"] = _synced_ms(lambda: be.infer_pixels(img, scale), iters)
    folder = folder_throughput(model, images, size, backend=be, log=log, repeats=2)
    return row | {"folder_share": folder["ratio"], "folder_ms_per_image": folder["folder_ms_per_image"],
                  "inference_ms_per_image": folder["inference_ms_per_image"], "backend": be.describe()}


def models(names=MODELS, precisions=PRECISIONS, size: int = SIZE, images: int = FOLDER_IMAGES, iters: int = 20,
           log=print):
    """Per model and precision: the bare net, infer_pixels, the device output check and the folder run's share."""
    _need_torch_gpu()
    rows: list[dict] = []
    for model in names:
        for precision in precisions:
            rows.append(_model_row(model, precision, size, images, iters, log))
            yield {"rows": list(rows), "runner": RUNNER, "folder_images": images}


def video(model: str = "srcnn-x3", precision: str = VIDEO_PRECISION, frames: int = VIDEO_FRAMES, log=print):
    """A 720p clip -> 4K (x3, the sr defaults: H.264) against inference alone and the encoder alone."""
    _need_torch_gpu()
    be = backends.create(RUNNER, model, precision, device="cuda")
    w, h = VIDEO_INPUT
    (row,) = video_fps(model, frames, backend=be, log=log, sizes={f"{w}x{h}": (w, h)})
    yield row | {"precision": precision}


def deform(sizes=kernels.SIZES, iters: int = 20):
    """DeformConv2d at deform-srcnn's layer shape: our fused and im2col kernels, torchvision's when installed."""
    _need_torch_gpu()
    why = kernels.not_run_reason()
    if why:
        raise Skip(why)
    import torch

    try:
        from torchvision.ops import deform_conv2d as tv
    except ImportError:  # optional on a GPU machine's own Python: ours are still timed
        tv = None
    rows: list[dict] = []
    for precision, dtype in (("fp32", torch.float32), ("fp16", torch.float16)):
        for size in sizes:
            rows.append(_deform_row(precision, dtype, size, iters, tv))
            yield {"rows": list(rows), "iters": iters, "torchvision": tv is not None}


def _deform_row(precision: str, dtype, size: int, iters: int, tv) -> dict:
    from pipeline.native import kernels_cuda  # PyTorch with CUDA: only on a GPU machine

    t = kernels.deform_inputs(size, dtype)
    row: dict = {"precision": precision, "size": size}
    for impl in kernels_cuda.DEFORM_IMPLS:
        row[f"{impl}_ms"] = kernels.median_ms(lambda impl=impl: kernels_cuda.deform_conv2d(
            t["input"], t["weight"], t["offset"], t["bias"], t["mask"], padding=1, impl=impl), iters)
    if tv is not None:
        row["torchvision_ms"] = kernels.median_ms(lambda: tv(t["input"], t["offset"], t["weight"], t["bias"],
                                                             padding=1, mask=t["mask"]), iters)
        for impl in kernels_cuda.DEFORM_IMPLS:
            row[f"{impl}_speedup"] = row["torchvision_ms"] / row[f"{impl}_ms"]
    return row


def harness(copies: int = HARNESS_COPIES, timeout: float = 300.0):
    """The plugin harness (plugins_trt/tests/trtPluginGpuHarness.cpp) `copies` times at once: FAIL lines, exits."""
    ok, why = gpu_visible()
    if not ok:
        raise Skip(why)
    try:
        program = trt_plugin_library().parent / HARNESS_NAME
    except PipelineError as e:
        raise Skip(first_line(e)) from None
    if not program.is_file():
        raise Skip(f"{program} is not built")
    t0 = time.perf_counter()
    procs = [subprocess.Popen([str(program)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=subprocess_env()) for _ in range(copies)]
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=max(1.0, timeout - (time.perf_counter() - t0)))[0])
    finally:
        for p in procs:  # only on a timeout: what is left of our own copies
            if p.poll() is None:
                p.kill()
                p.wait()
    fails = [line for out in outs for line in out.splitlines() if line.startswith("FAIL")]
    checks = [int(m.group(1)) for out in outs for m in re.finditer(r"^# (\d+) checks", out, re.M)]
    yield {"copies": copies, "fail_lines": len(fails), "first_fails": fails[:10], "checks": checks,
           "exit_codes": [p.returncode for p in procs], "wall_s": time.perf_counter() - t0}


def sections(log=print) -> dict:
    """name -> section, in the order they run: the goals' numbers first, the longest and least likely to matter
    last (a call cut short keeps what ran)."""
    return {"machine": machine, "gemm": gemm, "models": lambda: models(log=log), "video": lambda: video(log=log),
            "deform": deform, "harness": harness}
