"""Opening a clip, the one way (only the demuxer its extension means, the file protocol, regular files, the pixel
limit), and the plan's check of its header size before any backend loads. PyAV is imported on first use: the plan
imports this module on every run, and image-only runs never load PyAV."""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.errors import first_line
from pipeline.images.header import HeaderError, max_pixels, over_limit
from pipeline.sr.videofmt import DEMUXER_NAMES, DEMUXERS, video_format

if TYPE_CHECKING:
    import av


class VideoError(Exception):
    """This one video cannot be read or written; the message is the one-line reason."""


def reason(e: BaseException) -> str:
    import av  # PyAV: loaded by then (the error is FFmpeg's, or not)

    if isinstance(e, av.FFmpegError):
        return first_line(getattr(e, "strerror", None) or e)
    return f"{type(e).__name__}: {first_line(e)}"


def open_input(path: Path) -> av.container.InputContainer:
    """The one way a clip is opened (VideoError otherwise). Only a regular file, opened without blocking first, so
    a FIFO never hangs the run; FFmpeg then opens that same file (the descriptor's own link, not the name again),
    reads it only with the demuxer its extension means and only through the `file` protocol, so content of another
    format (an ffconcat script naming files elsewhere, a PNG renamed .mp4) is refused, never sniffed and followed.
    Every decoder is held to the pixel limit (FFmpeg's max_pixels), including those that probe the streams."""
    import av  # PyAV: loaded on a run's first clip (the plan imports this module for every run)

    demuxer = DEMUXERS[video_format(path) or ""]
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:  # ELOOP, ENOENT (a dangling link), EACCES
        raise VideoError(f"cannot read: {e.strerror or e}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise VideoError("not a regular file (a FIFO, socket or device); only regular files are read")
        try:
            limit = str(max_pixels())
        except HeaderError as e:  # a bad SRDEPLOY_MAX_PIXELS
            raise VideoError(str(e)) from None
        options = {"format_whitelist": demuxer, "protocol_whitelist": "file", "max_pixels": limit}
        try:
            container = av.open(f"/proc/self/fd/{fd}", options=options)
        except av.FFmpegError as e:
            if e.errno == errno.EINVAL:  # the content is a format other than the allowed demuxer's
                raise VideoError(f"not a readable video (its content is not {DEMUXER_NAMES[demuxer]}, which is all "
                                 f"a {path.suffix} file is read as)") from None
            raise VideoError(f"not a readable video ({reason(e)})") from None
    finally:
        os.close(fd)
    for s in container.streams.video:
        if s.codec_context is not None:
            s.codec_context.options = {**s.codec_context.options, "max_pixels": limit}
    return container


def header_problem(path: Path) -> str | None:
    """The one-line refusal of a clip whose stream header is over the pixel limit, read without decoding (None
    otherwise, also when it cannot be read: its run says why)."""
    try:
        with open_input(path) as container:
            ctx = container.streams.video[0].codec_context if container.streams.video else None
            return over_limit(ctx.width, ctx.height, "video") if ctx is not None and ctx.width and ctx.height else None
    except Exception:  # whatever keeps it from being read, its run says (one line, as before)
        return None
