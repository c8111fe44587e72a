"""`python -m pipeline demo --output outputs`: the main job on embedded defaults, in a few minutes.

1. Held-out skimage photos (never trained on) -> HR PNGs, and their bicubic x3 downscales as LR inputs.
2. The sr stage (pipeline.sr.upscale) super-resolves the LR folder with the shipped weights (backend
   auto: the fastest available, CPU ones when there is no GPU) and scores it against the HR images
   (PSNR/SSIM vs bicubic).
3. A short compare (pipeline.analysis.compare.compare_model: every available backend/precision vs
   PyTorch FP32) and a quick bench (pipeline.bench.suite.run_bench).
4. outputs/demo/report.md and report.html tie it together; the last lines printed say where everything is.
"""
from __future__ import annotations

import math
from pathlib import Path

import cv2

from models.spec import DEFAULT_MODEL
from pipeline.data.degradation import make_pair
from pipeline.data.sample_images import HELD_OUT, load_rgb
from pipeline.errors import PipelineError
from pipeline.htmlreport import Code, Heading, Link, para, said, to_markdown
from pipeline.report import db, env_items, fmt, roofline_share, speedup, table

DEMO_MODEL = DEFAULT_MODEL
DEMO_SCALE = 3.0
# Shown beside bicubic and SRCNN: a model people deploy (Real-ESRGAN's cheapest, ~1.3 MFLOP per input pixel; at x3 it
# runs its own x4 and downscales). GAN-trained: it looks sharper than it scores in PSNR.
GAN_MODEL = "realesr-animevideov3"
GAN_NOTE = ("Real-ESRGAN is GAN-trained to look real, not to match the original pixel for pixel: PSNR/SSIM below "
            "bicubic's are expected for it and do not say it looks worse (compare the pictures). At x3 it runs its "
            "own x4 and downscales.")
# LR inputs smaller than this make the PSNR/SSIM border crop and window meaningless (or empty).
MIN_LR_SIDE = 8


def check_max_side(max_side: int, scale: float) -> None:
    least = math.ceil(MIN_LR_SIDE * scale)
    if max_side < least:
        raise PipelineError(f"--max-side must be at least {least} (inputs of {MIN_LR_SIDE} px or more at "
                            f"x{scale:g}), got {max_side}")


def _write_inputs(root: Path, names, max_side: int, scale: float) -> tuple[Path, Path, list[str]]:
    check_max_side(max_side, scale)
    names = list(names or HELD_OUT)
    unknown = [n for n in names if n not in HELD_OUT]
    if unknown:
        raise PipelineError(f"not held-out images: {', '.join(unknown)} (held-out: {', '.join(HELD_OUT)})")

    hr_dir, lr_dir = root / "hr", root / "input"
    hr_dir.mkdir(parents=True, exist_ok=True)
    lr_dir.mkdir(parents=True, exist_ok=True)
    for name in names:
        img = load_rgb(name)
        h, w = img.shape[:2]
        sh, sw = min(h, max_side), min(w, max_side)
        y0, x0 = (h - sh) // 2, (w - sw) // 2
        lr, hr = make_pair(img[y0:y0 + sh, x0:x0 + sw], scale)
        for folder, pixels in ((hr_dir, hr), (lr_dir, lr)):
            tmp = folder / f".{name}.tmp.png"
            if not cv2.imwrite(str(tmp), pixels[:, :, ::-1]):
                raise PipelineError(f"cannot write {tmp}")
            tmp.replace(folder / f"{name}.png")
    return lr_dir, hr_dir, names


def _sr_blocks(sr: dict) -> list:
    rows = [[im["input"], "x".join(map(str, im.get("in_size", []))), "x".join(map(str, im.get("out_size", []))),
             db(im.get("psnr")), db(im.get("psnr_bicubic")), im.get("ssim"), im.get("ssim_bicubic"), im.get("time_s"),
             im.get("output")] for im in sr["images"]]
    out = [Heading("Super-resolution (pipeline sr)"),
           table(["image", "input WxH", "output WxH", "PSNR-Y dB", "bicubic PSNR-Y", "SSIM-Y", "bicubic SSIM-Y",
                  "time s", "file"], rows)]
    ref = sr.get("reference", {})
    if ref:
        out.append(para(f"Mean PSNR-Y {db(ref['psnr'])} dB vs bicubic {db(ref['psnr_bicubic'])} dB "
                        f"(+{db(ref['psnr'] - ref['psnr_bicubic'])} dB)."))
    return out


def _gan_blocks(sr: dict, gan: dict) -> list:
    """The held-out images scored for bicubic, the demo's model and Real-ESRGAN, side by side."""
    ours = {im["input"]: im for im in sr["images"]}
    rows = [[im["input"], db(im.get("psnr_bicubic")), db(ours.get(im["input"], {}).get("psnr")), db(im.get("psnr")),
             im.get("ssim_bicubic"), ours.get(im["input"], {}).get("ssim"), im.get("ssim"), im.get("time_s")]
            for im in gan["images"]]
    return [Heading(f"Beside a Real-ESRGAN model ({gan['model']})"),
            para(f"The same inputs at x{fmt(gan['scale'])} through ", Code(gan["model"]), f" on {gan['backend']}."),
            table(["image", "bicubic PSNR-Y", f"{sr['model']} PSNR-Y", f"{gan['model']} PSNR-Y", "bicubic SSIM-Y",
                   f"{sr['model']} SSIM-Y", f"{gan['model']} SSIM-Y", f"{gan['model']} time s"], rows),
            para(GAN_NOTE)]


def _whole(step: str):
    """Where the step's own report is, as links beside this one (its folder is the step's name)."""
    return para("The whole report: ", Link(f"{step}/report.md", f"{step}/report.md"), " (in a browser: ",
                Link(f"{step}/report.html", f"{step}/report.html"), ").")


def demo_blocks(sr: dict, names: list[str], cmp_doc, bench_doc, seconds: float, environment: dict | None = None,
                sheets=(), gan: dict | None = None) -> list:
    """The demo's report as blocks (report.md and report.html); `environment` (pipeline.report.environment) puts the
    machine facts at the top; `sheets` (pipeline.htmlreport.Sheet) end it as before/after sliders."""
    out = [Heading("Demo", 1), *([env_items(environment)] if environment else []),
           para("Model ", Code(sr["model"]), f" x{fmt(sr['scale'])} on {len(names)} held-out skimage images "
                f"({', '.join(names)}), backend {sr['backend']} (", *said(sr.get("backend_choice", "")),
                f"). Total {seconds:.0f} s."), *_sr_blocks(sr), *(_gan_blocks(sr, gan) if gan else [])]
    if cmp_doc:
        out += [Heading("Backends vs PyTorch FP32 (compare/report.md)"), _whole("compare"),
                table(["model", "backend", "precision", "status", "max abs", "PSNR dB"],
                      [[m["model"], r["backend"], r["precision"], r["status"].upper(), r["max_abs"], db(r["psnr_db"])]
                       for m in cmp_doc["models"] for r in m["rows"] if r["status"] in ("pass", "fail")])]
    if bench_doc:
        main = [r for r in bench_doc["results"] if r["sweep"] == "main"]
        out += [Heading("Quick bench (bench/report.md)"), _whole("bench"),
                table(["model", "backend", "size", "median ms", "speed-up vs eager loop", "roofline"],
                      [[r["model"], r["backend"], r["size"], r["latency_ms"]["median"],
                        speedup(r["speedup_vs_baseline"]), roofline_share(r["roofline_fraction"])] for r in main]),
                para("Quick settings (small inputs, few iterations); ", Code("make bench"), " runs the full sweeps.")]
    if sheets:
        out += [Heading("Pictures: before / after"), *sheets]
    return out


def demo_markdown(sr: dict, names: list[str], cmp_doc, bench_doc, seconds: float, environment: dict | None = None,
                  ) -> str:
    """The demo's report.md (demo_blocks)."""
    return to_markdown(demo_blocks(sr, names, cmp_doc, bench_doc, seconds, environment))
