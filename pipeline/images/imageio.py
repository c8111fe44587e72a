"""Image files <-> pixel arrays for the sr stage: OpenCV decode/encode, orientation (applied once: EXIF's here, a
TIFF's by OpenCV), bit depth, gray/alpha layout, float conversion of regions, quantisation, atomic writes.

A decoded `Image` keeps the file's own integer pixels (OpenCV's BGR/BGRA order, uint8 or uint16) and
converts only the region a tile needs to float32 RGB in [0, 1], so no full-size float copy of a large
image ever exists. How samples become floats and back (rounding, clipping) is pipeline.backends.pixels' rule,
which device backends apply on the device.
"""
from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.artifacts.atomic import atomic_write
from pipeline.images.header import MAX_PIXELS_ENV, HeaderError, check_header, max_file_bytes, max_pixels

# OpenCV's own guard (2^30 pixels) must not be tighter than ours: it reads this before its first decode
with contextlib.suppress(HeaderError):
    os.environ.setdefault("CV_IO_MAX_IMAGE_PIXELS", str(max(max_pixels(), 2**30)))
import cv2  # noqa: E402

# libtiff's warnings (a repeated tag, unsorted tags) would reach the terminal as OpenCV log lines, one per file;
# what they warn of is read here the way libtiff reads it. OPENCV_LOG_LEVEL, when set, still decides.
# OpenCV 5 has cv2.utils.logging; 4.x (>= 4.10 is supported, and the Triton env pins 4.12) has only cv2.setLogLevel,
# with the same levels (ERROR = 2).
if "OPENCV_LOG_LEVEL" not in os.environ:
    _cv_logging = getattr(cv2.utils, "logging", None)
    if _cv_logging is not None:
        _cv_logging.setLogLevel(_cv_logging.LOG_LEVEL_ERROR)
    elif hasattr(cv2, "setLogLevel"):
        cv2.setLogLevel(2)  # LOG_LEVEL_ERROR

from pipeline.backends import pixels as px  # noqa: E402
from pipeline.images import (  # noqa: E402
    jpeg,
    metadata,
    png,
    png_chunks,
    png_opencv,
)
from pipeline.images.container import Damaged  # noqa: E402
from pipeline.images.metadata import Metadata  # noqa: E402
from pipeline.images.pixels import to_8bit  # noqa: E402
from pipeline.native import jpeg_codec  # noqa: E402

# Extensions we read and write (OpenCV codecs present in opencv-python-headless).
FORMATS = {
    ".png": "png", ".jpg": "jpg", ".jpeg": "jpg", ".jpe": "jpg", ".bmp": "bmp", ".dib": "bmp",
    ".tif": "tiff", ".tiff": "tiff", ".webp": "webp",
}
# Image extensions we do not write: an OUTPUT ending in one is refused instead of becoming a folder of that name.
OTHER_IMAGE_EXT = frozenset({".gif", ".apng", ".avif", ".heic", ".heif", ".jxl", ".jp2", ".j2k", ".jpf", ".ico",
                             ".cur", ".svg", ".tga", ".exr", ".hdr", ".pbm", ".pgm", ".ppm", ".pnm", ".pfm", ".psd",
                             ".ras", ".dng", ".raw", ".cr2", ".nef", ".arw"})
FORMAT_EXT = {"png": ".png", "jpg": ".jpg", "jpeg": ".jpg", "bmp": ".bmp", "tif": ".tif", "tiff": ".tif",
              "webp": ".webp"}
# Largest side each encoder accepts (libjpeg: 65500, libwebp: 16383); others are bounded by memory.
MAX_SIDE = {"jpg": 65500, "webp": 16383, "png": 2**31 - 1, "bmp": 2**31 - 1, "tiff": 2**31 - 1}
# Formats that hold 16-bit samples; the rest are written as 8-bit.
DEPTH16 = {"png", "tiff"}
# Formats that hold an alpha channel through OpenCV's encoders.
ALPHA = {"png", "tiff", "webp", "bmp"}


class ImageError(Exception):
    """This one file cannot be read or written; the message is the one-line reason."""


@dataclass
class Image:
    """Decoded pixels, upright (orientation applied once), in the file's own sample type; `orientation` is the tag
    that was applied, `meta` what the output carries (fitted: orientation reset, readable pieces only).

    `pixels` is HxW (gray) or HxWxC with C = 3 (BGR) or 4 (BGRA), dtype uint8 or uint16. It may be a
    non-contiguous view (rotations are views); `region_rgb` copies only what it is asked for.
    """

    pixels: np.ndarray
    orientation: int = 1
    meta: Metadata = metadata.NONE  # the ICC profile, EXIF and XMP, carried to the output (images.metadata)
    notes: tuple[str, ...] = ()  # what the decoder warned of (a damaged file's pixels), for the file's own lines

    @property
    def height(self) -> int:
        return int(self.pixels.shape[0])

    @property
    def width(self) -> int:
        return int(self.pixels.shape[1])

    @property
    def channels(self) -> int:
        return 1 if self.pixels.ndim == 2 else int(self.pixels.shape[2])

    @property
    def gray(self) -> bool:
        return self.channels == 1

    @property
    def has_alpha(self) -> bool:
        return self.channels == 4

    @property
    def depth(self) -> int:
        return 16 if self.pixels.dtype == np.uint16 else 8

    @property
    def max_value(self) -> float:
        return 65535.0 if self.depth == 16 else 255.0

    @property
    def mode(self) -> str:
        return {1: "gray", 3: "rgb", 4: "rgba"}[self.channels]

    def region_rgb(self, y0: int, y1: int, x0: int, x1: int) -> np.ndarray:
        """float32 CHW RGB in [0, 1] of rows y0:y1, columns x0:x1 (gray is replicated to 3 channels)."""
        p = self.pixels[y0:y1, x0:x1]
        if p.ndim == 2:
            f = p.astype(np.float32) / np.float32(self.max_value)  # = px.to_unit's values
            return np.broadcast_to(f, (3, *f.shape)).copy()
        return px.to_unit(p[:, :, :3])

    def region_pixels(self, y0: int, y1: int, x0: int, x1: int) -> np.ndarray:
        """HxWx3 BGR samples of a region of a color image, what `Backend.infer_pixels` takes (a view)."""
        return self.pixels[y0:y1, x0:x1, :3]

    def region_alpha(self, y0: int, y1: int, x0: int, x1: int) -> np.ndarray:
        """float32 HW alpha in [0, 1] of a region (only for images with alpha)."""
        return self.pixels[y0:y1, x0:x1, 3].astype(np.float32) / np.float32(self.max_value)


def format_of(path: Path) -> str | None:
    return FORMATS.get(Path(path).suffix.lower())


def extensions_text() -> str:
    """The image extensions we read and write, as every message lists them."""
    return ", ".join(sorted(FORMATS))


def normalize_format(fmt: str) -> str:
    key = fmt.lower().lstrip(".")
    if key not in FORMAT_EXT:
        raise ValueError(f"unknown output format '{fmt}' (choose from: {', '.join(sorted(set(FORMAT_EXT)))})")
    return FORMATS[FORMAT_EXT[key]]


def exif_orientation(data: bytes) -> int:
    """The orientation tag (1..8) of an encoded image, 1 when absent or unreadable: EXIF's (IFD0 tag 274) in JPEG,
    PNG and WebP, a TIFF's own tag; never XMP's, which no decoder here applies (pipeline.images.metadata)."""
    return metadata.read(data).orientation


def apply_orientation(pixels: np.ndarray, orientation: int) -> np.ndarray:
    """Rotate/flip stored pixels to display orientation (EXIF 274 semantics); returns a view."""
    if orientation == 2:
        return pixels[:, ::-1]
    if orientation == 3:
        return pixels[::-1, ::-1]
    if orientation == 4:
        return pixels[::-1]
    if orientation == 5:
        return pixels.swapaxes(0, 1)
    if orientation == 6:
        return np.rot90(pixels, -1)
    if orientation == 7:
        return pixels.swapaxes(0, 1)[::-1, ::-1]
    if orientation == 8:
        return np.rot90(pixels, 1)
    return pixels


def _cv2_reason(e: Exception) -> str:
    """OpenCV errors end with the reason (after the source location lines)."""
    lines = str(e).strip().splitlines()
    return lines[-1] if lines else type(e).__name__


def _check_complete(data: bytes) -> None:
    """Reject truncated files that decoders would silently fill with gray (by content, never by name)."""
    problem = None
    if data[:2] == b"\xff\xd8":
        problem = jpeg.truncation_problem(data)
    elif data[:8] == png_chunks.SIGNATURE:
        problem = png_chunks.truncation_problem(data)
    if problem:
        raise ImageError(problem)


def decode(data: bytes) -> Image:
    """An encoded image's pixels, upright, with the metadata its output keeps. The header is checked (size, declared
    lengths, bounded structure) and the metadata read before any decoder runs."""
    if len(data) == 0:
        raise ImageError("empty file")
    _check_complete(data)
    try:  # the size the header claims, before any decoder allocates for it
        fmt, _, _ = check_header(data)
    except HeaderError as e:
        raise ImageError(str(e)) from None
    meta = metadata.read(data)
    pixels, notes = _pixels(data, fmt)
    if pixels is None:
        raise ImageError("not a readable image (decoder rejected the data)")
    if pixels.dtype not in (np.uint8, np.uint16):
        raise ImageError(f"unsupported sample type {pixels.dtype} (only 8- and 16-bit integer images)")
    if pixels.ndim == 3 and pixels.shape[2] == 1:
        pixels = pixels[:, :, 0]
    elif pixels.ndim == 3 and pixels.shape[2] == 2:  # gray + alpha: expand to BGRA
        g, a = pixels[:, :, 0], pixels[:, :, 1]
        pixels = np.stack([g, g, g, a], axis=2)
    elif pixels.ndim != 2 and pixels.shape[2] not in (3, 4):
        raise ImageError(f"unsupported channel count {pixels.shape[2]}")
    if pixels.shape[0] < 1 or pixels.shape[1] < 1:
        raise ImageError("image has no pixels")
    orientation = meta.orientation
    if fmt != "tiff":  # OpenCV turns a TIFF by its own tag (libtiff); the EXIF tag of the others is ours to apply
        pixels = apply_orientation(pixels, orientation)
    gray = pixels.ndim == 2
    return Image(pixels, orientation, metadata.fitted(meta, gray, orientation != 1), tuple(notes))


def _pixels(data: bytes, fmt: str) -> tuple[np.ndarray | None, list[str]]:
    """The decoded samples and what the decoder warned of. A plain 8-bit PNG by ours (half OpenCV's CPU), an 8-bit
    JPEG by our libjpeg reader, whose warnings come back here (OpenCV's libjpeg prints them on stderr, past the
    file's line); anything else, or where the reader is not built, by OpenCV (a PNG without the chunks libpng would
    print a warning of: png_opencv)."""
    pixels = png.decode_png(data)
    if pixels is not None:
        return pixels, []
    refused, notes = "", []
    if fmt == "jpg":
        try:
            got = jpeg_codec.decode(data)
        except jpeg_codec.JpegFailed as e:  # OpenCV's newer libjpeg may read it (lossless, 12-bit); else its reason
            refused = f"cannot decode: {e}"
        else:
            if got is not None:
                return got[0], [f"decoded with warnings: {got[1]}"] if got[1] else []
    if fmt == "png":  # without what libpng would print a warning or error of
        try:
            data, notes = png_opencv.for_opencv(data)
        except Damaged as e:
            raise ImageError(str(e)) from None
    try:
        pixels = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), cv2.IMREAD_UNCHANGED)
    except cv2.error as e:
        raise ImageError(refused or f"cannot decode: {_cv2_reason(e)}") from None
    if pixels is None and refused:
        raise ImageError(refused)
    return pixels, notes


def read_bytes(path: Path, limit: int | None = None) -> bytes:
    """A regular file's bytes (its first `limit` bytes when given). Opened without blocking and checked before
    reading, so a FIFO named x.png does not hang the run, a link to /dev/zero is not read until memory runs out and
    a file over the size cap (a huge sparse file) is refused by its size, unread."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except PermissionError:
        raise ImageError("permission denied") from None
    except IsADirectoryError:
        raise ImageError("is a directory") from None
    except OSError as e:  # ELOOP (a symlink loop), ENOENT (a dangling link), ...
        raise ImageError(f"cannot read: {e.strerror or e}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise ImageError("is a directory")
        if not stat.S_ISREG(st.st_mode):
            raise ImageError("not a regular file (a FIFO, socket or device); only regular files are read")
        size, cap = st.st_size, max_file_bytes()
        if size > cap:  # read into memory whole: bounded like the pixels
            raise ImageError(f"file is {size / 2**20:.0f} MiB, more than an image within the pixel limit can "
                             f"take ({cap / 2**20:.0f} MiB; raise {MAX_PIXELS_ENV} if you mean it)")
        try:
            return f.read() if limit is None else f.read(limit)
        except OSError as e:
            raise ImageError(f"cannot read: {e.strerror or e}") from None


def read_image(path: Path) -> Image:
    path = Path(path)
    return decode(read_bytes(path))


def new_output(height: int, width: int, channels: int, depth: int) -> np.ndarray:
    """Output buffer in the layout `encode` takes: HxW or HxWxC (BGR/BGRA), uint8 or uint16."""
    dtype = np.uint16 if depth == 16 else np.uint8
    shape = (height, width) if channels == 1 else (height, width, channels)
    return np.empty(shape, dtype=dtype)


def quantize(x: np.ndarray, depth: int) -> np.ndarray:
    """float in [0, 1] -> integer samples (uint8 or uint16): pipeline.backends.pixels' rule."""
    return px.quantize(x, depth)


def store_rgb(out: np.ndarray, y0: int, x0: int, rgb: np.ndarray, depth: int) -> None:
    """Write float32 CHW RGB (model output, unclipped) into the output buffer at (y0, x0).

    Gray outputs get BT.601 luma of the RGB result, computed in float before the single rounding."""
    h, w = rgb.shape[1:]
    if out.ndim == 2:
        out[y0:y0 + h, x0:x0 + w] = px.to_gray(rgb, depth)
    else:
        px.to_samples(rgb, depth, out[y0:y0 + h, x0:x0 + w, :3])


def store_pixels(out: np.ndarray, y0: int, x0: int, bgr: np.ndarray) -> None:
    """Write HxWx3 BGR samples (from `Backend.infer_pixels`) into a color output buffer at (y0, x0)."""
    h, w = bgr.shape[:2]
    out[y0:y0 + h, x0:x0 + w, :3] = bgr


def store_alpha(out: np.ndarray, y0: int, x0: int, alpha: np.ndarray, depth: int) -> None:
    h, w = alpha.shape
    out[y0:y0 + h, x0:x0 + w, 3] = quantize(alpha, depth)


def written_layout(mode: str, depth: int, fmt: str) -> tuple[str, int, list[str]]:
    """What an image of `mode` ('gray', 'rgb', 'rgba') and `depth` bits becomes in `fmt`: the written mode, depth
    and a note for each thing the format cannot hold (decided here for the per-image line and the encoder)."""
    notes = []
    if depth > 8 and fmt not in DEPTH16:
        depth = 8
        notes.append(f"16-bit written as 8-bit ({fmt} holds 8-bit samples)")
    if mode == "rgba" and fmt not in ALPHA:
        mode = "rgb"
        notes.append(f"alpha dropped ({fmt} has no alpha channel)")
    return mode, depth, notes


def convert_for_format(pixels: np.ndarray, fmt: str) -> tuple[np.ndarray, list[str]]:
    """Fit an output buffer to what the format can hold; returns notes for what was dropped."""
    mode = "rgba" if pixels.ndim == 3 and pixels.shape[2] == 4 else "rgb"
    _, depth, notes = written_layout(mode, 16 if pixels.dtype == np.uint16 else 8, fmt)
    if depth == 8:
        pixels = to_8bit(pixels)
    if mode == "rgba" and fmt not in ALPHA:
        pixels = pixels[:, :, :3]
    return pixels, notes


def encode(pixels: np.ndarray, fmt: str, jpeg_quality: int = 95, meta: Metadata = metadata.NONE) -> bytes:
    """The file's bytes, carrying `meta` where the format holds it (PNG, JPEG, WebP)."""
    if fmt == "png":  # our own writer: a third of OpenCV's CPU (pipeline.images.png)
        try:
            return png.encode_png(pixels, chunks=metadata.png_chunks(meta))
        except ValueError as e:
            raise ImageError(f"cannot encode png: {e}") from None
    data = _cv2_encode(pixels, fmt, jpeg_quality)
    if meta and fmt == "jpg":
        return metadata.embed_jpeg(data, meta)
    if meta and fmt == "webp":
        return metadata.embed_webp(data, meta, pixels.shape[1], pixels.shape[0], pixels.ndim == 3 and
                                   pixels.shape[2] == 4)
    return data


def _cv2_encode(pixels: np.ndarray, fmt: str, jpeg_quality: int) -> bytes:
    ext = FORMAT_EXT[fmt]
    params = []
    if fmt == "jpg":
        params = [cv2.IMWRITE_JPEG_QUALITY, int(jpeg_quality)]
    elif fmt == "webp":
        params = [cv2.IMWRITE_WEBP_QUALITY, int(jpeg_quality)]
    try:
        ok, buf = cv2.imencode(ext, np.ascontiguousarray(pixels), params)
    except cv2.error as e:
        raise ImageError(f"cannot encode {fmt}: {_cv2_reason(e)}") from None
    if not ok:
        raise ImageError(f"cannot encode {fmt}")
    return buf.tobytes()


def write_image(path: Path, pixels: np.ndarray, fmt: str, jpeg_quality: int = 95,
                meta: Metadata = metadata.NONE) -> list[str]:
    """Write an output atomically with the input's metadata `meta` where the format holds it (what it does not
    hold: metadata.dropped, in the image's plan); the notes say what the format did not keep of the pixels."""
    pixels, notes = convert_for_format(pixels, fmt)
    atomic_write(path, encode(pixels, fmt, jpeg_quality, meta))
    return notes
