"""Tiled super-resolution that reproduces whole-image inference.

The models are `features(bicubic(x, size))`: a bicubic resize to the output size (half-pixel centres,
source step r = H_in / H_out) followed by convolutions with a finite receptive field. A tile is an LR
crop run through the model on its own; its output equals the whole-image output on the tile's interior
when
  1. the crop's sampling grid is the whole image's grid: the crop starts at an HR row Y0 whose source
     position Y0 * r is an integer (the LR row the crop starts at) and ends at such a row too, so the
     crop's own step c / round(c * scale) is exactly r, and
  2. the crop reaches `margin` HR pixels past the kept region on each side (receptive field + bicubic
     taps), so neither the crop's border clamping nor the convolutions' zero padding reaches it.
The kept regions then tile the output with no overlap and no seams (blending by cropping).

Integer scales align every `scale` HR pixels; a scale like 2.5 aligns every 5 HR pixels when the side
is even. When a side has no aligned rows near a cut (e.g. 2.5 on an odd side: r = 101/253), the crop
ends are placed at the rows whose source positions are closest to integers; the sampling grid is then
off by that distance (reported as `max_shift`, in LR pixels) and the result is close, not equal.
The planner works per axis; whole-image processing is the one-tile plan.
"""
from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from pipeline.backends.pixels import NonFiniteOutput
from pipeline.errors import PipelineError

# Approximate bytes of working memory per output pixel of one tile (float activations: 3 + 64 + 32 + 3
# channels, plus runtime scratch) -- used to derive a tile size from free memory.
BYTES_PER_OUTPUT_PIXEL = 1024


def context_margin(radius_hr: int, scale: float) -> int:
    """HR pixels a crop must extend past its kept region: the receptive field plus the bicubic taps
    (2 LR pixels on each side of the source position, i.e. about 2.5 * scale HR pixels), plus 2."""
    return int(radius_hr + math.ceil(2.5 * scale) + 2)


def measured_margin(context_lr: int, native_scale: float, scale: float) -> int:
    """HR margin for a measured context of `context_lr` input pixels at the net's own scale: the exact margin's form
    with that context as the receptive radius (what pipeline.sr.tile_measure measured through this function)."""
    return context_margin(math.ceil(context_lr * native_scale), scale)


def model_margin(radius_hr: int, scale: float, context_lr: int | None = None, native_scale: float = 1.0) -> int:
    """The HR margin tiles take: the exact one (receptive field), or a model's measured overlap (models.tile_data:
    RRDBNet, whose exact margin outgrows most images) where that is smaller."""
    exact = context_margin(radius_hr, scale)
    return exact if context_lr is None else min(exact, measured_margin(context_lr, native_scale, scale))


def output_length(n: int, scale: float) -> int:
    """1-D output size: models.registry.output_size (round half up, at least 1)."""
    return max(1, math.floor(n * scale + 0.5))


@dataclass(frozen=True)
class Span:
    """One tile along one axis. HR rows [keep0, keep1) are taken from the crop's output, which covers HR
    rows [out0, out0 + out_len) and comes from LR rows [crop0, crop1)."""

    keep0: int
    keep1: int
    crop0: int
    crop1: int
    out0: int
    out_len: int
    shift: float  # sampling-grid offset at the crop ends, LR pixels (0 = exact)


def _shift(y: int, length: int, out_length: int) -> float:
    """Distance of HR row y's source position y * L / Lo from the nearest integer, in LR pixels."""
    m = (y * length) % out_length
    return min(m, out_length - m) / out_length


def _lr_row(y: int, length: int, out_length: int) -> int:
    """Nearest LR row to HR row y's source position (round half up, exact integer math)."""
    return (2 * y * length + out_length) // (2 * out_length)


def _candidates(start: int, stop: int, step: int) -> Iterator[int]:
    y = start
    while (y - stop) * step <= 0:
        yield y
        y += step


def _best_end(target: int, limit: int, step: int, length: int, out_length: int, window: int) -> int:
    """Crop end at or beyond `target` (moving by `step` towards `limit`, the image edge) whose source
    position is closest to an LR row, within `window` HR pixels; the image edge itself is exact."""
    if (target - limit) * step >= 0:
        return limit
    far = target + step * window
    if (far - limit) * step > 0:
        far = limit
    best, best_err = target, math.inf
    for y in _candidates(target, far, step):
        err = 0.0 if y == limit else _shift(y, length, out_length)
        if err < best_err:
            best, best_err = y, err
            if err == 0.0:
                break
    return best


def search_window(scale: float) -> int:
    """How far (HR pixels) a crop end may move outwards to land on the whole image's sampling grid."""
    return 64 + 4 * math.ceil(scale)


def max_tile_for_input_limit(max_input: int, scale: float, margin: int) -> int:
    """Largest LR tile whose crops (tile + context + grid search on both sides) stay within `max_input`."""
    return max_input - 2 * math.ceil((margin + search_window(scale)) / scale) - 2


def plan_axis(length: int, scale: float, tile: int | None, margin: int, window: int | None = None,
              align: int = 1, max_crop: int | None = None) -> list[Span]:
    """Tiles along one axis of `length` LR pixels: kept HR regions of about `tile` * scale pixels. A sliver at
    the end is folded into the previous tile, unless that makes a crop longer than `max_crop` LR pixels (the
    largest input a backend admits, e.g. an engine's profile): then it stays a tile of its own."""
    out_length = output_length(length, scale)
    whole = Span(0, out_length, 0, length, 0, out_length, 0.0)
    if tile is None or tile >= length:
        return [whole]
    keep = max(1, round(tile * out_length / length))
    window = window if window is not None else search_window(scale)
    cuts = list(range(0, out_length, keep)) + [out_length]
    if len(cuts) > 2 and cuts[-1] - cuts[-2] < keep // 4:  # fold a sliver into the previous tile
        folded = _spans(cuts[:-2] + cuts[-1:], length, scale, margin, window, align)
        if max_crop is None or max(s.crop1 - s.crop0 for s in folded) <= max_crop:
            return _whole_if_no_saving(folded, whole, length)
    return _whole_if_no_saving(_spans(cuts, length, scale, margin, window, align), whole, length)


def _whole_if_no_saving(spans: list[Span], whole: Span, length: int) -> list[Span]:
    """The whole axis when every crop is the whole axis anyway (a context margin past the image: RRDBNet's reaches
    1,400 HR pixels): tiles would only run the same input again."""
    return [whole] if all(s.crop0 == 0 and s.crop1 == length for s in spans) else spans


def _spans(cuts: list[int], length: int, scale: float, margin: int, window: int, align: int) -> list[Span]:
    """The crops for kept HR regions [cuts[i], cuts[i + 1]); the whole axis when a crop cannot be placed."""
    out_length = output_length(length, scale)
    whole = Span(0, out_length, 0, length, 0, out_length, 0.0)
    spans = []
    for k0, k1 in zip(cuts[:-1], cuts[1:], strict=True):
        y0 = _best_end(k0 - margin, 0, -1, length, out_length, window)
        y1 = _best_end(k1 + margin, out_length, +1, length, out_length, window)
        c0, c1 = _lr_row(y0, length, out_length), _lr_row(y1, length, out_length)
        if c0 % align:  # window-attention nets: crops start on the window grid (tile_align)
            c0 -= c0 % align
            if (c0 * out_length) % length:
                return [whole]
            y0 = c0 * out_length // length
        # The backend sizes the crop's output as round(c * scale); it must be the HR extent we planned.
        if c1 <= c0 or output_length(c1 - c0, scale) != y1 - y0:
            return [whole]
        shift = max(_shift(y0, length, out_length), _shift(y1, length, out_length))
        spans.append(Span(k0, k1, c0, c1, y0, y1 - y0, shift))
    return spans


@dataclass(frozen=True)
class Tile:
    y: Span
    x: Span

    @property
    def crop_shape(self) -> tuple[int, int]:
        return self.y.crop1 - self.y.crop0, self.x.crop1 - self.x.crop0

    @property
    def out_shape(self) -> tuple[int, int]:
        return self.y.out_len, self.x.out_len

    def keep_slices(self) -> tuple[slice, slice]:
        """Where the kept region lies inside this crop's output."""
        return (slice(self.y.keep0 - self.y.out0, self.y.keep1 - self.y.out0),
                slice(self.x.keep0 - self.x.out0, self.x.keep1 - self.x.out0))


@dataclass(frozen=True)
class TilePlan:
    height: int
    width: int
    out_height: int
    out_width: int
    ys: tuple[Span, ...]
    xs: tuple[Span, ...]

    @property
    def tiles(self) -> list[Tile]:
        return [Tile(y, x) for y in self.ys for x in self.xs]

    @property
    def count(self) -> int:
        return len(self.ys) * len(self.xs)

    @property
    def whole(self) -> bool:
        return self.count == 1

    @property
    def max_shift(self) -> float:
        return max(s.shift for s in (*self.ys, *self.xs))

    @property
    def exact(self) -> bool:
        return self.max_shift == 0.0

    @property
    def max_crop_pixels(self) -> int:
        """Largest tile output (HR pixels): what bounds the float working memory."""
        return max(s.out_len for s in self.ys) * max(s.out_len for s in self.xs)


def plan(height: int, width: int, scale: float, tile: int | None, margin: int, window: int | None = None,
         align: int = 1, max_input: tuple[int, int] | None = None) -> TilePlan:
    """Tiles of an image; `max_input` (H, W): the largest crop the backend admits (None: any)."""
    max_h, max_w = max_input if max_input is not None else (None, None)
    ys = plan_axis(height, scale, tile, margin, window, align, max_h)
    xs = plan_axis(width, scale, tile, margin, window, align, max_w)
    return TilePlan(height, width, output_length(height, scale), output_length(width, scale), tuple(ys), tuple(xs))


def _available(available_bytes: int | None) -> int:
    """`available_bytes` when given, else the host's available memory now (4 GiB, a modest machine, without psutil)."""
    if available_bytes is not None:
        return available_bytes
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:  # psutil missing: assume a modest machine
        return 4 << 30


def auto_tile(scale: float, margin: int, batch: int = 1, available_bytes: int | None = None,
              cap_bytes: int | None = 1 << 30, bytes_per_pixel: float = BYTES_PER_OUTPUT_PIXEL,
              share: float = 0.25) -> int:
    """LR tile side whose crops (tile*scale + 2*margin HR pixels square) fit `share` of free memory (capped at
    `cap_bytes`, None = no cap), shared by `batch` tiles in flight, at `bytes_per_pixel` of working memory per
    output pixel. Host memory by default; a device backend passes its free memory and measured cost."""
    budget = int(_available(available_bytes) * share)
    if cap_bytes is not None:
        budget = min(budget, cap_bytes)
    budget //= max(1, batch)
    crop_side = math.isqrt(max(1, int(budget / max(bytes_per_pixel, 1.0))))
    keep_hr = max(crop_side - 2 * margin, 16)
    return max(8, int(keep_hr / scale))


HOST_SHARE = 0.5  # of available host memory that a model of known cost may take; the rest: buffers, other programs
# Host memory the tiles in flight may take, however much is free: free memory alone let a 4K frame run untiled
# (9 GB peak on a 2-core VM), more than a laptop has. Tiles equal the whole image, so the cap costs only a little
# recomputed margin. SRDEPLOY_TILE_MEMORY raises or lowers it.
TILE_MEMORY = 1 << 30
TILE_MEMORY_ENV = "SRDEPLOY_TILE_MEMORY"
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def tile_memory() -> int:
    """The host memory budget of the tiles in flight: SRDEPLOY_TILE_MEMORY (bytes, or with K, M, G: 512M, 2G),
    else TILE_MEMORY; a bad value is one PipelineError line."""
    raw = os.environ.get(TILE_MEMORY_ENV, "").strip()
    if not raw:
        return TILE_MEMORY
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?", raw, re.IGNORECASE)
    value = int(float(m[1]) * _UNITS[m[2].lower()]) if m else 0
    if value < 16 << 20:
        raise PipelineError(f"{TILE_MEMORY_ENV}={raw!r} is not a memory size of at least 16M "
                            f"(bytes, or with K, M or G: 512M, 2G)")
    return value


def host_tile(scale: float, margin: int, batch: int = 1, bytes_per_pixel: float | None = None,
              available_bytes: int | None = None, budget: int | None = None) -> int:
    """LR tile side on the host: half of the available memory at the model's measured cost, at most the tile
    memory budget (`budget`, default tile_memory(); whole images whenever they fit in both); a model of unknown
    cost (None: a user's) at the generic estimate, a quarter of the available memory, at most 1 GiB."""
    budget = tile_memory() if budget is None else budget
    if bytes_per_pixel is None:
        return auto_tile(scale, margin, batch, available_bytes, cap_bytes=min(1 << 30, budget))
    return auto_tile(scale, margin, batch, available_bytes, cap_bytes=budget, bytes_per_pixel=bytes_per_pixel,
                     share=HOST_SHARE)


def crop_input_pixels(tile: int, margin: int, scale: float) -> int:
    """Input pixels of a square crop: the tile plus the context on both sides (margin HR pixels each)."""
    side = tile + 2 * math.ceil(margin / scale)
    return side * side


def measured_tile(scale: float, margin: int, bytes_per_input_pixel: float, budget: int, batch: int = 1) -> int:
    """The largest LR tile side whose crops (`batch` in flight) fit `budget` bytes at a model's measured peak
    per input pixel (models.tile_data's memory model); at least 8."""
    context = math.ceil(margin / scale)
    side = math.isqrt(max(1, int(budget / max(batch, 1) / max(bytes_per_input_pixel, 1.0))))
    return max(8, side - 2 * context)


def host_budget(available_bytes: int | None = None, cap: int | None = None) -> int:
    """Host memory the tiles in flight may take: HOST_SHARE of the available memory, at most the tile memory
    budget (SRDEPLOY_TILE_MEMORY)."""
    return min(int(_available(available_bytes) * HOST_SHARE), tile_memory() if cap is None else cap)


def run_tiles(tile_plan: TilePlan, read: Callable[[int, int, int, int], np.ndarray],
              infer: Callable[[np.ndarray], np.ndarray | Callable[[], np.ndarray]],
              write: Callable[[Tile, np.ndarray], None], batch: int = 1) -> None:
    """Run every tile: read(y0, y1, x0, x1) -> CHW LR crop; infer(NCHW) -> NCHW, or a callable returning it
    later (a submitted batch: the next batch is read and submitted before this one is collected, so a device
    works while the host reads and writes); write(tile, CHW output of the whole crop). Tiles with equal crop
    shapes are batched up to `batch`."""
    groups: dict[tuple[int, int], list[Tile]] = {}
    for t in tile_plan.tiles:
        groups.setdefault(t.crop_shape, []).append(t)
    step = max(1, batch)
    pending = None
    for tiles in groups.values():
        for i in range(0, len(tiles), step):
            chunk = tiles[i:i + step]
            submitted = (chunk, infer(np.stack([read(t.y.crop0, t.y.crop1, t.x.crop0, t.x.crop1) for t in chunk])))
            if pending is not None:
                _collect(*pending, write, tile_plan)
            pending = submitted
    if pending is not None:
        _collect(*pending, write, tile_plan)


def tile_place(t: Tile, tile_plan: TilePlan) -> str:
    """Where a tile is, in words ('tile 2 of 6 (output rows 0-95, columns 96-191)'; the whole image's one tile)."""
    if tile_plan.whole:
        return "the whole image"
    return (f"tile {tile_plan.tiles.index(t) + 1} of {tile_plan.count} (output rows {t.y.keep0}-{t.y.keep1 - 1}, "
            f"columns {t.x.keep0}-{t.x.keep1 - 1})")


def _collect(chunk: list[Tile], y, write: Callable[[Tile, np.ndarray], None], tile_plan: TilePlan) -> None:
    try:
        y = y() if callable(y) else y
    except NonFiniteOutput as e:  # name the tiles whose output was not finite
        e.place = "; ".join(tile_place(chunk[i], tile_plan) for i in e.affected)
        raise
    for t, out in zip(chunk, y, strict=True):
        if tuple(out.shape[-2:]) != t.out_shape:
            raise RuntimeError(f"backend returned {tuple(out.shape[-2:])} for a crop of "
                               f"{t.crop_shape}, expected {t.out_shape}")
        write(t, out)
