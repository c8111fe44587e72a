"""`bench`'s report: results, sweeps, baseline ratios and roofline, the folder/video/startup/kernel sections and the
Ray and Triton runs as report blocks (report.md and report.html from the same), and the latency plots."""
from __future__ import annotations

import json
from pathlib import Path

from pipeline.artifacts.atomic import atomic_write
from pipeline.errors import printable
from pipeline.htmlreport import (
    Code,
    Heading,
    Items,
    items,
    para,
    plot_figure,
    said,
    to_lines,
    to_markdown,
    write_report,
)
from pipeline.report.machine import env_items
from pipeline.report.peers import peers_blocks
from pipeline.report.plots import plt_, save_fig
from pipeline.report.tables import (
    budgets,
    fidelity_cell,
    fmt,
    json_default,
    loss,
    percent,
    roofline_share,
    runs_phrase,
    sanitize,
    speedup,
    table,
)

RESULT_HEADER = ["model", "sweep", "backend", "size", "scale", "batch", "threads", "n", "mean ms", "median ms",
                 "p90 ms", "p99 ms", "min ms", "max ms", "images/s", "MPix/s", "speed-up", "roofline",
                 "peak RSS MB", "max abs err"]


def result_row(r: dict) -> list:
    lat = r["latency_ms"]
    return [r["model"], r["sweep"], r["backend"], r["size"], r["scale"], r["batch"], r.get("threads"), lat["n"],
            lat["mean"], lat["median"], lat["p90"], lat["p99"], lat["min"], lat["max"], r["images_per_s"],
            r["mpix_per_s"], speedup(r.get("speedup_vs_baseline")), roofline_share(r.get("roofline_fraction")),
            r.get("peak_rss_mb"), r.get("max_abs_err")]


def kernel_section(section: dict | None) -> list:
    """The bench's CUDA kernel section (pipeline.bench.kernels); nothing when it did not run (see Not run)."""
    if not section:
        return []
    return [Heading("Kernels on CUDA (ours vs PyTorch, same run)"),
            para("Median of CUDA-event-timed calls after warm-up; ratio = PyTorch ms / ours ms (> 1: ours faster)."),
            table(["op", "vs", "precision", "shape", "ours ms", "PyTorch ms", "ratio", "floor", "meets floor"],
                  [[r["op"], r["vs"], r["precision"], r["shape"], r["ours_ms"], r["torch_ms"], r["ratio"],
                    r["floor"], "" if r["meets_floor"] is None else r["meets_floor"]] for r in section["kernels"]]),
            para("Models end to end on torch CUDA (eager):"),
            table(["model", "precision", "shape", "median ms"],
                  [[m["model"], m["precision"], m["shape"], m["median_ms"] if m["median_ms"] is not None
                    else m.get("error", "")] for m in section["models"]])]


def ray_section(result: dict) -> list:
    """The Ray comparison (pipeline.bench.ray_bench) as a table."""
    rows = [["local", f"{result['local']['wall_s']:.1f}", f"{result['local']['process_s']:.1f}", "1.00x", "1.00x",
             "-", "-"]]
    for k, r in result["ray"].items():
        proc_ratio = f"{r['process_ratio_vs_local']:.2f}x" if r["process_ratio_vs_local"] else "-"
        rows.append([f"Ray, {k} actor(s)", f"{r['wall_s']:.1f}", f"{r['process_s']:.1f}",
                     f"{r['wall_ratio_vs_local']:.2f}x", proc_ratio, f"{r['fixed_s']:.1f}",
                     f"{r['overhead_ms_per_image']:.1f}"])
    return [para(f"Folder of {result['images']} images, {runs_phrase(result['repeats'])}; local backend: "
                 f"{result['backend']}."),
            table(["run", "wall s", "processing s", "vs local (wall)", "vs local (processing)", "Ray fixed s",
                   "Ray overhead ms/image"], rows), *ray_video_section(result.get("video"))]


def ray_video_section(video: dict | None) -> list:
    """One clip split into segments over the actors (pipeline.bench.ray_bench.ray_video_bench)."""
    if not video:
        return []
    rows = [["local", f"{video['local']['fps']:.1f}", "-", "-", "-", "-", f"{video['local']['wall_s']:.1f}"]]
    for k, r in video["ray"].items():
        rows.append([f"Ray, {k} actor(s)", f"{r['fps']:.1f}", f"{r['vs_first']:.2f}x" if r["vs_first"] else "-",
                     str(r["segments"]), f"{r['seek_share']:.2%}" if r["seek_share"] is not None else "-",
                     f"{r['join_share']:.2%}", f"{r['wall_s']:.1f}"])
    return [para(f"One clip of {video['frames']} frames into FFV1, {runs_phrase(video['repeats'])}; frames/s of the "
                 "processing phase; seek: the segments' opening and seeking, share of the actors' time; join: the "
                 "driver's stream copy, share of the wall time."),
            table(["run", "frames/s", "vs 1 actor", "segments", "seek share", "join share", "wall s"], rows)]


def segments_section(result: dict) -> list:
    """A local run's segment overhead and segmented H.264 sizes (pipeline.bench.segments_bench)."""
    o = result["overhead"]
    share = f"{o['share']:.2%}" if o["share"] is not None else "-"
    rows = [[f"FFV1, {o['segment_s']:g} s segments ({o['segments']})", f"{o['segmented_s']:.1f}",
             f"{o['whole_s']:.1f}", f"{o['cut_s']:.2f}", f"{o['seek_s']:.2f}", f"{o['record_s']:.2f}",
             f"{o['join_s']:.2f}", share]]
    sizes = [[name, str(r["segments"]), f"{r['bytes']:,}", f"{r['vs_continuous']:.2%}"]
             for name, r in result["h264"].items()]
    w, h = result["size"]
    return [para(f"One {result['clip_s']:g} s clip ({result['frames']} frames, {w}x{h}) upscaled locally on "
                 f"{result['backend']} with {result['model']}. Overhead: the segmented run's cut (the plan's pass "
                 "over the packets), seeks, records (each finished segment demuxed and hashed) and join, as a share "
                 "of its wall time (with the near-free model, an upper bound for any real model's run). The wall "
                 "times' difference also holds what is not split out (each segment's reader, decoder and encoder "
                 "start afresh) and the machine's noise."),
            table(["run", "wall s", "whole run wall s", "cut s", "seek s", "record s", "join s", "overhead share"],
                  rows),
            para("H.264 video bytes of each run against one continuous encode of the same frames at the same "
                 "settings (default: 60 s segments; a clip under two segments runs whole)."),
            table(["H.264 run", "segments", "video bytes", "vs continuous"], sizes)]


def triton_section(result: dict) -> list:
    """Served throughput (pipeline.bench.triton_bench) as a table."""
    rows = [["local folder run", f"{result['local']['wall_s']:.1f}", f"{result['local']['process_s']:.2f}",
             f"{result['local']['images_per_s']:.1f}", "1.00x"]]
    rows += [[f"Triton, {k} client(s)", f"{r['wall_s']:.1f}", f"{r['process_s']:.2f}", f"{r['images_per_s']:.1f}",
              f"{r['vs_local']:.2f}x"] for k, r in result["triton"].items()]
    return [para(f"Folder of {result['images']} images, {runs_phrase(result['repeats'])}; backend: "
                 f"{result['backend']} (local and in the server's sr model); gRPC, one connection per client."),
            table(["run", "wall s", "processing s", "images/s", "vs local"], rows)]


def startup_section(rows: list[dict] | None) -> list:
    """Time to first image rows (pipeline.bench.startup); goal <= 1.0 s for 256² x3."""
    if not rows:
        return []
    return [Heading("Startup: time to first image"),
            para(Code("python -m pipeline sr one.png out.png --onnx F.onnx"), " in a fresh process (no PyTorch "
                 "imported), wall clock after one warm-up run, over the runs counted below; goal <= 1.0 s for "
                 "256² x3."),
            table(["model", "size", "scale", "runs", "median s", "min s", "max s"],
                  [[r["model"], r["size"], r["scale"], r["runs"], r["median_s"], r["min_s"], r["max_s"]]
                   for r in rows])]


# Published context for the video table (other tools, other hardware: not a race run here).
VIDEO_CONTEXT = [
    "vs-mlrt wiki, RIFE page (https://github.com/AmusementClub/vs-mlrt/wiki/RIFE): RTX 3090, 1920x1088, vs-mlrt "
    "v12, fp16: RIFE v4.4 (frame interpolation, not super-resolution) 71.30 fps on trt, 53.62 fps on ort-cuda.",
    "mpv-upscale-2x_animejanai wiki, Benchmarks (https://github.com/the-database/mpv-upscale-2x_animejanai/wiki/"
    "Benchmarks; a VapourSynth + TensorRT player setup, whose successor mpv-AnimeJaNai ships vs-mlrt's vsmlrt-cuda), "
    "RTX 4090, fp32: 2x_Compact 226.11 fps at 640x480 and 75.09 fps at 1280x720 input; 2x_SuperUltraCompact 583.82 "
    "and 191.16 fps.",
    "vs-mlrt's own super-resolution tables (waifu2x, RealESRGANv2, Real-CUGAN pages) could not be retrieved here, "
    "so none are quoted.",
]


def video_section(rows: list[dict] | None) -> list:
    if not rows:
        return []
    skipped = [r for r in rows if r["fps"] is None]
    return [Heading("Video (pipeline sr on a clip)"),
            para("A short H.264 clip panning over a held-out photo, auto backend at fp32 and at what ",
                 Code("--precision auto"), " picks, default codec (H.264 CRF 16, its default preset); fps = "
                 "frames / (first decode to last encode); inference fps = one frame per call on the same backend, in "
                 "the tiles ", Code("sr"), " cuts it into (its tile memory budget); of inference = fps / inference "
                 "fps; encoder share = the output's frames encoded alone (same preset and threads) as a share of "
                 "encode + inference time per frame; vs fp32 = fps / the fp32 run's at the same size, against the "
                 "floor this project holds itself to (on a 2-core AMX Xeon)."),
            # the run, its speed and its verdict (vs fp32, floor) first: at 1280 px the details may scroll
            table(["model", "backend", "precision", "input", "fps", "vs fp32", "floor", "output", "scale", "frames",
                   "tiles", "inference fps", "of inference", "preset", "encoder share"],
                  [[r["model"], r["backend"], r.get("precision", "fp32"),
                    f"{r['size']} {r['input'][0]}x{r['input'][1]}", r["fps"] if r["fps"] is not None else "not run",
                    speedup(r.get("vs_fp32")), speedup(r.get("floor")),
                    "x".join(map(str, r["output"])) if r.get("output") else "-", r["scale"], r.get("frames", "-"),
                    r.get("tiles", "-"), r.get("inference_fps", "-"), percent(r.get("of_inference"), 0),
                    r.get("preset") or "-", percent(r.get("encoder_share"), 0)]
                   for r in rows]),
            *([items(*[f"{r['model']} {r['size']} ({r.get('precision', 'fp32')}): not run, {r['skipped']}"
                       for r in skipped])] if skipped else []),
            para("Published numbers as context (GPUs, not this machine):"), items(*VIDEO_CONTEXT)]


def _loss(q: dict | None) -> list:
    """A row's measured quality columns: Y-PSNR loss, SSIM loss, budget, fidelity to fp32, within both."""
    if not q:
        return ["-", "-", "-", "-", "-"]
    return [loss(q["psnr_loss_db"]), loss(q["ssim_loss"]), q["budget_db"], fidelity_cell(q.get("fidelity")),
            q["within_budget"]]


def precision_section(doc: dict) -> list:
    """Every backend at every precision it runs at the main point, with its measured quality loss next to its speed,
    and what `--precision auto` picks against its floor."""
    main = [r for r in doc["results"] if r["sweep"] == "main"]
    if not any(r.get("precision", "fp32") != "fp32" for r in main) and not doc.get("precision_auto"):
        return []
    blocks = [Heading("Precisions: speed and measured quality (main point)"),
              para("Loss = held-out Y-PSNR (dB) and SSIM against the same backend at fp32 (pipeline.quality: "
                   f"the 4 held-out photos at the model's scale, measured once per model file and machine); budgets "
                   f"{budgets(main)}; fidelity = Y-PSNR of the output against fp32's own output, mean (worst "
                   "image), held to a floor per precision: within budget means within both; roofline against the "
                   "measured peak of the row's precision. ", Code("-"),
                   ": fp32, the reference itself."),
              table(["model", "backend", "precision", "median ms", "speed-up", "roofline", "Y-PSNR loss dB",
                     "SSIM loss", "budget dB", "fidelity dB (worst)", "within budget"],
                    [[r["model"], r["backend"], r.get("precision", "fp32"), r["latency_ms"]["median"],
                      speedup(r.get("speedup_vs_baseline")), roofline_share(r.get("roofline_fraction")),
                      *_loss(r.get("quality"))] for r in main])]
    if doc.get("precision_auto"):
        blocks += [para(Code("--precision auto"), " (the fastest precision within its budget on the backend ",
                        Code("auto"), " picks), against the baseline at the main point; each model's floor is the "
                        "speed-up this project holds itself to on a 2-core AMX Xeon:"),
                   table(["model", "runs", "median ms", "baseline ms", "speed-up", "floor", "meets floor",
                          "Y-PSNR loss dB"],
                         [[a["model"], a["label"], a["median_ms"], a["baseline_ms"], speedup(a["speedup"]),
                           speedup(a["floor"]), a["meets_floor"], loss((a.get("quality") or {}).get("psnr_loss_db"))]
                          for a in doc["precision_auto"]]),
                   items(*[(f"{a['model']}: ", *said(a["reason"])) for a in doc["precision_auto"]])]
        blocks += op_breakdown_blocks(doc["precision_auto"], doc.get("method", {}).get("config", {}).get("main_size"))
    return blocks


def op_breakdown_blocks(picks: list[dict], size) -> list:
    """Where one call of each `--precision auto` pick's graph spends its time, from its runtime's per-layer counters
    (the op types and kernels it ran, largest first, the rest summed): what is not int8 convolution shows here."""
    rows = [a for a in picks if a.get("ops")]
    if not rows:
        return []

    def line(ops: list[dict]) -> str:
        total = sum(o["ms"] for o in ops) or 1.0
        top = [f"{o['op']} {o['kernel']} {o['ms']:.2f} ms ({o['ms'] / total:.0%})" for o in ops[:8]]
        rest = sum(o["ms"] for o in ops[8:])
        return f"{total:.1f} ms counted: " + ", ".join(top + ([f"other {rest:.2f} ms"] if ops[8:] else []))

    return [para("Op breakdown of each ", Code("--precision auto"), f" pick at {size}x{size} (the runtime's own "
                 "per-layer counters, median of 5 calls; the counters add their own overhead, so the sum exceeds the "
                 "timed median a little):"),
            items(*[(f"{a['model']} ({a['label']}): ", line(a["ops"])) for a in rows])]


def _set_by(pk: dict) -> str:
    """Where a peak came from when a row beat the GEMM (pipeline.bench.results.apply_peak)."""
    by = pk.get("set_by")
    return f"; raised to {by}'s rate, which beat the GEMM" if by and by != "GEMM" else ""


def peak_spread(pk: dict) -> str:
    """The spread of a peak's GEMM measurements, where there were several: on a machine shared with other work they
    differ by tens of percent (134 and 198 GFLOP/s in one run), and every roofline share moves with the highest."""
    samples = [s for s in pk.get("samples", []) if s]
    if len(samples) < 2:
        return ""
    return (f"; its {len(samples)} GEMM measurements ranged {min(samples):.0f}-{max(samples):.0f} GFLOP/s "
            f"({100 * (max(samples) / min(samples) - 1):.0f} % apart): roofline shares move with the highest")


def _method_items(doc: dict) -> Items:
    m = doc["method"]
    heavy = m.get("config", {}).get("heavy_call_s")
    return items(
        f"{m['warmup']} warm-up call(s), then up to {m['iters']} timed calls per configuration, stopped early "
        f"after {fmt(m['time_budget_s'])} s (at least {m['min_iters']}); each call is synchronised "
        f"({m['sync']}); wall clock: time.perf_counter.",
        *([f"Big configurations: when the baseline call is estimated (main point's cost per output pixel) "
           f"above {fmt(heavy)} s, 1 warm-up + 1 timed call; above {fmt(m['config']['max_call_s'])} s the "
           "configuration is skipped (listed under Not run)."] if heavy else []),
        "Input: random float32 NCHW in [0, 1]; output size round(H x scale). Throughput = batch / median "
        "latency; MPix/s = output pixels x batch / median latency.",
        f"Baseline: {m['baseline']}. Speed-up = baseline median / backend median, same run, same configuration.",
        "Roofline: model FLOPs (per call) / measured machine peak = the shortest possible latency; "
        "roofline column = that time / median latency (1.0 = at peak). A precision's peak is never under the one "
        "before it (fp32, bf16, int8), nor under what any of its rows reached, so no share passes 1.0.",
        f"Peak RSS: highest resident set size of this process sampled every 5 ms during the timed calls"
        f"{'; device memory: torch.cuda.max_memory_allocated' if doc['environment'].get('gpu') else ''}.")


def _bench_method(doc: dict) -> list:
    """The environment, how the bench measured, and the models' FLOPs."""
    env = env_items(doc["environment"])
    peaks = items(
        f"Machine peak (measured): {fmt(doc['peak']['gflops'])} GFLOP/s fp32 ({doc['peak']['method']}; "
        f"highest of {len(doc['peak'].get('samples', [1]))} measurements: run start and after each model)"
        + _set_by(doc["peak"]) + peak_spread(doc["peak"]),
        *[f"{p} peak (measured): {fmt(pk['gflops'])} GFLOP/s ({pk['method']})" + _set_by(pk) + peak_spread(pk)
          for p, pk in doc.get("peaks", {}).items() if p != "fp32"],
        *[f"{p} peak: not measured: {why}; {p} rows have no roofline share"
          for p, why in doc.get("peaks_not_measured", {}).items()])
    return [Heading("Benchmark", 1), Heading("Environment"), Items(env.items + peaks.items), Heading("Method"),
            _method_items(doc), Heading("Models"),
            table(["model", "input -> output (default scale)", "GFLOP per call", "MACs per output pixel"],
                  [[k, v["shape"], v["gflop_256"], v["macs_per_output_pixel"]] for k, v in doc["flops"].items()])]


def _bench_auto(doc: dict) -> list:
    if not doc.get("auto"):
        return []
    return [Heading("Auto backend vs baseline (performance floor)"),
            table(["model", "auto picks", "size", "scale", "auto median ms", "baseline median ms", "speed-up",
                   "floor", "meets floor", "roofline"],
                  [[a["model"], a["backend"], a["size"], a["scale"], a["median_ms"], a["baseline_ms"],
                    speedup(a["speedup"]), speedup(a["floor"]), a["meets_floor"],
                    roofline_share(a["roofline_fraction"])]
                   for a in doc["auto"]]),
            items(*[(f"{a['model']}: ", *said(a["reason"])) for a in doc["auto"]])]


FOLDER_HEADER = ["model", "backend", "images", "size", "folder ms/img", "inference ms/img", "share %",
                 "share % of the fastest runs"]


def _folder_rows(rows: list[dict], backend_key: str) -> list[list]:
    def backend(f: dict) -> str:
        lower = f.get("precision", "fp32") != "fp32" and backend_key == "backend"  # `--precision auto`'s pick
        return f"{f[backend_key]} {f['precision']}" if lower else f[backend_key]

    return [[f["model"], backend(f), f["images"], f["size"], f["folder_ms_per_image"],
             f["inference_ms_per_image"], 100 * f["ratio"], 100 * f["ratio_best"]] for f in rows]


def _bench_folders(doc: dict) -> list:
    """Folder runs against pure inference (host and GPU), and the sr stage's own cost."""
    blocks = []
    if doc.get("folder"):
        blocks += [Heading("Whole folder run (pipeline sr) vs pure inference"),
                   para("Same loaded backend and images, folder and inference runs alternating. Inference is the "
                        "faster of one call after another and, where the backend has CPU streams, two images at "
                        "once as the folder run submits them. Share = inference time / folder time, of the medians "
                        "(goal >= 90 %, judged on 8 or more images of 256² or larger: fewer or smaller ones time "
                        "start-up); the last column divides the fastest inference run by the fastest folder run, "
                        "which may be lower or higher."),
                   table(FOLDER_HEADER, _folder_rows(doc["folder"], "backend"))]
    if doc.get("gpu_folder"):
        blocks += [Heading("GPU folder run vs pure inference, per device backend"),
                   para("As above, on the CUDA device (goal: share >= 85 %)."),
                   table(FOLDER_HEADER, _folder_rows(doc["gpu_folder"], "backend_description"))]
    if doc.get("output_check"):
        blocks += [Heading("Every output checked for NaN / inf: the check's cost"),
                   para("The check of one float output against the inference call that made it, same loaded "
                        "backend, alternating, medians (goal: <= 2 % of inference): numpy's on a host backend, the "
                        "device's (between CUDA events) on a device backend."),
                   table(["model", "backend", "input", "path", "check ms", "inference ms", "check %"],
                         [[c["model"], c["backend_description"], f"{c['size']}^2", c.get("check_path", "host"),
                           c["check_ms"], c["inference_ms"], c["check_pct"]] for c in doc["output_check"]])]
    if doc.get("stage_cost"):
        c = doc["stage_cost"]
        blocks += [Heading("The sr stage's own cost"),
                   para(f"A folder run of {c['images']} x {c['size']}^2 images through ", Code(f"--model {c['model']}"),
                        f" (nearest-neighbour x3: inference is next to free) on {c['backend']}, minus pure inference "
                        f"of the same images; {runs_phrase(c['repeats'], 'alternating ')}."),
                   table(["stage CPU ms/MPix", "stage wall ms/MPix", "folder CPU ms/MPix", "folder wall ms/MPix",
                          "cores busy", "usable cores", "decode/encode threads"],
                         [[c["stage_cpu_ms_per_mpix"], c["stage_wall_ms_per_mpix"], c["folder_cpu_ms_per_mpix"],
                           c["folder_wall_ms_per_mpix"], c["cores_busy"], c["usable_cores"], c["workers"]]])]
    return blocks


def _host_side(rows: list[dict] | None) -> list:
    """The host side on the stand-in device (pipeline.bench.host_side): CPU per output megapixel."""
    if not rows:
        return []
    return [Heading("The host side on a stand-in device"),
            para("sr on the stand-in backend (nearest-neighbour x3, 0.4 ms of device time per output MPix spent "
                 "asleep): the CPU of the thread that drives inference (goals: folder <= 0.4, video <= 1.0 ms per "
                 "output MPix) and of the whole process (folder <= 8), and the video's frames/s against the encoder "
                 "alone on the same frames and threads (goal >= 85 %); medians."),
            table(["run", "input", "driving thread CPU ms/MPix", "process CPU ms/MPix", "wall ms/MPix",
                   "of encoder alone", "meets goals"],
                  [[r["kind"], f"{r['images']} x {r['size']}^2" if r["kind"] == "folder" else
                    f"{r['input'][0]}x{r['input'][1]}, {r['frames']} frames", r["serial_cpu_ms_per_mpix"],
                    r["host_cpu_ms_per_mpix"], r["wall_ms_per_mpix"], r.get("of_encoder", ""),
                    "yes" if r["meets_goals"] else "no"] for r in rows])]


def goals_section(doc: dict) -> list:
    """Every goal met or MISSED (missed first) and each row whose repeats differ past the noise ratio
    (pipeline.bench.verdicts decides both; the document carries them)."""
    if "goals" not in doc:  # a document from before the section
        return []
    rows = [["MISSED" if not g["met"] else "met", g["what"], g["value"], g["goal"]]
            for g in sorted(doc["goals"], key=lambda g: g["met"])]
    blocks = [Heading("Goals and noise"),
              table(["", "what", "value", "goal"], rows) if rows else para("No goal was measured in this run.")]
    noise = doc.get("noise") or []
    blocks.append(para(f"Noise: {len(noise)} row(s) whose repeats differ by more than the noise ratio (the slowest "
                       "over the fastest): their medians may be off by tens of percent." if noise else
                       "Noise: no row's repeats differ by more than the noise ratio."))
    if noise:
        blocks.append(items(*noise))
    return blocks


def bench_blocks(doc: dict) -> list:
    """bench's report as blocks (pipeline.htmlreport.document), plots included (doc["plots"])."""
    blocks = _bench_method(doc) + goals_section(doc) + _bench_auto(doc) + precision_section(doc) \
        + peers_blocks(doc) + _bench_folders(doc)
    blocks += video_section(doc.get("video")) + _host_side(doc.get("host_side")) + startup_section(doc.get("startup"))
    if doc.get("ray"):
        blocks += [Heading("Folder run through Ray vs locally"), *ray_section(doc["ray"])]
    if doc.get("segments"):
        blocks += [Heading("Video segments: overhead and size"), *segments_section(doc["segments"])]
    if doc.get("triton"):
        blocks += [Heading("Folder run through a Triton server vs locally"), *triton_section(doc["triton"])]
    blocks += kernel_section(doc.get("kernels"))
    blocks += [Heading("Results"), table(RESULT_HEADER, [result_row(r) for r in doc["results"]])]
    if doc.get("skipped"):
        blocks += [Heading("Not run"), items(*doc["skipped"])]
    if doc.get("plots"):
        blocks += [Heading("Plots"), *[plot_figure(k, v) for k, v in doc["plots"].items()]]
    return blocks


# The Markdown of each section, for tools and tests that read one.
def bench_markdown(doc: dict) -> str:
    return to_markdown(bench_blocks(doc))


def kernel_markdown(section: dict | None) -> list[str]:
    return to_lines(kernel_section(section))


def ray_markdown(result: dict) -> list[str]:
    return to_lines(ray_section(result))


def triton_markdown(result: dict) -> list[str]:
    return to_lines(triton_section(result))


def startup_markdown(rows: list[dict] | None) -> list[str]:
    return to_lines(startup_section(rows))


def video_markdown(rows: list[dict] | None) -> list[str]:
    return to_lines(video_section(rows))


def _bar_label(r: dict) -> str:
    return f"{printable(r['model'])}\n{r['backend']}"  # a name from a user's file: no control characters drawn


def plot_bench(doc: dict, out_dir: Path) -> dict[str, str]:
    plt = plt_()
    plots = {}
    results = doc["results"]
    models = sorted({r["model"] for r in results})
    # latency vs size per backend
    size_rows = [r for r in results if r["sweep"] in ("size", "main")]
    if size_rows:
        fig, axes = plt.subplots(1, len(models), figsize=(5 * len(models), 4), squeeze=False)
        for ax, model in zip(axes[0], models, strict=True):
            for be in sorted({r["backend"] for r in size_rows if r["model"] == model}):
                pts = sorted({(r["size"], r["latency_ms"]["median"]) for r in size_rows
                              if r["model"] == model and r["backend"] == be and r["batch"] == 1})
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=be)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("input side (px)")
            ax.set_ylabel("median latency (ms)")
            ax.set_title(printable(model))
            ax.legend(fontsize=7)
        p = out_dir / "latency_vs_size.png"
        save_fig(fig, p)
        plt.close(fig)
        plots["latency_vs_size"] = str(p)
    main = [r for r in results if r["sweep"] == "main" and r.get("speedup_vs_baseline")]
    if main:
        fig, ax = plt.subplots(figsize=(max(6, 0.7 * len(main) + 2), 4))
        ax.bar(range(len(main)), [r["speedup_vs_baseline"] for r in main])
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.set_xticks(range(len(main)), [_bar_label(r) for r in main], rotation=60, ha="right",
                      fontsize=7)
        ax.set_ylabel("speed-up vs PyTorch eager loop")
        sides = sorted({r["size"] for r in main})
        ax.set_title(f"Speed-up vs baseline ({', '.join(f'{n}x{n}' for n in sides)} input, default scale)")
        p = out_dir / "speedup.png"
        save_fig(fig, p)
        plt.close(fig)
        plots["speedup"] = str(p)
    err, exact = error_bars(results)
    if err:
        fig, ax = plt.subplots(figsize=(max(6, 0.7 * len(err) + 2), 4))
        ax.bar(range(len(err)), [r["max_abs_err"] for r in err])
        ax.set_yscale("log")
        ax.set_xticks(range(len(err)), [_bar_label(r) for r in err], rotation=60, ha="right",
                      fontsize=7)
        ax.set_ylabel("max abs error vs PyTorch FP32")
        zero = ", ".join(_bar_label(r).replace("\n", " ") for r in exact)
        ax.set_title("Error by backend (same inputs as the timing)" + (f"; error 0, not drawn: {zero}" if zero else ""),
                     fontsize=9)
        p = out_dir / "error.png"
        save_fig(fig, p)
        plt.close(fig)
        plots["error"] = str(p)
    return plots


def error_bars(results: list[dict]) -> tuple[list[dict], list[dict]]:
    """The main sweep's rows with an error to draw on the log scale, and those with none (the reference itself, or
    a backend exactly equal to it): 0 has no place on a log axis, and a 1e-12 bar would claim an error."""
    rows = [r for r in results if r["sweep"] == "main" and r.get("max_abs_err") is not None]
    return [r for r in rows if r["max_abs_err"] > 0], [r for r in rows if r["max_abs_err"] <= 0]


def write_bench(doc: dict, out_dir: Path) -> dict[str, Path]:
    out_dir = Path(out_dir)
    doc["plots"] = plot_bench(doc, out_dir)
    paths = {"json": out_dir / "report.json", "md": out_dir / "report.md"}
    atomic_write(paths["json"], json.dumps(sanitize(doc), indent=2, default=json_default) + "\n")
    _, paths["html"] = write_report(paths["md"], bench_blocks(doc))
    return paths
