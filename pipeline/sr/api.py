"""`upscale(INPUT, OUTPUT, ...) -> Summary`: the sr stage's Python API (`python -m pipeline sr` runs the same
pipeline.sr.flow with its own options). Argument problems, unwritable outputs included, raise PipelineError before
any work; one bad image never stops the run (it is a failed record)."""
from __future__ import annotations

from pathlib import Path

from pipeline.analysis import sheet
from pipeline.htmlreport import Heading, Sheet, para, write_html
from pipeline.images.bicubic import bicubic
from pipeline.sr.flow import run
from pipeline.sr.local import LocalExecutor
from pipeline.sr.options import RunOptions
from pipeline.sr.runner.console import Console
from pipeline.sr.runner.records import Summary


def reference_sheet(result: Summary, console: Console) -> None:
    """One scored image's crops side by side, with the outputs, and the same as before/after sliders in a page
    (reference-sheet.html); only runs with --reference."""
    if not result.reference:
        return
    png = sheet.for_sr_run(result, Path(result.output), sheet.from_float(bicubic))
    if png is None:
        return
    ref = result.reference
    title = f"sr --reference: {result.model} x{result.scale:g}"
    page = [Heading(title, 1),
            para(f"Mean over {ref['images']} scored image(s): PSNR-Y {ref['psnr']:.2f} dB (bicubic "
                 f"{ref['psnr_bicubic']:.2f} dB), SSIM-Y {ref['ssim']:.4f} (bicubic {ref['ssim_bicubic']:.4f}); crops "
                 "of the first scored image below."),
            Heading("Pictures: before / after"),
            Sheet(f"{result.model} x{result.scale:g} against the ground truth", png)]
    console.info(f"sheet: {png}; in a browser: {write_html(png.with_suffix('.md'), page)}")


def run_local(opts: RunOptions) -> Summary:
    """One run in this process (the CLI's sr without --ray/--triton)."""
    return run(opts, LocalExecutor(opts), after=reference_sheet)


def upscale(input: str | Path, output: str | Path, **options) -> Summary:
    """Super-resolves an image, a folder tree or a video, and returns the run's Summary.

    OUTPUT mirrors INPUT's tree. The keywords are the fields of pipeline.sr.options.RunOptions.

    Args:
        input: an image, a video, or a folder of them.
        output: the output file or folder (created; existing outputs are replaced, or kept with skip_existing).
        **options: RunOptions fields, among them:
            model: a registered name; by default the one `backend` (if loaded) or `onnx` was made for, else srcnn.
            backend: a name ('auto' picks the fastest available and says why), or an already-loaded Backend
                (then onnx, engine, weights, threads and precision do not apply: it is used as it is).
            precision: a precision, or 'auto' (the fastest within its quality budget).
            codec, crf, preset: how videos are encoded (pipeline.sr.videofmt; default: H.264 at a high-quality
                CRF and a fast preset, lossless FFV1 for .mkv, VP9 for .webm; preset: h264 and h265 only).
            audio: 'copy' (a stream the output container cannot hold is an error before any work) or 'drop'.
            segment_seconds: a clip at least twice this long (default 60 s) is cut at keyframes into segments
                kept beside the output until the join, so skip_existing=True resumes a killed run from its
                finished, verified segments (pipeline.sr.video.segments).
            tile: the LR tile side; 0 never tiles; None sizes tiles from free memory.
            batch: images or tiles of one size per call, or 'auto' (the most that fit on a device, capped; 1 on
                the host).
            workers: decode/encode threads; None: every usable core with a device backend, else 2.
            progress: False hides the bar and the per-image lines (the header and failures still go out).
            verbose: adds the backend's full description and reasons.
            log: where lines go (default: stderr).

    Returns:
        The Summary: per-image records (failures included), totals and timings.

    Raises:
        PipelineError: one line, for bad options or inputs, before any work.
        KeyboardInterrupt: raised again after the images done are kept and --summary is written for them.
    """
    return run_local(RunOptions(input, output, **options))
