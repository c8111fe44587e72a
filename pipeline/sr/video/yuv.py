"""Video frames <-> the image path's BGR pixels, rounded to nearest with the clip's matrix and range (issue 59).

8-bit samples go through libswscale with ACCURATE_RND and full-resolution chroma (its default flags round down
both ways and sample chroma coarsely: every clip came out about one level darker). Deeper samples are converted
here in float32: libswscale scales 10-bit limited range to RGB as if it were 8-bit (luma 940 became 1020 of 1023)
and truncates 16-bit RGB to 10 bits. libswscale still does their layout (planes, chroma up- and downsampling,
MSB-aligned 16-bit), which involves no matrix or range. YCgCo (ITU-T H.273 matrix 8) is converted here at every
depth: libswscale has no such matrix and reads it as BT.601.
"""
from __future__ import annotations

import av
import numpy as np
from av.video.reformatter import Interpolation

# the scaler flags of every conversion: round to nearest, chroma interpolated at full resolution both ways
SWS = Interpolation.BILINEAR | Interpolation.ACCURATE_RND | Interpolation.FULL_CHR_H_INT | Interpolation.FULL_CHR_H_INP
# libswscale's matrix names -> (Kr, Kb) of their luma equation (ITU-T H.273)
KR_KB = {"ITU709": (0.2126, 0.0722), "ITU601": (0.299, 0.114), "SMPTE170M": (0.299, 0.114), "FCC": (0.30, 0.11),
         "SMPTE240M": (0.212, 0.087), "BT2020": (0.2627, 0.0593)}
YCGCO = "YCGCO"  # H.273 matrix 8 (Cb carries Cg, Cr carries Co): our name, as libswscale has none
TOP = 65535.0  # the image path's 16-bit white


def _bits(fmt: av.VideoFormat) -> int:
    return max(c.bits for c in fmt.components)


def _sws_range(full: bool) -> str:
    return "JPEG" if full else "MPEG"


def _bgr_format(alpha: bool, deep: bool) -> str:
    """The packed format of the image path's pixels: BGR or BGRA, 8- or 16-bit."""
    return ("bgra64le" if deep else "bgra") if alpha else ("bgr48le" if deep else "bgr24")


def _layout_only(full: bool) -> dict:
    """Reformat arguments for YUV -> YUV of one range: planes and chroma siting only, no matrix (named, as a
    frame's own YCgCo tag makes libswscale refuse with ENOTSUP)."""
    rng = _sws_range(full)
    return {"interpolation": SWS, "src_colorspace": "ITU601", "dst_colorspace": "ITU601", "src_color_range": rng,
            "dst_color_range": rng}


class _Scale:
    """Where black, white and neutral chroma sit in MSB-aligned 16-bit samples of a `bits`-deep format."""

    def __init__(self, bits: int, full: bool):
        step = float(1 << (16 - bits))  # one code value of the format, in 16-bit samples
        if full:
            self.y0, self.y_span, self.c_span = 0.0, ((1 << bits) - 1) * step, ((1 << bits) - 1) * step
        else:
            self.y0, self.y_span, self.c_span = 4096.0, 56064.0, 57344.0  # 16, 219 and 224 (x 256)
        self.step, self.c0, self.top = step, 32768.0, ((1 << bits) - 1) * step


def to_bgr(frame: av.VideoFrame, matrix: str, full: bool, alpha: bool, deep: bool) -> np.ndarray:
    """HxWx3 BGR (HxWx4 with alpha) of a decoded frame: uint8, or uint16 on the full 16-bit scale (`deep`)."""
    fmt = frame.format
    if not deep:
        if fmt.is_rgb:
            return frame.to_ndarray(format=_bgr_format(alpha, False))
        if matrix == YCGCO:  # 8-bit planes x 256: MSB-aligned as the float path takes them
            planes = frame.to_ndarray(format="yuva444p" if alpha else "yuv444p", **_layout_only(full))
            yuv = np.moveaxis(planes, 0, -1).astype(np.float32) * 256
            return _yuv16_to_bgr(yuv, matrix, _Scale(8, full), top=255.0).astype(np.uint8)
        return frame.to_ndarray(format=_bgr_format(alpha, False), interpolation=SWS, src_colorspace=matrix,
                                dst_colorspace=matrix, src_color_range=_sws_range(full), dst_color_range="JPEG")
    bits = _bits(fmt)
    if fmt.is_rgb:
        # libswscale's 16-bit samples are the codes x 2^(16 - bits), give or take 2 (870 of 1023 -> 55678)
        x = frame.to_ndarray(format="gbrap16le" if alpha else "gbrp16le").astype(np.float32)
        top = (1 << bits) - 1
        codes = np.minimum(np.rint(x / (1 << (16 - bits))), top)
        out = np.rint(codes * (TOP / top)).astype(np.uint16)
        return np.ascontiguousarray(out[..., [2, 1, 0, 3] if alpha else [2, 1, 0]])
    yuv = frame.to_ndarray(format="yuva444p16le" if alpha else "yuv444p16le", **_layout_only(full)).astype(np.float32)
    return _yuv16_to_bgr(yuv, matrix, _Scale(bits, full))


def _yuv16_to_bgr(yuv: np.ndarray, matrix: str, s: _Scale, top: float = TOP) -> np.ndarray:
    """BGR(A) on the 0..top scale (uint16) of MSB-aligned 16-bit Y, Cb, Cr (and alpha)."""
    y = (yuv[..., 0] - s.y0) / s.y_span
    cb, cr = (yuv[..., 1] - s.c0) / s.c_span, (yuv[..., 2] - s.c0) / s.c_span
    if matrix == YCGCO:
        t = y - cb
        r, g, b = t + cr, y + cb, t - cr
    else:
        kr, kb = KR_KB[matrix]
        r = y + (2 - 2 * kr) * cr
        b = y + (2 - 2 * kb) * cb
        g = (y - kr * r - kb * b) / (1 - kr - kb)
    planes = [b, g, r] + ([yuv[..., 3] / s.top] if yuv.shape[-1] == 4 else [])  # alpha is full range
    out = np.stack(planes, -1) * top
    return np.clip(np.rint(out), 0, top).astype(np.uint16)


def from_bgr(pixels: np.ndarray, pix_fmt: str, matrix: str, full: bool) -> av.VideoFrame:
    """An encoder's frame in `pix_fmt` of HxWx3/4 BGR(A) pixels (uint8, or uint16 on the 16-bit scale)."""
    fmt = av.VideoFormat(pix_fmt)
    alpha = pixels.shape[2] == 4
    if matrix == YCGCO and not fmt.is_rgb and _bits(fmt) <= 8:
        return _ycgco8_frame(pixels, pix_fmt, full)
    if pixels.dtype == np.uint8 and _bits(fmt) <= 8:
        f = av.VideoFrame.from_ndarray(np.ascontiguousarray(pixels), format=_bgr_format(alpha, False))
        if fmt.is_rgb:
            return f.reformat(format=pix_fmt)
        return f.reformat(format=pix_fmt, interpolation=SWS, src_colorspace=matrix, dst_colorspace=matrix,
                          src_color_range="JPEG", dst_color_range=_sws_range(full))
    x = pixels.astype(np.float32) * (1 / 255.0 if pixels.dtype == np.uint8 else 1 / TOP)
    s = _Scale(_bits(fmt), full)
    if fmt.is_rgb:
        # FFV1's gbrp10le/gbrp16le (and gbrap): made directly, as libswscale's 16 -> 10 bits rounds down
        codes = np.rint(x[..., [2, 1, 0, 3] if alpha else [2, 1, 0]] * (s.top / s.step)).astype(np.uint16)
        return av.VideoFrame.from_ndarray(codes, format=pix_fmt)
    yuv = _bgr_to_yuv16(x, matrix, s)
    f = av.VideoFrame.from_ndarray(yuv, format="yuva444p16le" if alpha else "yuv444p16le")
    return f.reformat(format=pix_fmt, **_layout_only(full))


def _ycgco8_frame(pixels: np.ndarray, pix_fmt: str, full: bool) -> av.VideoFrame:
    """An 8-bit YCgCo frame: the float path's codes as 8-bit 4:4:4 planes, then libswscale's layout alone (its
    8 -> 16 bit scaling differs between luma and chroma, so the planes are made at 8 bits)."""
    alpha = pixels.shape[2] == 4
    x = pixels.astype(np.float32) * (1 / 255.0 if pixels.dtype == np.uint8 else 1 / TOP)
    codes = (_bgr_to_yuv16(x, YCGCO, _Scale(8, full)) >> 8).astype(np.uint8)
    f = av.VideoFrame.from_ndarray(np.ascontiguousarray(np.moveaxis(codes, -1, 0)),
                                   format="yuva444p" if alpha else "yuv444p")
    return f.reformat(format=pix_fmt, **_layout_only(full))


def _bgr_to_yuv16(x: np.ndarray, matrix: str, s: _Scale) -> np.ndarray:
    """MSB-aligned 16-bit Y, Cb, Cr (and alpha) whose top bits are the format's code values rounded to nearest."""
    b, g, r = x[..., 0], x[..., 1], x[..., 2]
    if matrix == YCGCO:
        y, cb, cr = 0.5 * g + 0.25 * (r + b), 0.5 * g - 0.25 * (r + b), 0.5 * (r - b)
    else:
        kr, kb = KR_KB[matrix]
        y = kr * r + (1 - kr - kb) * g + kb * b
        cb, cr = (b - y) / (2 - 2 * kb), (r - y) / (2 - 2 * kr)
    planes = [s.y0 + y * s.y_span, s.c0 + cb * s.c_span, s.c0 + cr * s.c_span]
    if x.shape[-1] == 4:
        planes.append(x[..., 3] * s.top)
    codes = np.rint(np.stack(planes, -1) / s.step)
    return (np.clip(codes, 0, s.top / s.step) * s.step).astype(np.uint16)
