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
# --preset: x264's and x265's speed/size trade (their names). Each default is the slowest preset that encodes 1080p
# at about 3x srcnn-x3 int8's inference rate on 2 cores (~12 frames/s from 360p), so the encoder takes about 25 %
# of a run (pipeline.bench.encoders, docs/measurements.md: x264 veryfast 33-48 frames/s, faster 19-21; x265
# ultrafast 34-50, superfast 21-32). x264 medium (FFmpeg's default) made the encoder half of a run (issue 52).
PRESETS = ("ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow", "slower", "veryslow")
DEFAULT_PRESET = {"h264": "veryfast", "h265": "ultrafast"}
ENCODER_OPTIONS = {
    "h264": {},
    "h265": {"x265-params": "log-level=error"},
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


def check_preset(codec: str | None, preset: str | None, *, default_for: str | None = None) -> None:
    """--preset against --codec (or the container's default codec: `default_for` names the container)."""
    if preset is None:
        return
    if preset not in PRESETS:
        raise PipelineError(f"unknown --preset '{preset}' (choose from: {', '.join(PRESETS)})")
    if codec is not None and codec not in DEFAULT_PRESET:
        what = f".{default_for} output, which is {codec} by default" if default_for else f"--codec {codec}"
        raise PipelineError(f"--preset applies to h264 and h265 only, not to {what}")


def encoder_options(codec: str, crf: int | None, preset: str | None) -> dict[str, str]:
    """The FFmpeg encoder's options for a clip: the codec's own, its CRF and its preset (`preset` or the default)."""
    options = dict(ENCODER_OPTIONS[codec])
    chosen = preset_for(codec, preset)
    if chosen is not None:
        options["preset"] = chosen
    if crf == 0 and codec == "h264":
        options["qp"] = "0"  # lossless at every depth: x264's crf 0 is lossless at 8 bits only (10-bit luma moved by 2)
    elif crf is not None:
        options["crf"] = str(crf)
    return options


def preset_for(codec: str, preset: str | None) -> str | None:
    """The preset a clip in `codec` is encoded with (None: the codec has none)."""
    return (preset or DEFAULT_PRESET[codec]) if codec in DEFAULT_PRESET else None


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
