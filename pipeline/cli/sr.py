"""`python -m pipeline sr INPUT OUTPUT`: super-resolve images and videos (a file or a folder tree), in this
process, on a Ray cluster (--ray) or on a Triton server (--triton). The arguments become one RunOptions and one
executor here; which options an executor takes, each executor declares (pipeline.sr.flow's Executor protocol)."""
from __future__ import annotations

from pipeline.cli.options import BackendArgs, add_model_args, scale_help
from pipeline.errors import PipelineError
from pipeline.sr import (
    AUDIO_MODES,
    CRF,
    DEFAULT_PRESET,
    ENCODERS,
    PRESETS,
    TILE_MEMORY,
    TILE_MEMORY_ENV,
    RunOptions,
    applies_only,
    option_flag,
    run_local,
)
from pipeline.sr import run as run_sr

# the backend fields: the run's plan checks the files (as from Python), so parsing only names them
BACKEND = BackendArgs("one", "auto", files=("onnx", "engine", "weights"), threads=True, check_files=False)


def _batch(value: str) -> int | str:
    """'auto' or an integer; the range is checked with the other options (pipeline.sr.settings)."""
    if value == "auto":
        return value
    try:
        return int(value)
    except ValueError:
        raise PipelineError(f"--batch must be an integer >= 1 or 'auto', got {value!r}") from None


def add_arguments(p) -> None:
    p.usage_hint = usage_hint
    p.add_argument("input", help="image or video file, or a folder of them (searched recursively)")
    p.add_argument("output", help="output folder (mirrors INPUT's tree) or, for a single image or video, a file name")
    add_model_args(p)  # None unless given: sr.settings.resolve_model takes the --onnx/--engine file's
    p.add_argument("--scale", type=float, default=None, help=scale_help("upscale factor, integer or not"))
    BACKEND.add_parser_arguments(p)
    p.add_argument("--format", dest="fmt", help="output format: png, jpg, bmp, tiff, webp (default: as the input)")
    p.add_argument("--jpeg-quality", type=int, default=95, help="JPEG/WebP quality, 1-100 (default: 95)")
    p.add_argument("--strip-metadata", action="store_true",
                   help="write images without the input's colour profile, EXIF and XMP (kept by default in png, "
                        "jpg and webp outputs)")
    p.add_argument("--codec", choices=sorted(ENCODERS), default=None,
                   help="video codec (default: h264, lossless ffv1 for .mkv, vp9 for .webm)")
    p.add_argument("--crf", type=int, default=None, help="video quality, lower is better (default: "
                   + ", ".join(f"{c} {v[0]}" for c, v in CRF.items()) + "; ffv1 is lossless)")
    p.add_argument("--preset", default=None,
                   help="h264/h265 encoder speed: " + ", ".join(PRESETS) + " (faster: less CPU, a larger file "
                   "or lower quality at the same CRF; "
                   "default: " + ", ".join(f"{c} {v}" for c, v in DEFAULT_PRESET.items()) + ")")
    p.add_argument("--audio", choices=AUDIO_MODES, default="copy",
                   help="a video's audio: copy it as it is (default; a codec the output container cannot hold is "
                        "an error before any work) or drop it")
    p.add_argument("--tile", type=int, default=None,
                   help="tile side in input pixels; 0 = never tile (default: the largest tiles whose pixels in "
                        f"flight fit a {TILE_MEMORY / 2**30:g} GiB budget ({TILE_MEMORY_ENV}) and half the "
                        "available memory at the model's cost, so an image that fits is not tiled; on a GPU, the "
                        "device's free memory)")
    p.add_argument("--tile-overlap", type=int, default=None,
                   help="context each tile reads past its region, input pixels (default: the model's "
                        "receptive field, which makes tiled output equal whole-image output)")
    p.add_argument("--batch", type=_batch, default=1, help="images (or tiles) of equal size per inference call, or "
                                                           "'auto': the most that fit on a GPU, capped (1 on the CPU)")
    p.add_argument("--workers", type=int, default=None, help="threads decoding and encoding images (default: every "
                                                             "core this process may use with a GPU backend, else 2)")
    p.add_argument("--skip-existing", action="store_true", help="leave outputs that already exist (resume)")
    p.add_argument("--reference", metavar="HR_DIR", help="ground-truth HR images with the same relative names: "
                                                        "report PSNR/SSIM (Y, border cropped) vs bicubic")
    p.add_argument("--summary", metavar="FILE", help="write a JSON summary (per-image times, sizes, status)")
    p.add_argument("--quiet", action="store_true", help="no progress bar or per-image lines; the first line (model, "
                                                       "scale, backend and why) and failures still print")
    p.add_argument("--verbose", action="store_true", help="also print the backend's full description, the whole "
                                                         "reason it was chosen, and the tile and batch settings")
    p.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                   help="run on a Ray cluster: no ADDRESS starts one on this machine (127.0.0.1 only); 'auto' or "
                        "ray://HOST:PORT joins one (OUTPUT must be a path every node sees)")
    p.add_argument("--ray-actors", type=int, metavar="N", help="with --ray: actors upscaling in parallel, one GPU "
                   "each on GPU clusters, one CPU otherwise (default: one per GPU, else per CPU)")
    p.add_argument("--segment-seconds", type=float, metavar="S", help="a clip is cut at keyframes into segments "
                   "about S seconds long, each kept beside the output until the join, so --skip-existing resumes a "
                   "killed run from its finished segments (default: 60; a clip under two segments runs whole; with "
                   "--ray also several per actor)")
    p.add_argument("--triton", metavar="URL", help="upscale on a running Triton server's sr model (`python -m "
                   "pipeline serve`): http://HOST:PORT or grpc://HOST:PORT; same outputs as a local run")
    p.add_argument("--triton-model", metavar="NAME", help="with --triton: the served model (default: sr)")
    p.add_argument("--concurrency", type=int, metavar="N", help="with --triton: requests in flight (default: 2)")


def usage_hint(message: str, argv: list[str]) -> str:
    """A missing INPUT/OUTPUT after a bare `--ray` (its optional ADDRESS took one of them): say so."""
    if "required" in message and "--ray" in argv:
        return ("; --ray takes an optional ADDRESS, so the path after it was read as one: put --ray after OUTPUT "
                "or write --ray=local")
    return ""


def _executor_classes() -> tuple:
    # optional and slow to import: only runs with --ray / --triton load them
    from pipeline.cluster.runner import RayExecutor  # Ray
    from pipeline.serve.client import TritonExecutor  # Triton's client (tritonclient)

    return RayExecutor, TritonExecutor


def _chosen(args):
    """The executor class the arguments select (None: local); an executor's own options without it are refused,
    as each declares them (`flags`: the selecting one first)."""
    classes = _executor_classes()
    chosen = [c for c in classes if getattr(args, c.flags[0]) is not None]
    if len(chosen) > 1:
        raise PipelineError(f"{' and '.join(option_flag(c.flags[0]) for c in chosen)} both say where the run "
                            "executes: give one of them")
    for c in classes:
        given = [option_flag(d) for d in c.flags[1:] if getattr(args, d) is not None]
        if given and c not in chosen:
            raise PipelineError(applies_only(given, f"{option_flag(c.flags[0])} runs"))
    return chosen[0] if chosen else None


def options_from_args(args) -> RunOptions:
    r = BACKEND.parse(args)
    return RunOptions(args.input, args.output, model=args.model, scale=args.scale, backend=r.backend,
                      precision=r.precision, onnx=r.onnx, engine=r.engine, weights=r.weights, threads=r.threads,
                      fmt=args.fmt, jpeg_quality=args.jpeg_quality, strip_metadata=args.strip_metadata,
                      tile=args.tile, tile_overlap=args.tile_overlap, batch=args.batch, workers=args.workers,
                      skip_existing=args.skip_existing, reference=args.reference, summary=args.summary,
                      progress=not args.quiet, verbose=args.verbose, codec=args.codec, crf=args.crf, preset=args.preset,
                      audio=args.audio,
                      segment_seconds=args.segment_seconds)


def run(args) -> int:
    """The options the chosen executor does not take are refused by the run's plan, as from Python."""
    chosen = _chosen(args)
    opts = options_from_args(args)
    if chosen is None:
        return run_local(opts).exit_code
    return run_sr(opts, chosen(opts, *(getattr(args, dest) for dest in chosen.flags))).exit_code
