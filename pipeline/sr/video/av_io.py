"""Video files <-> frames for the sr stage, through PyAV (FFmpeg): probe a clip, read its frames as the same BGR
pixels an image decode gives (converted with the clip's own matrix and range), and write upscaled frames with the
clip's timing, rotation and colour tags while its audio and subtitle packets are copied as they are.

8-bit clips become uint8 frames, deeper ones uint16 (the image path's 16-bit), so a video frame runs through the
worker exactly as the same picture saved as a PNG would.
"""
from __future__ import annotations

import errno
import functools
import io
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

from pipeline.images.header import MAX_PIXELS_ENV, max_pixels, over_limit
from pipeline.sr.video import yuv
from pipeline.sr.video.opening import VideoError, open_input, reason
from pipeline.sr.videofmt import ENCODERS, MUXERS, encoder_options

COPIED = ("audio", "subtitle")  # stream types copied packet by packet
SEGMENT_MUXER = "nut"  # a segment file's container: holds every --codec and keeps the clip's time base exactly
# AVColorSpace (frame/stream tags) -> swscale's matrix names. RGB (0) and unknown values use the size rule below.
MATRIX = {1: "ITU709", 4: "FCC", 5: "ITU601", 6: "SMPTE170M", 7: "SMPTE240M", 8: yuv.YCGCO, 9: "BT2020",
          10: "BT2020"}
UNSPECIFIED = 2
SWS_TAGS = {"ITU709": 1, "ITU601": 6}  # the by-size rule's matrices -> the tags that name them (BT.709, SMPTE 170M)
RANGE_NAMES = {1: "MPEG", 2: "JPEG"}  # limited, full


def frame_problem(width: int, height: int, info: VideoInfo, n: int) -> str | None:
    """Why frame n (from 1) of this size is refused: over the pixel limit, or not the clip's size (a size change
    mid-clip would be cropped or stretched into the output's one size), else None."""
    if (width, height) == (info.width, info.height):
        return None
    return over_limit(width, height, f"frame {n}") or (
        f"frame {n} is {width}x{height} but the clip began at {info.width}x{info.height}: a frame size that "
        f"changes mid-clip is not supported (split the clip where the size changes)")


@dataclass
class Colour:
    """How the clip's samples map to RGB (used both ways) and the tags written back."""

    matrix: int      # AVColorSpace as tagged (2 = unspecified)
    range: int       # AVColorRange as tagged (0 = unspecified)
    primaries: int
    trc: int
    sws_matrix: str  # the matrix conversions use: the tag, else BT.709 for HD and BT.601 for SD (players' rule)
    full: bool       # full-range samples: the tag, else the yuvj formats

    @property
    def out_matrix(self) -> int:
        """The output's matrix tag: the one its samples were made with (an untagged clip's by-size choice, so a
        player of the upscaled, maybe HD, output does not guess another)."""
        return self.matrix if MATRIX.get(self.matrix) == self.sws_matrix else SWS_TAGS[self.sws_matrix]

    @property
    def out_range(self) -> int:
        return 2 if self.full else 1

    def describe(self) -> str:
        tag = "" if self.matrix != UNSPECIFIED else " (untagged: by size)"
        return f"{self.sws_matrix}{tag}, {'full' if self.full else 'limited'} range"


@dataclass
class VideoInfo:
    width: int
    height: int
    pix_fmt: str
    depth: int                   # bits per sample (8, 10, 12, ...)
    rgb: bool                    # stored as RGB (e.g. FFV1 bgr0), not YUV
    alpha: bool                  # frames carry an alpha plane (qtrle argb, PNG rgba, FFV1 bgra, yuva...)
    chroma: str                  # "420", "422", "444"
    rate: Fraction | None        # average frame rate
    time_base: Fraction
    frames: int | None           # frames the header promises, else duration x rate (None when neither is known)
    frames_exact: bool           # the header counts them (MP4); else an estimate (MKV, WebM: off for VFR clips)
    duration_s: float | None
    rotation: int                # display rotation, degrees counter-clockwise
    colour: Colour
    codec: str
    copied: list[str] = field(default_factory=list)   # "audio:aac", ... (the streams copied)
    dropped: list[str] = field(default_factory=list)  # data/attachment streams not copied


@functools.cache
def _muxer_codecs(muxer: str) -> frozenset[str]:
    with av.open(io.BytesIO(), "w", format=muxer) as out:
        return frozenset(out.supported_codecs)


def container_holds(container: str, codec: str) -> bool:
    """Whether a `container` (videofmt key) output can hold a stream of `codec` copied as it is."""
    return codec in _muxer_codecs(MUXERS[container])


def _colour(frame: av.VideoFrame, ctx, pix_fmt: str) -> Colour:
    matrix = frame.colorspace if frame.colorspace not in (None, UNSPECIFIED) else ctx.colorspace
    rng = frame.color_range or ctx.color_range or 0
    sws = MATRIX.get(matrix) or ("ITU709" if frame.height >= 720 else "ITU601")
    full = rng == 2 or (rng == 0 and pix_fmt.startswith("yuvj"))
    return Colour(int(matrix or UNSPECIFIED), int(rng), int(frame.color_primaries or ctx.color_primaries or 2),
                  int(frame.color_trc or ctx.color_trc or 2), sws, full)


def _chroma(fmt: av.VideoFormat) -> str:
    if fmt.is_rgb or len(fmt.components) < 3:
        return "444"
    c = fmt.components[1]
    if c.width == fmt.width and c.height == fmt.height:
        return "444"
    return "422" if c.height == fmt.height else "420"


def _expected_frames(stream, duration_s: float | None, rate: Fraction | None) -> int | None:
    if stream.frames:
        return int(stream.frames)
    if duration_s and rate:
        return round(duration_s * float(rate))
    return None


def probe(path: Path) -> VideoInfo:
    """What the clip is; decodes its first frame (rotation and colour tags travel on frames) once the stream's
    header size is within the pixel limit. Raises VideoError."""
    with open_input(path) as container:
        if not container.streams.video:
            kinds = sorted({s.type for s in container.streams}) or ["no"]
            raise VideoError(f"no video stream ({' and '.join(kinds)} streams only)")
        stream = container.streams.video[0]
        ctx = stream.codec_context
        if ctx is not None and ctx.width and ctx.height and (big := over_limit(ctx.width, ctx.height, "video")):
            raise VideoError(big)
        try:
            frame = next(container.decode(stream), None)
        except av.FFmpegError as e:
            raise VideoError(f"cannot decode the first frame: {_decode_reason(e)}") from None
        if frame is None:
            raise VideoError("the video stream has no decodable frame")
        if big := over_limit(frame.width, frame.height, "video"):
            raise VideoError(big)
        fmt = frame.format
        rate = stream.average_rate or stream.guessed_rate
        if stream.duration is not None and stream.time_base:
            duration = float(stream.duration * stream.time_base)
        else:
            duration = container.duration / av.time_base if container.duration else None
        copied = [f"{s.type}:{s.codec_context.name}" for s in container.streams if s.type in COPIED]
        dropped = [f"{s.type}:{s.codec_context.name if s.codec_context else '?'}" for s in container.streams
                   if s.type not in (*COPIED, "video")] + [f"video:{s.codec_context.name}"
                                                             for s in container.streams.video[1:]]
        return VideoInfo(width=frame.width, height=frame.height, pix_fmt=fmt.name,
                         depth=max(c.bits for c in fmt.components), rgb=fmt.is_rgb,
                         alpha=len(fmt.components) in (2, 4), chroma=_chroma(fmt),
                         rate=Fraction(rate) if rate else None, time_base=Fraction(stream.time_base),
                         frames=_expected_frames(stream, duration, rate), frames_exact=bool(stream.frames),
                         duration_s=duration,
                         rotation=int(round(frame.rotation or 0)), colour=_colour(frame, ctx, fmt.name),
                         codec=ctx.name, copied=copied, dropped=dropped)


def frame_pixels(frame: av.VideoFrame, info: VideoInfo) -> np.ndarray:
    """HxWx3 BGR (HxWx4 BGRA for clips with alpha), uint8 for 8-bit clips and uint16 (full 16-bit scale) for
    deeper ones: the image path's layout."""
    c = info.colour
    return yuv.to_bgr(frame, c.sws_matrix, c.full, info.alpha, info.depth > 8)


@dataclass
class Packet:
    """A packet of a copied stream, passed from the reader to the writer in file order. The input stream's index
    is kept apart: `packet.stream` must not be read once the reader has closed the input."""

    packet: av.Packet
    stream: int


@dataclass
class Frame:
    pixels: np.ndarray
    pts: int | None
    duration: int | None
    time_s: float | None = None  # its presentation time, for the lines that name it


@dataclass
class ReadEnd:
    """The reader is done: the damage it met (one line each) and where its last frame ends."""

    errors: list[str]
    end_s: float | None = None  # where the last decoded frame ends, seconds (truncation is judged by time)
    refused: str | None = None  # a frame the clip cannot take (over the pixel limit, another size): it fails whole
    lead_s: float = 0.0         # from opening the file to its first frame: a segment's seek and its dropped frames


def _decode_reason(e: av.FFmpegError) -> str:
    """A packet the decoder refused; EINVAL (not INVALIDDATA, damage's code) is how max_pixels refuses a frame."""
    if e.errno != errno.EINVAL:
        return reason(e)
    return (f"{reason(e)} (the decoder refuses a frame over the pixel limit of {max_pixels():,} this way; "
            f"{MAX_PIXELS_ENV} raises it)")


@dataclass(frozen=True)
class Window:
    """A part of the clip's frames by presentation time, in the video stream's time base: decoding starts at the
    keyframe at or before `start` (None: the clip's start) and frames before `start` are dropped; it stops at the
    first frame at or past `end` (None: the clip's end). Decoders put frames out in presentation order, so the
    frames a later window starts with (an open GOP's leading frames included) all come out before it stops."""

    start: int | None = None
    end: int | None = None

    def before(self, pts: int | None) -> bool:
        return self.start is not None and pts is not None and pts < self.start

    def past(self, pts: int | None) -> bool:
        return self.end is not None and pts is not None and pts >= self.end


WHOLE = Window()


def _demux(container, info: VideoInfo, window: Window, copy: bool):
    """The video stream and the packets wanted, from the window's keyframe (copied streams only with `copy`)."""
    video = container.streams.video[0]
    video.thread_type = "AUTO"  # frame + slice threads in the decoder
    if window.start is not None:  # the keyframe at or before it (the index's, or the demuxer's search)
        container.seek(window.start, stream=video, backward=True, any_frame=False)
    wanted = [video, *(s for s in container.streams if s.type in COPIED)] if copy else [video]
    return video, container.demux(wanted)


class _Shown:
    """Frames' presentation times made strictly increasing: a repeated (or earlier) pts becomes one tick after the
    frame before it. Every executor reads through here, so a clip with repeated timestamps gives the same frames
    on each, and every muxer (the segments' NUT too, which refuses equal times) takes them. The segment plan cuts
    only where no such shift can reach the cut (pipeline.sr.video.segments), so segments read it as the whole clip
    does."""

    def __init__(self):
        self.last: int | None = None

    def pts(self, pts: int | None) -> int | None:
        if pts is not None and self.last is not None and pts <= self.last:
            pts = self.last + 1
        self.last = pts if pts is not None else self.last
        return pts


def read(path: Path, info: VideoInfo, window: Window = WHOLE,
         copy: bool = True) -> Iterator[Packet | Frame | ReadEnd]:
    """The clip's frames (as pixels) and copied packets in file order, then a ReadEnd. A damaged packet is
    skipped and counted (the frames after it still come); a container that ends early ends the frames. A frame
    over the pixel limit or of another size than the first ends them too, before it is converted (ReadEnd.refused).
    `window`: only the frames of that part of the clip (a segment); `copy=False`: the video's frames only."""
    errors: list[str] = []
    end_s = None
    frame_s = 1 / float(info.rate) if info.rate else 0.0
    n, lead, t_open = 0, 0.0, time.perf_counter()
    shown = _Shown()
    try:
        container = open_input(path)
    except VideoError as e:
        yield ReadEnd([f"cannot reopen: {e}"])
        return
    with container:
        video, packets = _demux(container, info, window, copy)
        while True:
            try:
                packet = next(packets)
            except StopIteration:
                break
            except av.FFmpegError as e:  # the container itself is cut or damaged: nothing more can be read
                errors.append(f"demuxing stopped: {reason(e)}")
                break
            if packet.stream.index != video.index:
                if packet.size:
                    yield Packet(packet, packet.stream.index)
                continue
            try:
                frames = packet.decode()
            except av.FFmpegError as e:
                errors.append(_decode_reason(e))
                continue
            for f in frames:
                if window.before(f.pts):
                    continue
                if window.past(f.pts):
                    yield ReadEnd(errors, end_s, lead_s=lead)
                    return
                n += 1
                lead = lead or time.perf_counter() - t_open
                if refused := frame_problem(f.width, f.height, info, n):
                    yield ReadEnd(errors, end_s, refused)
                    return
                if f.pts is not None and f.time_base:
                    end_s = float(f.pts * f.time_base) + (float(f.duration * f.time_base) if f.duration else frame_s)
                shown_s = float(f.pts * f.time_base) if f.pts is not None and f.time_base else None
                yield Frame(frame_pixels(f, info), shown.pts(f.pts), f.duration or None, shown_s)
    yield ReadEnd(errors, end_s, lead_s=lead)


def output_pix_fmt(codec: str, info: VideoInfo) -> tuple[str, list[str]]:
    """The encoder's pixel format for this clip: the input's depth, chroma and alpha where the encoder takes them.
    FFV1 stores RGB (lossless: the upscaled pixels come back exactly), with alpha when the clip has it."""
    notes: list[str] = []
    deep = info.depth > 8
    if codec == "ffv1":
        if info.alpha:
            return ("gbrap10le" if info.depth <= 10 else "gbrap16le") if deep else "bgra", notes
        return ("gbrp10le" if info.depth <= 10 else "gbrp16le") if deep else "bgr0", notes
    if info.alpha:
        notes.append(f"alpha dropped ({codec} holds no alpha; --codec ffv1 into .mkv or .avi keeps it)")
    supported = {f.name for f in av.codec.Codec(ENCODERS[codec], "w").video_formats}
    chroma = info.chroma
    for c in (chroma, "420"):
        name = f"yuv{c}p" + ("10le" if deep else "")
        if name in supported:
            if c != chroma:
                notes.append(f"chroma {chroma} written as 420 ({codec} here takes no yuv{chroma})")
            return name, notes
    notes.append(f"{info.depth}-bit written as 8-bit ({codec} here encodes 8-bit only)")
    return "yuv420p", notes


def even_size(width: int, height: int, pix_fmt: str) -> tuple[int, int]:
    """The largest size <= (width, height) the pixel format's chroma subsampling allows (crops at most 1 px)."""
    fmt = av.VideoFormat(pix_fmt, 2, 2)  # a 2x2 picture: a subsampled chroma plane is 1 px on that side
    if fmt.is_rgb or len(fmt.components) < 3:
        return width, height
    sub_w, sub_h = fmt.components[1].width == 1, fmt.components[1].height == 1
    return width - (width % 2 if sub_w else 0), height - (height % 2 if sub_h else 0)


class Writer:
    """An output clip: the upscaled video stream plus the copied streams; `close` finishes the file."""

    def __init__(self, path: Path, container: str, codec: str, crf: int | None, info: VideoInfo, width: int,
                 height: int, pix_fmt: str, source: Path, drop: tuple[str, ...] = (), *, segment: bool = False,
                 preset: str | None = None, threads: int = 0):
        self.info = info
        self.preset, self.threads = preset, threads  # threads: the encoder's (0: FFmpeg's choice)
        self._flushed = False
        # a segment (pipeline.sr.video.segments) holds the video alone, in NUT (any codec), B-frames kept: NUT stores no
        # decode times and shifts negative ones, so each packet's timestamps as the encoder made them are kept in
        # `packets` (in self.time_base) for the segment's record, and the join puts them back
        self.segment = segment
        self.packets: list[tuple[int | None, int | None, int | None]] = []
        self._durations: dict[int, int] = {}  # a segment's frames' durations by pts: the encoder's may be unset
        self.drop = COPIED if segment else drop  # stream types left out (--audio drop)
        self.pix_fmt = pix_fmt
        self.alpha = len(av.VideoFormat(pix_fmt).components) == 4  # the output holds the frames' alpha
        self.width, self.height = width, height
        # AVI counts frames, not time: its video ticks once a frame (1/rate), so the input's timestamps are rescaled
        # to that (the input's own time base there reads as 600 "frames" a second).
        self.time_base = 1 / info.rate if container == "avi" and info.rate else info.time_base
        self.out = av.open(str(path), "w", format=SEGMENT_MUXER if segment else MUXERS[container])
        try:
            self._streams(codec, crf, source)
        except BaseException:
            self.out.close()
            raise

    def _streams(self, codec: str, crf: int | None, source: Path) -> None:
        """The output's streams in the input's order: the upscaled video where the first video was, copies of
        the audio and subtitle streams; a stream the container cannot hold fails the clip before any frame."""
        self.copies: dict[int, av.stream.Stream] = {}
        supported = self.out.supported_codecs
        with open_input(source) as src:
            first_video = src.streams.video[0].index
            for s in src.streams:
                if s.index == first_video:
                    self.video = self._video_stream(codec, crf)
                elif s.type in COPIED and s.type not in self.drop:
                    name = s.codec_context.name
                    if name not in supported:
                        raise VideoError(f"{s.type} stream {name} cannot be copied into {self.out.format.name} "
                                         f"(write .mkv, which holds it)")
                    self.copies[s.index] = self.out.add_stream_from_template(s)

    def _video_stream(self, codec: str, crf: int | None):
        info = self.info
        options = encoder_options(codec, crf, self.preset)
        if codec == "av1":  # SVT-AV1 prints its banner and config to stderr itself unless told (errors still show)
            os.environ.setdefault("SVT_LOG", "1")
        if self.time_base != info.time_base:  # AVI stores no presentation times: B-frames would decode out of order
            options["bf"] = "0"
        v = self.out.add_stream(ENCODERS[codec], rate=info.rate, options=options)
        v.width, v.height, v.pix_fmt = self.width, self.height, self.pix_fmt
        v.time_base = self.time_base
        ctx = v.codec_context
        ctx.time_base = self.time_base
        ctx.thread_type = "AUTO"
        ctx.thread_count = self.threads  # the run's share of the cores: inference and decoding use the rest
        self._tags(v)
        return v

    def _tags(self, v) -> None:
        """The stream's tags a player reads: codec tag, colour (the input's; RGB storage says so) and rotation."""
        ctx = v.codec_context
        if ctx.name in ("hevc", "libx265") and self.out.format.name in ("mp4", "mov"):
            ctx.codec_tag = "hvc1"  # FFmpeg's default hev1 does not play in Apple's players
        rgb = av.VideoFormat(self.pix_fmt).is_rgb
        c = self.info.colour
        ctx.colorspace = 0 if rgb else c.out_matrix
        ctx.color_range = 2 if rgb else c.out_range
        ctx.color_primaries, ctx.color_trc = c.primaries, c.trc
        if self.info.rotation:
            v.set_display_rotation(self.info.rotation)

    def frame(self, pixels: np.ndarray | av.VideoFrame, pts: int | None, duration: int | None) -> None:
        """Encode one upscaled BGR frame (uint8 or uint16; or its `picture`) with the input frame's timing."""
        f = self.picture(pixels) if isinstance(pixels, np.ndarray) else pixels
        f.pts, f.time_base = self._ticks(pts), self.time_base
        if duration:
            f.duration = self._ticks(duration)
            if self.segment and f.pts is not None:
                self._durations[f.pts] = f.duration
        for p in self.video.encode(f):
            self._mux_video(p)

    def picture(self, pixels: np.ndarray) -> av.VideoFrame:
        """An upscaled BGR frame in the encoder's pixel format and colour (any thread: the conversion is a stage
        of its own beside the encoder)."""
        keep_alpha = pixels.shape[2] == 4 and self.alpha
        pixels = pixels[:self.height, :self.width, :4 if keep_alpha else 3]
        c = self.info.colour
        f = yuv.from_bgr(pixels, self.pix_fmt, c.sws_matrix, c.full)
        if not av.VideoFormat(self.pix_fmt).is_rgb:
            f.colorspace, f.color_range = c.out_matrix, c.out_range
        f.color_primaries, f.color_trc = c.primaries, c.trc
        return f

    def _mux_video(self, p: av.Packet) -> None:
        if self.segment:
            tb = Fraction(p.time_base) if p.time_base else self.time_base
            pts, dts = (None if t is None else round(t * tb / self.time_base) for t in (p.pts, p.dts))
            self.packets.append((pts, dts, self._durations.pop(pts, None)))
        self.out.mux(p)

    def _ticks(self, t: int | None) -> int | None:
        """An input timestamp in the output's time base."""
        if t is None or self.time_base == self.info.time_base:
            return t
        return round(t * self.info.time_base / self.time_base)

    def packet(self, item: Packet) -> None:
        stream = self.copies.get(item.stream)
        if stream is not None:  # else a dropped stream's
            item.packet.stream = stream
            self.out.mux(item.packet)

    def flush(self) -> None:
        """Encode the frames the encoder still holds (once; `close` does it otherwise)."""
        if not self._flushed:
            self._flushed = True
            for p in self.video.encode():
                self._mux_video(p)

    def close(self) -> None:
        """Flush the encoder and write the trailer."""
        try:
            self.flush()
        finally:
            self.out.close()

    def abort(self) -> None:
        self.out.close()


class Joiner(Writer):
    """An output clip made of segment files by stream copy (no second encode) in the source's stream layout: the
    segments' video where the first video was, the source's audio and subtitle packets copied once."""

    def __init__(self, path: Path, container: str, info: VideoInfo, source: Path, drop: tuple[str, ...],
                 template: av.video.stream.VideoStream):
        self.template = template
        ctx = template.codec_context
        super().__init__(path, container, ctx.name, None, info, ctx.width, ctx.height, ctx.pix_fmt, source, drop)

    def _video_stream(self, codec: str, crf: int | None):
        v = self.out.add_stream_from_template(self.template)
        v.time_base = self.time_base
        if self.info.rate:
            v.codec_context.framerate = self.info.rate
        self._tags(v)  # a segment file (NUT) keeps no colour tags: they are the plan's, as the local run writes them
        return v

    def video_packet(self, packet: av.Packet) -> None:
        packet.stream = self.video
        self.out.mux(packet)

    def close(self) -> None:
        self.out.close()
