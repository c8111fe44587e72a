"""Tiny test clips made with PyAV: a moving colour pattern (so every frame differs) and a sine-wave audio track."""
from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import numpy as np

AUDIO_RATE = 48000


def pattern(i: int, w: int, h: int) -> np.ndarray:
    """Frame i: RGB uint8 gradients and a square that move with i."""
    yy, xx = np.mgrid[0:h, 0:w]
    img = np.stack([(xx * 4 + i * 7) % 256, (yy * 5 + i * 3) % 256, ((xx + yy) * 3 + i * 11) % 256], -1)
    y0, x0 = (2 * i) % max(h - 8, 1), (3 * i) % max(w - 8, 1)
    img[y0:y0 + 8, x0:x0 + 8] = (250, 240, 20)
    return img.astype(np.uint8)


def _video_stream(out, codec, w, h, rate, pix_fmt, time_base, rotation, colour, codec_options=None):
    v = out.add_stream(codec, rate=rate, options=codec_options or {})
    v.width, v.height, v.pix_fmt = w, h, pix_fmt
    if time_base is not None:
        v.time_base = time_base
        v.codec_context.time_base = time_base
    if rotation:
        v.set_display_rotation(rotation)
    if colour:
        ctx = v.codec_context
        ctx.colorspace, ctx.color_range, ctx.color_primaries, ctx.color_trc = colour
    return v


def _frame(i, w, h, pix_fmt, colour):
    f = av.VideoFrame.from_ndarray(pattern(i, w, h), format="rgb24")
    if colour:  # samples made with the tagged matrix and range
        f = f.reformat(format=pix_fmt, dst_colorspace={1: "ITU709", 9: "BT2020"}.get(colour[0], "ITU601"),
                       dst_color_range="JPEG" if colour[1] == 2 else "MPEG")
        f.colorspace, f.color_range, f.color_primaries, f.color_trc = colour
    return f


def _write_audio(out, a, seconds: float) -> None:
    total = int(seconds * AUDIO_RATE)
    t = np.arange(total) / AUDIO_RATE
    samples = (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    step = a.codec_context.frame_size or 1024
    s16 = a.codec_context.format.name.startswith("s16")
    for k in range(0, total, step):
        chunk = samples[None, k:k + step]
        fr = av.AudioFrame.from_ndarray((chunk * 32767).astype(np.int16) if s16 else chunk,
                                        format="s16" if s16 else "flt", layout="mono")
        fr.sample_rate, fr.pts = AUDIO_RATE, k
        for p in a.encode(fr):
            out.mux(p)
    for p in a.encode():
        out.mux(p)


def make_clip(path: Path, codec: str, w: int, h: int, frames: int, rate: Fraction | int, *, pix_fmt: str = "yuv420p",
              audio: str | None = None, pts: list[int] | None = None, time_base: Fraction | None = None,
              rotation: int = 0, colour: tuple[int, int, int, int] | None = None, video: bool = True,
              subtitles: Path | None = None, options: dict | None = None, codec_options: dict | None = None) -> Path:
    """Write a clip. pts (in time_base) makes it variable-frame-rate; colour = (matrix, range, primaries, trc) tags;
    video=False writes the audio alone; subtitles: an .srt file whose cues become a subtitle stream; options: the
    muxer's (e.g. movflags=faststart: the MP4 index first); codec_options: the encoder's (e.g. x264-params)."""
    out = av.open(str(path), "w", options=options or {})
    srt = av.open(str(subtitles)) if subtitles else None
    sub = out.add_stream_from_template(srt.streams[0]) if srt else None
    v = _video_stream(out, codec, w, h, rate, pix_fmt, time_base, rotation, colour, codec_options) if video else None
    a = None
    if audio:
        a = out.add_stream(audio, rate=AUDIO_RATE)
        a.layout = "mono"
    if v is not None:
        for i in range(frames):
            f = _frame(i, w, h, pix_fmt, colour)
            if pts is not None:
                f.pts, f.time_base = pts[i], time_base
            for p in v.encode(f):
                out.mux(p)
        for p in v.encode():
            out.mux(p)
    if a is not None:
        _write_audio(out, a, frames / float(rate))
    if srt is not None:
        for p in srt.demux(srt.streams[0]):
            if p.size:
                p.stream = sub
                out.mux(p)
        srt.close()
    out.close()
    return path


OPEN_GOP = {"x264-params": "open-gop=1:keyint=20:min-keyint=20:scenecut=0:bframes=3"}


def h264_clip(path: Path, seconds: int = 10) -> Path:
    """H.264 with B-frames (so MP4 gets an edit list for their delay), AAC audio, a rotation tag and BT.709 colour
    tags, 30 fps."""
    return make_clip(path, "libx264", 48, 32, 30 * seconds, 30, audio="aac", rotation=90, colour=(1, 1, 1, 1),
                     codec_options={"g": "60", "bf": "2"})


def vfr_clip(path: Path) -> Path:
    pts, t = [], 0
    for i in range(150):
        pts.append(t)
        t += (1 + i % 3) * 10  # 1/90 .. 1/30 s apart
    return make_clip(path, "libx264", 40, 24, 150, 30, pts=pts, time_base=Fraction(1, 900),
                     codec_options={"g": "30"})


def open_gop_clip(path: Path) -> Path:
    return make_clip(path, "libx264", 40, 24, 150, 30, codec_options=OPEN_GOP)


def frames_of(path: Path) -> list[av.VideoFrame]:
    with av.open(str(path)) as c:
        return list(c.decode(c.streams.video[0]))


def audio_of(path: Path) -> np.ndarray:
    with av.open(str(path)) as c:
        return np.concatenate([f.to_ndarray() for f in c.decode(c.streams.audio[0])], axis=1)


def stream_facts(path: Path) -> dict:
    """What a player sees of a clip beyond its frames: streams, codec and tag, frame rate, rotation, colour tags,
    duration."""
    with av.open(str(path)) as c:
        v = c.streams.video[0]
        frame = next(c.decode(v))
        ctx = v.codec_context
        return {"layout": [s.type for s in c.streams], "codec": (ctx.name, ctx.codec_tag), "rate": v.average_rate,
                "rotation": frame.rotation, "duration": c.duration,
                "colour": (frame.colorspace, frame.color_range, frame.color_primaries, frame.color_trc)}


def assert_same_frames(a: Path, b: Path, exact: bool) -> None:
    fa, fb = frames_of(a), frames_of(b)
    assert len(fa) == len(fb) and [f.pts for f in fa] == [f.pts for f in fb]
    for x, y in zip(fa, fb, strict=True):
        px, py = x.to_ndarray(format="rgb24").astype(int), y.to_ndarray(format="rgb24").astype(int)
        if exact:
            assert np.array_equal(px, py)
        else:  # each its own encode of the same pixels: within the codec's loss
            assert 10 * np.log10(255**2 / max(np.mean((px - py) ** 2), 1e-9)) > 30


def subtitle_packets(path: Path) -> list[tuple[bytes, float]]:
    with av.open(str(path)) as c:
        return [(bytes(p), float(p.pts * p.time_base)) for p in c.demux(c.streams.subtitles[0]) if p.size]


def layout(path: Path) -> list[str]:
    with av.open(str(path)) as c:
        return [f"{s.type}:{s.codec_context.name}" for s in c.streams]


def make_png_mov(path: Path, sizes: list[tuple[int, int]], pix_fmt: str = "rgb24", alpha: int | None = None) -> Path:
    """A MOV of PNG frames, frame i at sizes[i] (its header says the first): each PNG packet is a whole picture of
    its own size, as a hostile or spliced file may hold. alpha: an alpha value for every pixel (pix_fmt rgba)."""
    out = av.open(str(path), "w", format="mov")
    tb = Fraction(1, 10)
    v = out.add_stream("png", rate=10)
    v.width, v.height, v.pix_fmt = *sizes[0], pix_fmt
    v.time_base = v.codec_context.time_base = tb
    for i, (w, h) in enumerate(sizes):
        enc = v.codec_context if (w, h) == sizes[0] else av.CodecContext.create("png", "w")
        if enc is not v.codec_context:
            enc.width, enc.height, enc.pix_fmt, enc.time_base = w, h, pix_fmt, tb
        rgb = pattern(i, w, h)
        pixels = np.dstack([rgb, np.full((h, w), alpha, np.uint8)]) if alpha is not None else rgb
        f = av.VideoFrame.from_ndarray(pixels, format="rgba" if alpha is not None else "rgb24").reformat(format=pix_fmt)
        f.pts, f.time_base = i, tb
        for p in enc.encode(f):
            p.stream, p.pts, p.dts = v, i, i
            out.mux(p)
    out.close()
    return path


def repeated_pts_clip(path: Path, frames: int = 90, every: int = 7) -> Path:
    """VFR H.264 (no B-frames, 1 s GOPs) whose every `every`-th frame has the same pts as the frame before it, as
    some cameras and screen recorders write; in Matroska, which takes equal timestamps."""
    pts, t = [], 0
    for i in range(frames):
        if i % every or i == 0:
            t += 33 if i else 0
        pts.append(t)
    return make_clip(path, "libx264", 32, 24, frames, 30, pts=pts, time_base=Fraction(1, 1000),
                     codec_options={"g": "30", "bf": "0"})
