"""Report writers for compare and bench: report.json (every number), report.md (tables a person reads,
generated from the same dict), PNG plots (matplotlib, Agg). Files are written atomically."""
from __future__ import annotations

import json
import math
import os
import platform
from pathlib import Path

import numpy as np
import onnxruntime as ort
import psutil

from pipeline.artifacts.atomic import atomic_path, atomic_write
from pipeline.htmlreport import write_html
from pipeline.native.cpu import cpu_name
from pipeline.native.cuda_driver import gpu_visible


# -- environment ---------------------------------------------------------------------------------------
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


def env_lines(env: dict) -> list[str]:
    gpu = env.get("gpu") or "none"
    return [
        f"- CPU: {env.get('cpu')} ({env.get('physical_cores', '?')} physical / {env.get('logical_cores')} logical cores"
        f", {env.get('memory_gb', '?')} GB RAM)",
        f"- GPU: {gpu}",
        f"- torch {env.get('torch')} (CUDA build {env.get('cuda_build')}), onnxruntime {env.get('onnxruntime')} "
        f"({', '.join(env.get('ort_providers', []))}), TensorRT {env.get('tensorrt')}",
        f"- Python {env.get('python')}, numpy {env.get('numpy')}, {env.get('platform')}",
    ]


# -- helpers -------------------------------------------------------------------------------------------
def fmt(v) -> str:
    """Number formatting shared by Markdown tables (tests parse it back)."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        if math.isnan(v):
            return "nan"
        if v == 0:
            return "0"
        if abs(v) < 1e-2 or abs(v) >= 1e6:
            return f"{v:.3e}"
        return f"{v:.1f}" if abs(v) >= 1000 else f"{v:.4g}"
    return str(v)


def db(v) -> str:
    """A PSNR (or its change) in dB: always two decimals, so a column reads evenly."""
    return "-" if v is None else f"{v:.2f}"


def percent(fraction) -> str:
    """A fraction (roofline, utilisation) as a percentage a person reads: 0.0996 -> '10.0 %'."""
    return "-" if fraction is None else f"{100 * fraction:.1f} %"


def speedup(ratio) -> str:
    """A speed-up (baseline time / our time) as the ratio and the change in speed a person reads:
    4.0 -> '4.00x (+300 %)', 0.5 -> '0.50x (-50 %)'."""
    return "-" if ratio is None else f"{ratio:.2f}x ({100 * (ratio - 1):+.0f} %)"


def table(header: list[str], rows: list[list]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(fmt(c) for c in r) + " |" for r in rows]
    return out


def parse_table(md: str, first_header: str, has: str | None = None) -> list[dict[str, str]]:
    """Rows of the first Markdown table whose first header cell is `first_header` (and that has a column
    `has`), as dicts header -> cell text (for tests/tools)."""
    lines = md.splitlines()
    for i, ln in enumerate(lines):
        cells = [c.strip() for c in ln.strip().strip("|").split("|")]
        if ln.startswith("|") and cells[0] == first_header and (has is None or has in cells) \
                and (i == 0 or not lines[i - 1].startswith("|")):
            rows = []
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                rows.append(dict(zip(cells, [c.strip() for c in row.strip().strip("|").split("|")], strict=False)))
            return rows
    return []


def _json_default(o):
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(type(o).__name__)


def _sanitize(o):
    """JSON has no inf/nan: write them as strings 'inf', '-inf', 'nan' (readers: float(x))."""
    if isinstance(o, float) and not math.isfinite(o):
        return "nan" if math.isnan(o) else ("inf" if o > 0 else "-inf")
    if isinstance(o, dict):
        return {k: _sanitize(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_sanitize(v) for v in o]
    return o


def _save_fig(fig, path: Path) -> None:
    """The plot as PNG, and as an SVG twin that report.html draws inline (pipeline.htmlreport)."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    with atomic_path(Path(path).with_suffix(".svg")) as tmp:
        fig.savefig(tmp, format="svg", bbox_inches="tight")


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# -- compare -------------------------------------------------------------------------------------------
COMPARE_HEADER = ["model", "scale", "backend", "precision", "status", "max abs", "median abs", "p99 abs",
                  "max rel", "PSNR dB", "criterion"]


def compare_markdown(doc: dict) -> str:
    lines = ["# Backend comparison vs PyTorch FP32", ""] + env_lines(doc["environment"]) + [""]
    for m in doc["models"]:
        tol = m["tolerances"]
        lines += [f"Model **{m['model']}**: {len(m['images'])} held-out images ({', '.join(m['images'])}), "
                  f"centre crop {m['input_size']}x{m['input_size']}; reference: {m['reference']}. "
                  f"Pass: FP32 max abs <= {tol['fp32_max_abs']:g}, FP16 PSNR >= {tol['fp16_psnr_db']:g} dB. "
                  f"Relative error denominators are clamped at {tol['rel_floor']:g}.", ""]
    rows, notes = [], []
    for m in doc["models"]:
        for r in m["rows"]:
            if r["status"] in ("pass", "fail"):
                rows.append([m["model"], r["scale"], r["backend"], r["precision"], r["status"].upper(), r["max_abs"],
                             r["median_abs"], r["p99_abs"], r["max_rel"], r["psnr_db"], r["criterion"]])
            else:
                notes.append(f"- {m['model']} x{fmt(r['scale'])} {r['backend']} {r['precision']}: "
                             f"{r['status']} ({r.get('reason', '')})")
            if "bisect" in r:
                b = r["bisect"]
                notes.append(f"- bisect {m['model']} {r['backend']} {r['precision']}: "
                             f"{b.get('summary') or b.get('error')}")
    lines += table(COMPARE_HEADER, rows)
    if notes:
        lines += ["", "Not compared / diagnostics:", ""] + notes
    return "\n".join(lines) + "\n"


def plot_compare(doc: dict, path: Path) -> None:
    plt = _plt()
    rows = [(f"{m['model']}\n{r['backend']} {r['precision']}", r["max_abs"], r["status"])
            for m in doc["models"] for r in m["rows"] if r["status"] in ("pass", "fail")]
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(rows) + 2), 4))
    if rows:
        vals = [max(v, 1e-12) if math.isfinite(v) else 1.0 for _, v, _ in rows]
        ax.bar(range(len(rows)), vals, color=["tab:green" if s == "pass" else "tab:red" for *_, s in rows])
        ax.set_xticks(range(len(rows)), [r[0] for r in rows], rotation=60, ha="right", fontsize=7)
        ax.set_yscale("log")
        for i, (_, v, _) in enumerate(rows):
            if v == 0:
                ax.text(i, 1e-12, "exact", ha="center", va="bottom", fontsize=7)
        tol = doc["models"][0]["tolerances"]["fp32_max_abs"] if doc["models"] else None
        if tol:
            ax.axhline(tol, color="gray", ls="--", lw=0.8, label=f"FP32 tolerance {tol:g}")
            ax.legend(fontsize=7)
    ax.set_ylabel("max abs error vs PyTorch FP32")
    ax.set_title("Error by backend (green: pass, red: fail)")
    _save_fig(fig, path)
    plt.close(fig)


def write_compare(doc: dict, out_dir: Path) -> dict[str, Path]:
    out_dir = Path(out_dir)
    paths = {"json": out_dir / "report.json", "md": out_dir / "report.md", "error_png": out_dir / "error.png"}
    atomic_write(paths["json"], json.dumps(_sanitize(doc), indent=2, default=_json_default) + "\n")
    atomic_write(paths["md"], compare_markdown(doc))
    plot_compare(doc, paths["error_png"])
    return paths


# -- bench ---------------------------------------------------------------------------------------------
RESULT_HEADER = ["model", "sweep", "backend", "size", "scale", "batch", "threads", "n", "mean ms", "median ms",
                 "p90 ms", "p99 ms", "min ms", "max ms", "images/s", "MPix/s", "speed-up", "roofline",
                 "peak RSS MB", "max abs err"]


def result_row(r: dict) -> list:
    lat = r["latency_ms"]
    return [r["model"], r["sweep"], r["backend"], r["size"], r["scale"], r["batch"], r.get("threads"), lat["n"],
            lat["mean"], lat["median"], lat["p90"], lat["p99"], lat["min"], lat["max"], r["images_per_s"],
            r["mpix_per_s"], speedup(r.get("speedup_vs_baseline")), percent(r.get("roofline_fraction")),
            r.get("peak_rss_mb"), r.get("max_abs_err")]


def kernel_markdown(section: dict | None) -> list[str]:
    """The bench's CUDA kernel section (pipeline.bench.kernels); nothing when it did not run (see Not run)."""
    if not section:
        return []
    lines = ["", "## Kernels on CUDA (ours vs PyTorch, same run)", "",
             "Median of CUDA-event-timed calls after warm-up; ratio = PyTorch ms / ours ms (> 1: ours faster).", ""]
    lines += table(["op", "vs", "precision", "shape", "ours ms", "PyTorch ms", "ratio", "floor", "meets floor"],
                   [[r["op"], r["vs"], r["precision"], r["shape"], r["ours_ms"], r["torch_ms"], r["ratio"],
                     r["floor"], "" if r["meets_floor"] is None else r["meets_floor"]] for r in section["kernels"]])
    lines += ["", "Models end to end on torch CUDA (eager):", ""]
    lines += table(["model", "precision", "shape", "median ms"],
                   [[m["model"], m["precision"], m["shape"], m["median_ms"] if m["median_ms"] is not None
                     else m.get("error", "")] for m in section["models"]])
    return lines


def ray_markdown(result: dict) -> list[str]:
    """The Ray comparison (pipeline.bench.ray_bench) as a markdown table."""
    lines = [f"Folder of {result['images']} images, medians of {result['repeats']} run(s); local backend: "
             f"{result['backend']}.", "",
             "| run | wall s | processing s | vs local (wall) | vs local (processing) | Ray fixed s | "
             "Ray overhead ms/image |", "|---|---|---|---|---|---|---|",
             f"| local | {result['local']['wall_s']:.1f} | {result['local']['process_s']:.1f} | 1.00x | 1.00x "
             "| - | - |"]
    for k, r in result["ray"].items():
        proc_ratio = f"{r['process_ratio_vs_local']:.2f}x" if r["process_ratio_vs_local"] else "-"
        lines.append(f"| Ray, {k} actor(s) | {r['wall_s']:.1f} | {r['process_s']:.1f} | "
                     f"{r['wall_ratio_vs_local']:.2f}x | {proc_ratio} | {r['fixed_s']:.1f} | "
                     f"{r['overhead_ms_per_image']:.1f} |")
    return lines


def triton_markdown(result: dict) -> list[str]:
    """Served throughput (pipeline.bench.triton_bench) as a markdown table."""
    lines = [f"Folder of {result['images']} images, medians of {result['repeats']} run(s); backend: "
             f"{result['backend']} (local and in the server's sr model); gRPC, one connection per client.", "",
             "| run | wall s | processing s | images/s | vs local |", "|---|---|---|---|---|",
             f"| local folder run | {result['local']['wall_s']:.1f} | {result['local']['process_s']:.2f} | "
             f"{result['local']['images_per_s']:.1f} | 1.00x |"]
    for k, r in result["triton"].items():
        lines.append(f"| Triton, {k} client(s) | {r['wall_s']:.1f} | {r['process_s']:.2f} | {r['images_per_s']:.1f} | "
                     f"{r['vs_local']:.2f}x |")
    return lines


def startup_markdown(rows: list[dict] | None) -> list[str]:
    """Time to first image rows (pipeline.bench.startup); goal <= 1.0 s for 256² x3."""
    if not rows:
        return []
    return ["", "## Startup: time to first image", "",
            "`python -m pipeline sr one.png out.png --onnx F.onnx` in a fresh process (no PyTorch imported), "
            "median wall clock after one warm-up run; goal <= 1.0 s for 256² x3.", ""] + table(
        ["model", "size", "scale", "runs", "median s", "min s", "max s"],
        [[r["model"], r["size"], r["scale"], r["runs"], r["median_s"], r["min_s"], r["max_s"]] for r in rows])


# Published context for the video table (other tools, other hardware: not a race run here).
VIDEO_CONTEXT = [
    "- vs-mlrt wiki, RIFE page (https://github.com/AmusementClub/vs-mlrt/wiki/RIFE): RTX 3090, 1920x1088, vs-mlrt "
    "v12, fp16: RIFE v4.4 (frame interpolation, not super-resolution) 71.30 fps on trt, 53.62 fps on ort-cuda.",
    "- mpv-upscale-2x_animejanai wiki, Benchmarks (https://github.com/the-database/mpv-upscale-2x_animejanai/wiki/"
    "Benchmarks; a VapourSynth + TensorRT player setup, whose successor mpv-AnimeJaNai ships vs-mlrt's vsmlrt-cuda), "
    "RTX 4090, fp32: 2x_Compact 226.11 fps at 640x480 and 75.09 fps at 1280x720 input; 2x_SuperUltraCompact 583.82 "
    "and 191.16 fps.",
    "- vs-mlrt's own super-resolution tables (waifu2x, RealESRGANv2, Real-CUGAN pages) could not be retrieved here, "
    "so none are quoted.",
]


def video_markdown(rows: list[dict] | None) -> list[str]:
    if not rows:
        return []
    lines = ["", "## Video (`pipeline sr` on a clip)", "",
             "A short H.264 clip panning over a held-out photo, auto backend, default codec (H.264 CRF 16); fps = "
             "frames / (first decode to last encode); inference fps = one frame per call on the same backend.", ""]
    lines += table(["model", "backend", "input", "output", "scale", "frames", "fps", "inference fps"],
                   [[r["model"], r["backend"], f"{r['size']} {r['input'][0]}x{r['input'][1]}",
                     "x".join(map(str, r["output"])) if r.get("output") else "-", r["scale"], r.get("frames", "-"),
                     r["fps"] if r["fps"] is not None else r["skipped"], r.get("inference_fps", "-")] for r in rows])
    return lines + ["", "Published numbers as context (GPUs, not this machine):", "", *VIDEO_CONTEXT]


def _bench_method(doc: dict) -> list[str]:
    """The environment, how the bench measured, and the models' FLOPs."""
    m = doc["method"]
    lines = ["# Benchmark", "", "## Environment", ""] + env_lines(doc["environment"]) + [
        f"- Machine peak (measured): {fmt(doc['peak']['gflops'])} GFLOP/s fp32 ({doc['peak']['method']}; "
        f"highest of {len(doc['peak'].get('samples', [1]))} measurements: run start and after each model)",
        "", "## Method", "",
        f"- {m['warmup']} warm-up call(s), then up to {m['iters']} timed calls per configuration, stopped early "
        f"after {fmt(m['time_budget_s'])} s (at least {m['min_iters']}); each call is synchronised "
        f"({m['sync']}); wall clock: time.perf_counter.",
        *([f"- Big configurations: when the baseline call is estimated (main point's cost per output pixel) "
           f"above {fmt(m['config']['heavy_call_s'])} s, 1 warm-up + 1 timed call; above "
           f"{fmt(m['config']['max_call_s'])} s the configuration is skipped (listed under Not run)."]
          if m.get("config", {}).get("heavy_call_s") else []),
        "- Input: random float32 NCHW in [0, 1]; output size round(H x scale). Throughput = batch / median "
        "latency; MPix/s = output pixels x batch / median latency.",
        f"- Baseline: {m['baseline']}. Speed-up = baseline median / backend median, same run, same configuration.",
        "- Roofline: model FLOPs (per call) / measured machine peak = the shortest possible latency; "
        "roofline column = that time / median latency (1.0 = at peak).",
        f"- Peak RSS: highest resident set size of this process sampled every 5 ms during the timed calls"
        f"{'; device memory: torch.cuda.max_memory_allocated' if doc['environment'].get('gpu') else ''}.",
        "", "## Models", ""]
    lines += table(["model", "FLOPs per 256x256 input (x default scale)", "GFLOP", "MACs per output pixel"],
                   [[k, v["shape"], v["gflop_256"], v["macs_per_output_pixel"]] for k, v in doc["flops"].items()])
    return lines


def _bench_auto(doc: dict) -> list[str]:
    lines = []
    if doc.get("auto"):
        lines += ["", "## Auto backend vs baseline (performance floor)", ""]
        lines += table(["model", "auto picks", "size", "scale", "auto median ms", "baseline median ms", "speed-up",
                        "floor", "meets floor", "roofline"],
                       [[a["model"], a["backend"], a["size"], a["scale"], a["median_ms"], a["baseline_ms"],
                         speedup(a["speedup"]), speedup(a["floor"]), a["meets_floor"], percent(a["roofline_fraction"])]
                        for a in doc["auto"]])
        lines += [""] + [f"- {a['model']}: {a['reason']}" for a in doc["auto"]]
    return lines


def _bench_folders(doc: dict) -> list[str]:
    """Folder runs against pure inference (host and GPU), and the sr stage's own cost."""
    lines = []
    if doc.get("folder"):
        lines += ["", "## Whole folder run (`pipeline sr`) vs pure inference", "",
                  "Same loaded backend and images; medians of alternating runs. Share = inference time / folder "
                  "time (goal >= 85 %).", ""]
        lines += table(["model", "backend", "images", "size", "folder ms/img", "inference ms/img", "share %",
                        "best share %"],
                       [[f["model"], f["backend"], f["images"], f["size"], f["folder_ms_per_image"],
                         f["inference_ms_per_image"], 100 * f["ratio"], 100 * f["ratio_best"]] for f in doc["folder"]])
    if doc.get("gpu_folder"):
        lines += ["", "## GPU folder run vs pure inference, per device backend", "",
                  "As above, on the CUDA device (goal: share >= 85 %).", ""]
        lines += table(["model", "backend", "images", "size", "folder ms/img", "inference ms/img", "share %",
                        "best share %"],
                       [[f["model"], f["backend_description"], f["images"], f["size"], f["folder_ms_per_image"],
                         f["inference_ms_per_image"], 100 * f["ratio"], 100 * f["ratio_best"]]
                        for f in doc["gpu_folder"]])
    if doc.get("stage_cost"):
        c = doc["stage_cost"]
        lines += ["", "## The sr stage's own cost", "",
                  f"A folder run of {c['images']} x {c['size']}^2 images through `--model {c['model']}` "
                  f"(nearest-neighbour x3: inference is next to free) on {c['backend']}, minus pure inference of the "
                  f"same images; medians of {c['repeats']} alternating runs.", ""]
        lines += table(["stage CPU ms/MPix", "stage wall ms/MPix", "folder CPU ms/MPix", "folder wall ms/MPix",
                        "cores busy", "usable cores", "decode/encode threads"],
                       [[c["stage_cpu_ms_per_mpix"], c["stage_wall_ms_per_mpix"], c["folder_cpu_ms_per_mpix"],
                         c["folder_wall_ms_per_mpix"], c["cores_busy"], c["usable_cores"], c["workers"]]])
    return lines


def bench_markdown(doc: dict) -> str:
    lines = _bench_method(doc) + _bench_auto(doc) + _bench_folders(doc)
    lines += video_markdown(doc.get("video"))
    lines += startup_markdown(doc.get("startup"))
    if doc.get("ray"):
        lines += ["", "## Folder run through Ray vs locally", ""] + ray_markdown(doc["ray"])
    if doc.get("triton"):
        lines += ["", "## Folder run through a Triton server vs locally", ""] + triton_markdown(doc["triton"])
    lines += kernel_markdown(doc.get("kernels"))
    lines += ["", "## Results", ""]
    lines += table(RESULT_HEADER, [result_row(r) for r in doc["results"]])
    if doc.get("skipped"):
        lines += ["", "## Not run", ""] + [f"- {s}" for s in doc["skipped"]]
    if doc.get("plots"):
        lines += ["", "## Plots", ""] + [f"![{k}]({Path(v).name})" for k, v in doc["plots"].items()]
    return "\n".join(lines) + "\n"


def plot_bench(doc: dict, out_dir: Path) -> dict[str, str]:
    plt = _plt()
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
            ax.set_title(model)
            ax.legend(fontsize=7)
        p = out_dir / "latency_vs_size.png"
        _save_fig(fig, p)
        plt.close(fig)
        plots["latency_vs_size"] = str(p)
    main = [r for r in results if r["sweep"] == "main" and r.get("speedup_vs_baseline")]
    if main:
        fig, ax = plt.subplots(figsize=(max(6, 0.7 * len(main) + 2), 4))
        ax.bar(range(len(main)), [r["speedup_vs_baseline"] for r in main])
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.set_xticks(range(len(main)), [f"{r['model']}\n{r['backend']}" for r in main], rotation=60, ha="right",
                      fontsize=7)
        ax.set_ylabel("speed-up vs PyTorch eager loop")
        sides = sorted({r["size"] for r in main})
        ax.set_title(f"Speed-up vs baseline ({', '.join(f'{n}x{n}' for n in sides)} input, default scale)")
        p = out_dir / "speedup.png"
        _save_fig(fig, p)
        plt.close(fig)
        plots["speedup"] = str(p)
    err = [r for r in results if r["sweep"] == "main" and r.get("max_abs_err") is not None]
    if err:
        fig, ax = plt.subplots(figsize=(max(6, 0.7 * len(err) + 2), 4))
        ax.bar(range(len(err)), [max(r["max_abs_err"], 1e-12) for r in err])
        ax.set_yscale("log")
        ax.set_xticks(range(len(err)), [f"{r['model']}\n{r['backend']}" for r in err], rotation=60, ha="right",
                      fontsize=7)
        ax.set_ylabel("max abs error vs PyTorch FP32")
        ax.set_title("Error by backend (same inputs as the timing)")
        p = out_dir / "error.png"
        _save_fig(fig, p)
        plt.close(fig)
        plots["error"] = str(p)
    return plots


def write_bench(doc: dict, out_dir: Path) -> dict[str, Path]:
    out_dir = Path(out_dir)
    doc["plots"] = plot_bench(doc, out_dir)
    paths = {"json": out_dir / "report.json", "md": out_dir / "report.md"}
    atomic_write(paths["json"], json.dumps(_sanitize(doc), indent=2, default=_json_default) + "\n")
    atomic_write(paths["md"], bench_markdown(doc))
    paths["html"] = write_html(paths["md"])
    return paths
