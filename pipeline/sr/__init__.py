"""The folder super-resolution stage.

    upscale(input, output, ...) -> Summary    the stage's Python API (pipeline.sr.api)
    run(RunOptions, executor) -> Summary      one run: plan -> triage -> executor -> Summary -> report (the CLI's)
    ImageWorker(backend, model, scale, ...)   the per-image unit: .process(job) -> Record

Directly here, the run's entry and its plan:
    api        upscale() and run_local()                 flow       the plan, the executors' protocol, the report
    local      the local executor (threads, videos)      options    RunOptions, the typed run options
    settings   option checks, model resolution           preflight  writable outputs, overwrite count
    videofmt   video containers, codecs and their options (pure data: the plan, run/ and video/ read it)

Two rooms (import-linter layers in pyproject.toml: video -> runner, never back):
    runner/    the run's parts, one image at a time: jobs (INPUT -> OUTPUT), worker, scheduler, records, console,
               finite (the fp32 re-run), reference (--reference scores)
    video/     one clip: av_io (PyAV reader and writer), yuv (YUV <-> RGB, rounded to nearest), clip (a clip through
               the worker), cpu_split (a clip's CPU time per stage), segments (cut at keyframes, run, resumed),
               segment_files, join (the join by stream copy)

Files <-> pixels (decode, encode, the header limits, tiling, bicubic) are pipeline.images, a layer below sr that
preview and analysis read images with too; the image names below are re-exported from it. Code outside this package
imports only the names below (an import-linter contract in pyproject.toml).
"""
from pipeline.images.bicubic import bicubic
from pipeline.images.header import HeaderError, check_header, over_limit
from pipeline.images.imageio import Image, ImageError, convert_for_format, normalize_format, read_image
from pipeline.images.imageio import decode as decode_image
from pipeline.images.imageio import encode as encode_image
from pipeline.images.imageio import read_bytes as read_image_bytes
from pipeline.images.tiling import TILE_MEMORY, TILE_MEMORY_ENV
from pipeline.sr.api import run_local, upscale
from pipeline.sr.flow import ExecutorLost, ModelChoice, Plan, Started, applies_only, resolve_model, run
from pipeline.sr.options import OPTION_FIELDS, RunOptions, option_flag
from pipeline.sr.runner.jobs import Job, discover, output_inside_input
from pipeline.sr.runner.records import Record, Summary
from pipeline.sr.runner.worker import FOLDER_STREAMS, ImageWorker, Planned, in_flight, infer_reason, write_output
from pipeline.sr.settings import usable_cores
from pipeline.sr.videofmt import AUDIO_MODES, CRF, DEFAULT_PRESET, ENCODERS, PRESETS, codec_for, encoder_options

__all__ = [
    # a run: the API, the run flow and what executors implement and return
    "ExecutorLost", "ModelChoice", "Plan", "Record", "RunOptions", "Started", "Summary", "discover",
    "output_inside_input", "resolve_model", "run", "run_local", "upscale", "write_output",
    # which options an executor takes (each declares them) and how a refusal names them
    "OPTION_FIELDS", "applies_only", "option_flag",
    # the per-image steps (the Triton model's sr service runs them on requests); a folder's CPU streams
    "FOLDER_STREAMS", "ImageWorker", "in_flight", "Job", "Planned", "infer_reason",
    # images in and out, held to the same limits everywhere
    "HeaderError", "Image", "ImageError", "bicubic", "check_header", "convert_for_format", "decode_image",
    "encode_image", "normalize_format", "over_limit", "read_image", "read_image_bytes",
    # what the CLI offers for videos; the cores this process may use
    "AUDIO_MODES", "CRF", "DEFAULT_PRESET", "ENCODERS", "PRESETS", "codec_for", "encoder_options", "usable_cores",
    # the tile memory budget --tile's help names
    "TILE_MEMORY", "TILE_MEMORY_ENV",
]

# Videos on other executors (a clip split into segments on Ray actors; frames served by Triton): these load PyAV,
# so they are imported on first use, for runs with videos only.
_VIDEO_NAMES = {"VideoRunner": "video.clip", "plan_clips": "video.clip", "encoder_alone": "video.clip",
                "plan_work": "video.segments", "run_segment": "video.segments", "segment_identity": "video.segments",
                "resume_lines": "video.segments", "lock_outputs": "video.segments", "probe_video": "video.av_io",
                "read_video": "video.av_io", "VideoFrame": "video.av_io", "VideoWindow": "video.av_io"}
# names exported under another name than the module's own (a bare `read` or `Frame` says too little here)
_VIDEO_ALIASES = {"probe_video": "probe", "read_video": "read", "VideoFrame": "Frame", "VideoWindow": "Window"}


def __getattr__(name: str):
    if name in _VIDEO_NAMES:
        import importlib

        module = importlib.import_module(f"pipeline.sr.{_VIDEO_NAMES[name]}")
        return getattr(module, _VIDEO_ALIASES.get(name, name))
    raise AttributeError(f"module 'pipeline.sr' has no attribute '{name}'")
