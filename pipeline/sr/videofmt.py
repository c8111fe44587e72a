"""Video facts the sr stage decides once: which extensions are videos, which codecs each container takes, each
codec's encoder, default and CRF range. Pure data (no PyAV import), so listing jobs costs nothing for image runs."""
from __future__ import annotations

from pathlib import Path

from pipeline.errors import PipelineError

# Extension -> container key; the output keeps the input's container unless OUTPUT names another.
VIDEO_FORMATS = {".mp4": "mp4", ".m4v": "mp4", ".mov": "mov", ".mkv": "mkv", ".webm": "webm", ".avi": "avi"}
MUXERS = {"mp4": "mp4", "mov": "mov", "mkv": "matroska", "webm": "webm", "avi": "avi"}
# Extension's container key -> the one FFmpeg demuxer that reads it (its content is never sniffed for another) and
# the words an error uses for it.
DEMUXERS = {"mp4": "mov", "mov": "mov", "mkv": "matroska", "webm": "matroska", "avi": "avi"}
DEMUXER_NAMES = {"mov": "MP4/MOV", "matroska": "Matroska/WebM", "avi": "AVI"}
# --codec -> FFmpeg encoder (all in PyAV's wheels).
ENCODERS = {"h264": "libx264", "h265": "libx265", "ffv1": "ffv1", "vp9": "libvpx-vp9", "av1": "libsvtav1"}
CONTAINER_CODECS = {
    "mp4": ("h264", "h265", "vp9", "av1"),
    "mov": ("h264", "h265"),
    "mkv": ("h264", "h265", "ffv1", "vp9", "av1"),
    "webm": ("vp9", "av1"),
    "avi": ("h264", "ffv1"),
}
# Lossless FFV1 for .mkv (the archival container), VP9 for WebM (which takes no H.264), H.264 elsewhere.
DEFAULT_CODEC = {"mkv": "ffv1", "webm": "vp9"}
FALLBACK_CODEC = "h264"
# Default CRF (visually lossless for upscaled footage) and the encoder's accepted range; FFV1 is lossless, no CRF.
CRF = {"h264": (16, 0, 51), "h265": (18, 0, 51), "vp9": (20, 0, 63), "av1": (22, 1, 63)}
# --audio: copy a clip's audio as it is, or leave it out (when the output container cannot hold it).
AUDIO_MODES = ("copy", "drop")
# Each encoder's largest (width, height) and smallest side, measured with the encoders in PyAV's wheels (FFmpeg
# does not say them: past them x264 fails with "Generic error", SVT-AV1 and x265 with "Invalid argument").
ENCODER_SIZES = {"h264": ((16384, 16384), 2), "h265": ((None, None), 16), "vp9": ((65536, 65536), 1),
                 "av1": ((16384, 8704), 4), "ffv1": ((None, None), 1)}
ENCODER_OPTIONS = {
    "h264": {"preset": "medium"},
    "h265": {"preset": "medium", "x265-params": "log-level=error"},
    "vp9": {"b": "0", "row-mt": "1", "deadline": "good", "cpu-used": "4"},
    "av1": {"preset": "8"},
    "ffv1": {"level": "3", "slicecrc": "1"},
}


def video_format(path: str | Path) -> str | None:
    """The container key of a video file name, or None."""
    return VIDEO_FORMATS.get(Path(path).suffix.lower())


def check_codec(codec: str | None) -> str | None:
    if codec is not None and codec not in ENCODERS:
        raise PipelineError(f"unknown --codec '{codec}' (choose from: {', '.join(ENCODERS)})")
    return codec


def check_crf(codec: str | None, crf: int | None, *, default_for: str | None = None) -> None:
    """--crf against --codec (or, without --codec, against every codec that could be chosen). `default_for`: the
    container whose default codec `codec` is (no --codec given), named in the error."""
    if crf is None:
        return
    if isinstance(crf, bool) or not isinstance(crf, int):
        raise PipelineError(f"--crf must be an integer, got {crf!r}")
    if codec == "ffv1" and default_for:
        lossy = ", ".join(c for c in CONTAINER_CODECS[default_for] if c != "ffv1")
        raise PipelineError(f"--crf does not apply to .{default_for} output, which is lossless FFV1 by default: "
                            f"drop --crf, or give a lossy --codec ({lossy})")
    if codec == "ffv1":
        raise PipelineError("--crf does not apply to --codec ffv1 (lossless)")
    if codec is not None:
        _, lo, hi = CRF[codec]
        if not lo <= crf <= hi:
            raise PipelineError(f"--crf for {codec} must be from {lo} to {hi}, got {crf}")
    elif not 0 <= crf <= 51:
        raise PipelineError(f"--crf must be from 0 to 51 (the range every lossy codec takes), got {crf}")


def codec_for(container: str, codec: str | None) -> str:
    """The codec a video in `container` is written with; raises PipelineError when the container cannot hold it."""
    chosen = codec or DEFAULT_CODEC.get(container, FALLBACK_CODEC)
    if chosen not in CONTAINER_CODECS[container]:
        raise PipelineError(f"--codec {chosen} cannot be written into .{container} "
                            f"(it takes: {', '.join(CONTAINER_CODECS[container])})")
    return chosen


def crf_for(codec: str, crf: int | None) -> int | None:
    if codec == "ffv1":
        return None
    return CRF[codec][0] if crf is None else crf


def size_problem(codec: str, width: int, height: int) -> str | None:
    """Why `codec` cannot encode a width x height picture (its limits above), or None."""
    (max_w, max_h), least = ENCODER_SIZES[codec]
    if (max_w and width > max_w) or (max_h and height > max_h):
        return f"{codec} encodes at most {max_w}x{max_h}"
    if min(width, height) < least:
        return f"{codec} encodes sides of at least {least} pixels"
    return None
