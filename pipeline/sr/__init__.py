"""The folder super-resolution stage.

    upscale(input, output, ...) -> Summary    the stage's Python API (pipeline.sr.api)
    run(RunOptions, executor) -> Summary      one run: plan -> triage -> executor -> Summary -> report (the CLI's)
    ImageWorker(backend, model, scale, ...)   the per-image unit: .process(job) -> Record

    run        plan, executors' protocol, the report   local      the local executor (threads, videos)
    options    RunOptions, the typed run options       settings   option checks, model resolution
    scheduler  decode pool, batching, bounded write queue    worker     decode/plan/infer/encode one image
    jobs       INPUT -> OUTPUT file mapping                  records    Record, RecordLog, Summary (the JSON)
    tiling     tiles that reproduce whole-image inference    imageio    files <-> pixels
    png        PNG writing (our C++ encoder: Average/Up filters) and reading
    bicubic    plain bicubic (alpha, baseline)               reference  --reference scores
    console    what is printed (--quiet hides, --verbose adds)   preflight  writable outputs, overwrite count
    video      one clip through the worker (threads)         segments   a clip cut at keyframes, run, resumed, joined
    segment_files  finished segments and their records (verified before reuse)   segment_join  the join by stream copy

Code outside this package imports only the names below (an import-linter contract in pyproject.toml).
"""
from pipeline.sr.api import run_local, upscale
from pipeline.sr.bicubic import bicubic
from pipeline.sr.flow import ExecutorLost, ModelChoice, Plan, Started, applies_only, resolve_model, run
from pipeline.sr.image_header import HeaderError, check_header, over_limit
from pipeline.sr.imageio import Image, ImageError, convert_for_format, normalize_format, read_image
from pipeline.sr.imageio import decode as decode_image
from pipeline.sr.imageio import encode as encode_image
from pipeline.sr.jobs import Job, discover
from pipeline.sr.options import OPTION_FIELDS, RunOptions, option_flag
from pipeline.sr.records import Record, Summary
from pipeline.sr.settings import usable_cores
from pipeline.sr.videofmt import AUDIO_MODES, CRF, DEFAULT_PRESET, ENCODERS, PRESETS, codec_for, encoder_options
from pipeline.sr.worker import FOLDER_STREAMS, ImageWorker, Planned, in_flight, infer_reason, write_output

__all__ = [
    # a run: the API, the run flow and what executors implement and return
    "ExecutorLost", "ModelChoice", "Plan", "Record", "RunOptions", "Started", "Summary", "discover",
    "resolve_model", "run", "run_local", "upscale", "write_output",
    # which options an executor takes (each declares them) and how a refusal names them
    "OPTION_FIELDS", "applies_only", "option_flag",
    # the per-image steps (the Triton model's sr service runs them on requests); a folder's CPU streams
    "FOLDER_STREAMS", "ImageWorker", "in_flight", "Job", "Planned", "infer_reason",
    # images in and out, held to the same limits everywhere
    "HeaderError", "Image", "ImageError", "bicubic", "check_header", "convert_for_format", "decode_image",
    "encode_image", "normalize_format", "over_limit", "read_image",
    # what the CLI offers for videos; the cores this process may use
    "AUDIO_MODES", "CRF", "DEFAULT_PRESET", "ENCODERS", "PRESETS", "codec_for", "encoder_options", "usable_cores",
]

# Videos on other executors (a clip split into segments on Ray actors; frames served by Triton): these load PyAV,
# so they are imported on first use, for runs with videos only.
_VIDEO_NAMES = {"VideoRunner": "video", "plan_clips": "video", "encoder_alone": "video", "plan_work": "segments",
                "run_segment": "segments",
                "segment_identity": "segments", "resume_lines": "segments",
                "lock_outputs": "segments", "probe_video": "video_io", "read_video": "video_io",
                "VideoFrame": "video_io", "VideoWindow": "video_io"}
# names exported under another name than the module's own (a bare `read` or `Frame` says too little here)
_VIDEO_ALIASES = {"probe_video": "probe", "read_video": "read", "VideoFrame": "Frame", "VideoWindow": "Window"}


def __getattr__(name: str):
    if name in _VIDEO_NAMES:
        import importlib

        module = importlib.import_module(f"pipeline.sr.{_VIDEO_NAMES[name]}")
        return getattr(module, _VIDEO_ALIASES.get(name, name))
    raise AttributeError(f"module 'pipeline.sr' has no attribute '{name}'")
