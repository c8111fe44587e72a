"""`python -m pipeline bench`: latency/throughput of every available backend, with the tutorial's plain
PyTorch loop as the baseline measured in the same run, FLOPs and the machine's measured peak (roofline),
sweeps over input size, scale, batch and CPU threads, the whole folder run (`pipeline sr`) vs pure
inference, and the optimisation ideas of pipeline.export.fold. Writes report.md, report.json, PNG plots.
"""
from __future__ import annotations

import contextlib
import math
import os
import statistics
import tempfile
import threading
import time
import warnings
from pathlib import Path

import numpy as np

from pipeline.errors import PipelineError

FLOOR_SPEEDUP = 1.8  # issue 7: auto must be >= 1.8x the torch-eager loop for SRCNN x3 at 256^2 on this CPU
BASELINE = "torch-eager-loop"
FULL = dict(main_size=256, sizes=(128, 256, 512, 1024), scales=(2.0, 3.0, 4.0, 2.5), batches=(1, 2, 4),
            batch_size=128, threads=(1, 2), iters=20, time_budget=3.0, min_iters=2, warmup=1, folder_images=4,
            folder_size=256, ideas=True, max_call_s=15.0, heavy_call_s=4.0)
QUICK = dict(main_size=128, sizes=(64, 128), scales=(2.0, 3.0), batches=(1, 2), batch_size=64, threads=(),
             iters=5, time_budget=0.5, min_iters=2, warmup=1, folder_images=2, folder_size=64, ideas=False,
             max_call_s=3.0, heavy_call_s=1.0)


# -- measuring -----------------------------------------------------------------------------------------
def latency_stats(ms: list[float]) -> dict:
    """n, mean, median, p90, p99, min, max of latencies in ms (percentiles: linear interpolation)."""
    if not ms:
        raise ValueError("no latencies")
    a = np.asarray(ms, dtype=np.float64)
    return {"n": int(a.size), "mean": float(a.mean()), "median": float(np.median(a)),
            "p90": float(np.percentile(a, 90)), "p99": float(np.percentile(a, 99)),
            "min": float(a.min()), "max": float(a.max())}


class RssSampler:
    """Peak resident set size of this process, sampled every `interval` s while active."""

    def __init__(self, interval: float = 0.005):
        import psutil

        self.proc, self.interval, self.peak = psutil.Process(), interval, 0
        self._stop = threading.Event()

    def _loop(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self.proc.memory_info().rss)
            self._stop.wait(self.interval)

    def __enter__(self):
        self.peak = self.proc.memory_info().rss
        self._t = threading.Thread(target=self._loop, daemon=True)
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, self.proc.memory_info().rss)


def _available_bytes() -> int | None:
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:
        return None


def _sync():
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.synchronize()
    except Exception:
        pass


def time_calls(fn, *, warmup: int = 1, iters: int = 20, time_budget: float = 4.0, min_iters: int = 2) -> dict:
    """Warm-up calls, then up to `iters` timed calls (stop once `time_budget` s are spent and at least
    `min_iters` ran), the device synchronised around each. Returns latency list (ms) and peak RSS (MB)."""
    for _ in range(warmup):
        fn()
    _sync()
    gpu_peak = None
    with contextlib.suppress(Exception):
        import torch

        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
    ms: list[float] = []
    with RssSampler() as rss:
        start = time.perf_counter()
        while len(ms) < iters and (len(ms) < min_iters or time.perf_counter() - start < time_budget):
            _sync()
            t0 = time.perf_counter()
            fn()
            _sync()
            ms.append((time.perf_counter() - t0) * 1e3)
    with contextlib.suppress(Exception):
        import torch

        if torch.cuda.is_available():
            gpu_peak = torch.cuda.max_memory_allocated() / 2**20
    return {"ms": ms, "peak_rss_mb": rss.peak / 2**20, "peak_device_mb": gpu_peak}


class _LabelledRss(RssSampler):
    """RssSampler that attributes each sample to the variant running at that moment."""

    def __init__(self, interval: float = 0.005):
        super().__init__(interval)
        self.label, self.peaks = None, {}

    def _loop(self):
        while not self._stop.is_set():
            rss = self.proc.memory_info().rss
            if self.label is not None:
                self.peaks[self.label] = max(self.peaks.get(self.label, 0), rss)
            self._stop.wait(self.interval)


def time_interleaved(fns: list, *, warmup: int = 1, iters: int = 20, time_budget: float = 4.0,
                     min_iters: int = 2) -> dict:
    """Like time_calls for several (name, fn) at once, in round-robin: each round times every fn once,
    so a load change on a shared machine hits all of them alike. Rounds stop at `iters`, or once
    `time_budget` s per fn were spent and `min_iters` rounds ran. Returns name -> {ms, peak_rss_mb, ...}."""
    for _, fn in fns:
        for _ in range(warmup):
            fn()
    _sync()
    ms = {name: [] for name, _ in fns}
    rounds = 0
    with _LabelledRss() as rss:
        start = time.perf_counter()
        while rounds < iters and (rounds < min_iters or time.perf_counter() - start < time_budget * len(fns)):
            for name, fn in fns:
                rss.label = name
                _sync()
                t0 = time.perf_counter()
                fn()
                _sync()
                ms[name].append((time.perf_counter() - t0) * 1e3)
                rss.peaks[name] = max(rss.peaks.get(name, 0), rss.proc.memory_info().rss)
                rss.label = None
            rounds += 1
    gpu_peak = None
    with contextlib.suppress(Exception):
        import torch

        if torch.cuda.is_available():
            gpu_peak = torch.cuda.max_memory_allocated() / 2**20
    return {name: {"ms": ms[name], "peak_rss_mb": rss.peaks.get(name, rss.peak) / 2**20, "peak_device_mb": gpu_peak}
            for name, _ in fns}


def measure_peak_gflops(threads: int | None = None, n: int = 1024, seconds: float = 1.0) -> dict:
    """The machine's fp32 peak as torch sees it: best GFLOP/s of an n x n x n matmul (2 n^3 FLOPs)."""
    import torch

    old = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        a, b = torch.rand(n, n), torch.rand(n, n)
        torch.mm(a, b)
        best, t_end = 0.0, time.perf_counter() + seconds
        while time.perf_counter() < t_end:
            t0 = time.perf_counter()
            torch.mm(a, b)
            best = max(best, 2 * n**3 / (time.perf_counter() - t0) / 1e9)
    finally:
        torch.set_num_threads(old)
    return {"gflops": best, "method": f"best of repeated torch.mm {n}x{n} fp32 for {seconds:g} s, "
                                      f"{threads or torch.get_num_threads()} threads"}


def flops_per_output_pixel(model_name: str) -> float:
    """FLOPs (2 x MACs, convolutions; deformable conv counted as its GEMM) per output pixel of one image."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from models.registry import get_spec, run

    spec = get_spec(model_name)
    net = spec.build().eval()  # FLOPs do not depend on the weights
    h = w = 16
    x = torch.rand(1, 3, h, w)
    with torch.inference_mode(), FlopCounterMode(display=False) as fc:
        y = run(net, spec, x, spec.default_scale)
    flops = float(fc.get_total_flops())
    if hasattr(net, "deform_weight"):  # torchvision::deform_conv2d is not in torch's flop table
        co, ci, kh, kw = net.deform_weight.shape
        flops += 2.0 * co * ci * kh * kw * y.shape[-2] * y.shape[-1]
    return flops / (y.shape[-2] * y.shape[-1])


# -- runners -----------------------------------------------------------------------------------------
class _Variant:
    """One thing to time: `infer(batch, scale)` plus a label."""

    def __init__(self, name, infer, describe="", reason=""):
        self.name, self.infer, self.describe, self.reason = name, infer, describe, reason


def baseline_variant(model_name: str, weights=None) -> _Variant:
    """The tutorial's plain loop: PyTorch eager, one image at a time, numpy in and out."""
    import torch

    from models.registry import get_spec, run
    from pipeline.analysis.compare import load_net

    spec = get_spec(model_name)
    net = load_net(model_name, weights)

    def infer(batch, scale):
        outs = []
        with torch.no_grad():
            for img in batch:
                outs.append(run(net, spec, torch.from_numpy(img[None]), scale).numpy())
        return np.concatenate(outs)

    return _Variant(BASELINE, infer, "PyTorch eager, for-loop over images, torch.no_grad")


def backend_variants(model_name: str, precisions=("fp32",), weights=None, log=print, skipped=None, only=None):
    from pipeline import backends as B

    out = []
    for precision in precisions:
        for st in B.available(model_name, precision, weights):
            label = st.name if precision == "fp32" else f"{st.name}-{precision}"
            if only is not None and st.name not in only:
                continue
            if st.name == "ort-cpu" and only is None:
                continue  # same session as "ort" when its best provider is the CPU one
            if not st.available:
                if skipped is not None:
                    skipped.append(f"{model_name} {label}: {st.reason}")
                continue
            try:
                be = B.create(st.name, model_name, precision, weights=weights)
            except PipelineError as e:
                if skipped is not None:
                    skipped.append(f"{model_name} {label}: {e}")
                continue
            out.append(_Variant(label, be.infer, be.describe(), st.reason))
    return out


def folded_variants(model_name: str, scale: float, weights=None, threads=None, only=None) -> list[_Variant]:
    if only is not None and "ort-folded" not in only:
        return []
    from pipeline import backends as B

    if "ort-folded" in getattr(B, "NAMES", ()):  # the backends run it themselves (backend_variants)
        return []
    if model_name not in ("srcnn", "srcnn-x3") or not float(scale).is_integer() or scale < 3:
        return []
    from pipeline.analysis.compare import folded_backend

    fb = folded_backend(model_name, int(scale), weights, threads)
    return [_Variant("ort-folded", fb.infer, fb.describe())]


@contextlib.contextmanager
def torch_threads(n: int | None):
    import torch

    old = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


# -- the benchmark -------------------------------------------------------------------------------------
def _record(results, *, model, sweep, variant, size, scale, batch, threads, timing, out_hw, flops_px, peak,
            baseline_ms=None, err=None):
    from models.registry import output_size

    oh, ow = out_hw or output_size(size, size, scale)
    lat = latency_stats(timing["ms"])
    med_s = lat["median"] / 1e3
    flops = flops_px * oh * ow * batch
    r = {"model": model, "sweep": sweep, "backend": variant.name, "describe": variant.describe, "size": size,
         "scale": scale, "batch": batch, "threads": threads, "out_h": oh, "out_w": ow, "latency_ms": lat,
         "latencies_ms": [round(v, 4) for v in timing["ms"]],
         "images_per_s": batch / med_s, "mpix_per_s": batch * oh * ow / med_s / 1e6,
         "gflop": flops / 1e9, "roofline_ms": flops / (peak * 1e9) * 1e3,
         "roofline_fraction": flops / (peak * 1e9) / med_s, "peak_rss_mb": timing["peak_rss_mb"],
         "peak_device_mb": timing["peak_device_mb"], "baseline_median_ms": baseline_ms,
         "speedup_vs_baseline": (baseline_ms / lat["median"]) if baseline_ms else None, "max_abs_err": err}
    results.append(r)
    return r


def bench_model(model: str, cfg: dict, peak: float, *, weights=None, log=print, skipped=None) -> dict:
    """All sweeps for one model; returns {'results': [...], 'auto': {...}, 'folder': {...}}."""
    from models.registry import get_spec, output_size
    from pipeline import backends as B

    spec = get_spec(model)
    scale0 = spec.default_scale
    flops_px = flops_per_output_pixel(model)
    rng = np.random.default_rng(0)
    results: list[dict] = []
    tkw = dict(warmup=cfg["warmup"], iters=cfg["iters"], time_budget=cfg["time_budget"], min_iters=cfg["min_iters"])
    base = baseline_variant(model, weights)
    only = cfg.get("backends")
    variants = backend_variants(model, weights=weights, log=log, skipped=skipped, only=only)
    base_ms_per_px = []  # baseline cost per output pixel, from the main point: sizes the big sweeps
    import torch

    default_threads = torch.get_num_threads()

    def note(msg):
        if skipped is not None:
            skipped.append(msg)

    def run_point(sweep, vs, size, scale, batch, threads=None, check=False):
        threads = threads or default_threads
        kw = tkw
        px = batch * math.prod(output_size(size, size, scale))
        where = f"{model} {sweep} {size}^2 x{scale:g} b{batch}" + (f" t{threads}" if threads != default_threads else "")
        if base_ms_per_px:
            est = base_ms_per_px[0] * px
            if est > cfg.get("max_call_s", math.inf) * 1e3:
                note(f"{where}: the baseline call would take ~{est / 1e3:.0f} s (> {cfg['max_call_s']:g} s per call)")
                return
            if est > cfg.get("heavy_call_s", math.inf) * 1e3:  # big inputs: 1 warm-up + 1 timed call
                kw = dict(warmup=1, iters=1, time_budget=0.0, min_iters=1)
        # Memory guard: ~3 live 64-channel fp32 HR feature maps per variant, and ORT keeps its arena per
        # session, so the variants add up. Over half of the available memory -> skip (a shared box OOMs).
        need = px * 64 * 4 * 3 * (1 + len(vs))
        avail = _available_bytes()
        if avail and need > avail / 2:
            note(f"{where}: needs ~{need / 2**30:.1f} GB for {1 + len(vs)} variants, {avail / 2**30:.1f} GB "
                 "available (large images: `pipeline sr` tiles them)")
            return
        x = rng.random((batch, 3, size, size), dtype=np.float32)
        ref = base.infer(x[:1], scale) if check else None
        errs, ok = {BASELINE: 0.0 if check else None}, [base]
        for v in vs:
            try:
                errs[v.name] = float(np.max(np.abs(v.infer(x[:1], scale) - ref))) if check else None
                ok.append(v)
            except PipelineError as e:
                note(f"{where} {v.name}: {e}")
        timings = time_interleaved([(v.name, (lambda v=v: v.infer(x, scale))) for v in ok], **kw)
        base_ms = float(np.median(timings[BASELINE]["ms"]))
        if not base_ms_per_px:
            base_ms_per_px.append(base_ms / px)
        for v in ok:
            r = _record(results, model=model, sweep=sweep, variant=v, size=size, scale=scale, batch=batch,
                        threads=threads, timing=timings[v.name], out_hw=None, flops_px=flops_px, peak=peak,
                        baseline_ms=base_ms, err=errs[v.name])
            log(f"  {where} {v.name:<17} {r['latency_ms']['median']:9.1f} ms  x{r['speedup_vs_baseline']:.2f} vs "
                f"baseline, {100 * r['roofline_fraction']:.0f}% of roofline")

    size0 = cfg["main_size"]
    fold0 = folded_variants(model, scale0, weights, only=only)
    run_point("main", variants + fold0, size0, scale0, 1, check=True)
    sweep_vs = [v for v in variants if v.name != "torch"] + fold0  # torch backend ~ the baseline loop at batch 1
    for size in cfg["sizes"]:
        if size != size0:
            run_point("size", sweep_vs, size, scale0, 1)
    if spec.dynamic_scale:
        for scale in cfg["scales"]:
            if scale != scale0 and spec.scale_range[0] <= scale <= spec.scale_range[1]:
                run_point("scale", [v for v in variants if v.name != "torch"]
                          + folded_variants(model, scale, weights, only=only), size0, scale, 1)
    for batch in cfg["batches"]:
        run_point("batch", variants + fold0, cfg["batch_size"], scale0, batch)
    for n in cfg["threads"]:
        if n == default_threads:
            continue  # every other sweep already ran with the default thread count
        with torch_threads(n):
            tv = [v for v in variants if v.name == "torch"]
            for v in variants:
                if v.name.startswith("ort"):
                    try:
                        be = B.create(v.name, model, "fp32", weights=weights, threads=n)
                        tv.append(_Variant(v.name, be.infer, be.describe()))
                    except PipelineError as e:
                        note(f"{model} threads={n} {v.name}: {e}")
            tv += folded_variants(model, scale0, weights, threads=n, only=only)
            run_point("threads", tv, size0, scale0, 1, threads=n)
    doc = {"results": results, "flops_per_output_pixel": flops_px}
    doc["auto"] = _auto(model, results, size0, scale0, weights)
    if cfg.get("folder_images"):
        try:
            doc["folder"] = folder_run(model, cfg["folder_images"], cfg["folder_size"], weights, log)
        except PipelineError as e:
            note(f"{model} folder run: {e}")
    return doc


def _auto(model: str, results: list[dict], size: int, scale: float, weights=None) -> dict | None:
    from pipeline import backends as B

    try:
        pick = B.pick_auto(model, "fp32", weights=weights)
    except PipelineError:
        return None
    name, reason = (pick.name, pick.reason) if hasattr(pick, "name") else tuple(pick)
    main = {r["backend"]: r for r in results if r["sweep"] == "main"}
    r = main.get(name)
    if r is None:
        return {"model": model, "backend": name, "reason": reason, "size": size, "scale": scale, "median_ms": None,
                "baseline_ms": main[BASELINE]["latency_ms"]["median"], "speedup": None, "floor": FLOOR_SPEEDUP,
                "meets_floor": None, "roofline_fraction": None}
    return {"model": model, "backend": name, "reason": reason, "size": size, "scale": scale,
            "median_ms": r["latency_ms"]["median"], "baseline_ms": r["baseline_median_ms"],
            "speedup": r["speedup_vs_baseline"], "floor": FLOOR_SPEEDUP,
            "meets_floor": r["speedup_vs_baseline"] >= FLOOR_SPEEDUP, "roofline_fraction": r["roofline_fraction"]}


def folder_run(model: str, n_images: int, size: int, weights=None, log=print, backend: str = "auto") -> dict:
    """Time `python -m pipeline sr` (in-process) on n held-out crops vs pure inference of the same images."""
    import json

    from pipeline import backends as B
    from pipeline.analysis.compare import compare_inputs
    from pipeline.cli import main as cli_main

    imgs = list(compare_inputs(size).items())[:n_images]
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "in", Path(tmp) / "out"
        src.mkdir()
        import cv2

        for name, x in imgs:
            rgb = (x[0].transpose(1, 2, 0) * 255 + 0.5).astype(np.uint8)
            cv2.imwrite(str(src / f"{name}.png"), rgb[:, :, ::-1])
        summary = Path(tmp) / "summary.json"
        argv = ["sr", str(src), str(dst), "--model", model, "--backend", backend, "--quiet", "--summary", str(summary)]
        if weights:
            argv += ["--weights", str(weights)]
        t0 = time.perf_counter()
        with open(os.devnull, "w") as devnull, contextlib.redirect_stderr(devnull), contextlib.redirect_stdout(devnull):
            rc = cli_main(argv)
        folder_s = time.perf_counter() - t0
        if rc != 0:
            raise PipelineError(f"pipeline sr exited with {rc}")
        try:
            used = json.loads(summary.read_text()).get("backend", backend)
        except (OSError, ValueError):
            used = backend
    be = B.create(backend, model, "fp32", weights=weights)
    from models.registry import get_spec

    scale = get_spec(model).default_scale
    be.infer(imgs[0][1], scale)  # warm
    t0 = time.perf_counter()
    for _, x in imgs:
        be.infer(x, scale)
    inf_s = time.perf_counter() - t0
    used_name = used if isinstance(used, str) else be.name
    log(f"  {model} folder run: {folder_s:.2f} s for {len(imgs)} images vs {inf_s:.2f} s pure inference ({be.name})")
    return {"model": model, "backend": used_name if used_name != "auto" else be.name, "images": len(imgs),
            "size": size, "folder_s": folder_s, "inference_s": inf_s, "overhead_s": folder_s - inf_s,
            "overhead_pct": 100.0 * (folder_s - inf_s) / folder_s}


def optimisation_ideas(peak: float, size: int = 256, weights=None, cfg=None, log=print) -> list[dict]:
    """SRCNN x3 at size^2 -> (3 size)^2: each idea timed against torch eager in the same run."""
    import onnxruntime as ort
    import torch

    from pipeline import backends as B
    from pipeline.analysis.compare import load_net as load_model
    from pipeline.export.fold import export_folded_onnx, fold_srcnn, ort_session_options

    cfg = cfg or FULL
    tkw = dict(warmup=1, iters=cfg["iters"], time_budget=cfg["time_budget"], min_iters=cfg["min_iters"])
    model = "srcnn-x3"
    net = load_model(model, weights)
    flops = flops_per_output_pixel(model) * (3 * size) ** 2
    xt = torch.from_numpy(np.random.default_rng(1).random((1, 3, size, size), dtype=np.float32))
    xn = xt.numpy()
    with torch.inference_mode():
        ref = net(xt).numpy()
    ideas, pending = [], []

    def add(idea, fn, note):
        try:
            err = float(np.max(np.abs(np.asarray(fn()) - ref)))
        except Exception as e:  # an idea that fails is reported, not fatal
            ideas.append({"idea": idea, "median_ms": None, "speedup": None, "roofline_fraction": None,
                          "note": f"failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"})
            return
        entry = {"idea": idea, "max_abs_err": err, "note": note, "gflop": flops / 1e9}
        ideas.append(entry)
        pending.append((entry, fn))

    def torch_fn(m, x):
        def f():
            with torch.inference_mode():
                return m(x).numpy()
        return f

    add("torch eager (baseline)", torch_fn(net, xt), "NCHW, inference_mode")
    cl = load_model(model, weights).to(memory_format=torch.channels_last)
    add("torch eager, channels_last", lambda: torch_fn(cl, xt.contiguous(memory_format=torch.channels_last))(),
        "NHWC activations (oneDNN)")
    with warnings.catch_warnings(), torch.inference_mode():
        warnings.simplefilter("ignore")
        frozen = torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.trace(load_model(model, weights), xt)))
    add("torch.jit trace+freeze+optimize_for_inference", torch_fn(frozen, xt), "oneDNN conv fusion (frozen)")
    folded = fold_srcnn(net, 3)
    add("torch, bicubic folded into conv1 (optimize.py)", torch_fn(folded, xt), "exact sub-pixel reformulation")
    try:
        be = B.create("ort", model, "fp32", weights=weights)
        onnx_file = be.onnx_file
        plain = ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
        add("ORT, default SessionOptions", lambda: plain.run(None, {"input": xn})[0], "same ONNX as the ort backend")
        add("ORT backend (tuned options)", lambda: be.infer(xn, 3.0), be.describe())
        one = B.create("ort", model, "fp32", weights=weights, threads=1)
        add("ORT backend, 1 thread", lambda: one.infer(xn, 3.0), "intra_op_num_threads=1")
    except PipelineError as e:
        ideas.append({"idea": "ORT", "median_ms": None, "speedup": None, "roofline_fraction": None, "note": str(e)})
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for conv3_lr, label in ((False, "conv3 on HR grid"), (True, "conv3 on LR grid")):
            p = Path(tmp) / f"f{int(conv3_lr)}.onnx"
            export_folded_onnx(fold_srcnn(net, 3, conv3_on_lr=conv3_lr), p)
            s = ort.InferenceSession(str(p), ort_session_options(), providers=["CPUExecutionProvider"])
            add(f"ORT, bicubic folded into conv1, {label}", lambda s=s: s.run(None, {"input": xn})[0],
                "optimize.FoldedSRCNN exported to ONNX (standard ops)")
    # Round-robin timing: every idea sees the same machine load.
    timings = time_interleaved([(e["idea"], fn) for e, fn in pending], **tkw)
    base = statistics.median(timings[pending[0][0]["idea"]]["ms"])
    for e, _ in pending:
        ms = timings[e["idea"]]["ms"]
        med = statistics.median(ms)
        e.update(median_ms=med, n=len(ms), speedup=base / med, roofline_fraction=flops / (peak * 1e9) / (med / 1e3))
        log(f"  idea {e['idea']:<52} {med:8.1f} ms  x{base / med:.2f}")
    return ideas


def run_bench(models: list[str], cfg: dict, *, weights=None, log=print) -> dict:
    from pipeline import report

    peak = measure_peak_gflops(seconds=1.5)
    log(f"machine peak: {peak['gflops']:.1f} GFLOP/s ({peak['method']})")
    doc = {"kind": "bench", "environment": report.environment(), "peak": peak, "results": [], "auto": [],
           "folder": [], "ideas": [], "flops": {}, "skipped": [],
           "method": {"warmup": cfg["warmup"], "iters": cfg["iters"], "time_budget_s": cfg["time_budget"],
                      "min_iters": cfg["min_iters"], "quick": cfg is QUICK or cfg.get("quick", False),
                      "sync": "torch.cuda.synchronize() before and after each call" if _has_cuda() else
                              "CPU calls are synchronous (outputs copied back to numpy inside the call)",
                      "baseline": f"{BASELINE}: the tutorial's plain loop, PyTorch eager, one image at a time",
                      "config": {k: list(v) if isinstance(v, tuple) else v for k, v in cfg.items()}}}
    for model in models:
        log(f"bench {model}")
        fpp = flops_per_output_pixel(model)
        from models.registry import get_spec

        s = get_spec(model).default_scale
        doc["flops"][model] = {"flops_per_output_pixel": fpp, "macs_per_output_pixel": round(fpp / 2),
                               "shape": f"256x256 -> {round(256 * s)}x{round(256 * s)}",
                               "gflop_256": fpp * round(256 * s) ** 2 / 1e9}
        part = bench_model(model, cfg, peak["gflops"], weights=weights, log=log, skipped=doc["skipped"])
        doc["results"] += part["results"]
        if part.get("auto"):
            doc["auto"].append(part["auto"])
        if part.get("folder"):
            doc["folder"].append(part["folder"])
        again = measure_peak_gflops(seconds=0.5)
        peak["samples"] = peak.get("samples", [peak["gflops"]]) + [again["gflops"]]
    from pipeline.bench.kernels import kernel_section

    log("kernels (CUDA)")
    doc["kernels"], why_not = kernel_section(models, quick=bool(cfg.get("quick")), log=log)
    if why_not:
        doc["skipped"].append(why_not)
        log(f"  not run: {why_not}")
    if cfg.get("ideas") and "srcnn-x3" in models:
        log("optimisation ideas (srcnn-x3)")
        doc["ideas"] = optimisation_ideas(peak["gflops"], cfg["main_size"], weights, cfg, log)
    apply_peak(doc, max(peak.get("samples", [peak["gflops"]])))
    return doc


def apply_peak(doc: dict, gflops: float) -> None:
    """Set the machine peak (GFLOP/s) and recompute every roofline number from it."""
    doc["peak"]["gflops"] = gflops
    for r in doc["results"]:
        r["roofline_ms"] = r["gflop"] / gflops * 1e3
        r["roofline_fraction"] = r["roofline_ms"] / r["latency_ms"]["median"]
    for i in doc.get("ideas", []):
        if i.get("median_ms"):
            i["roofline_fraction"] = i["gflop"] / gflops * 1e3 / i["median_ms"]
    main = {(r["model"], r["backend"]): r for r in doc["results"] if r["sweep"] == "main"}
    for a in doc.get("auto", []):
        r = main.get((a["model"], a["backend"]))
        if r is not None:
            a["roofline_fraction"] = r["roofline_fraction"]
            a["roofline_ms"] = r["roofline_ms"]


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


# -- CLI -------------------------------------------------------------------------------------------------


