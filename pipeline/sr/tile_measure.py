"""Measuring what tiles need, once per model (`make tile-data`, scripts/measure_tiles.py; stored in
models/weights/tiles.json, read by models.tile_data):

- the overlap: the smallest context (input pixels) at which tiles planned by pipeline.images.tiling agree with
  the whole image on the written 8-bit output, on real photos at several tile sizes. RRDBNet's exact margin (349
  input pixels at 23 blocks) is larger than most images; its influence past a few dozen pixels is below one level.
- the memory model: the peak resident bytes per input pixel of one tile, per model x backend x precision: what one
  call adds to a fresh process's resident memory at its peak (VmHWM after resetting it, over VmRSS before), at two
  crop sizes (the slope, or the larger crop's peak per pixel if that is more), so the model's load does not count.
"""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict, dataclass

import numpy as np

from pipeline.backends.base import Backend
from pipeline.backends.pixels import quantize
from pipeline.images import tiling


@dataclass(frozen=True)
class Agreement:
    """Interior tiles against the whole image on one photo: the share of identical 8-bit samples in their kept
    regions and the largest gap."""

    image: str
    tile: int
    context_lr: int
    tiles: int
    identical: float
    max_diff: int

    def within(self, min_identical: float, max_diff: int) -> bool:
        return self.tiles > 0 and self.identical >= min_identical and self.max_diff <= max_diff


def _written(y: np.ndarray) -> np.ndarray:
    """A CHW float output as the 8-bit samples sr writes."""
    return quantize(np.asarray(y, dtype=np.float32), 8).astype(np.int16)


def interior_tiles(tile_plan: tiling.TilePlan, most: int = 2) -> list[tiling.Tile]:
    """The middle `most` tiles whose crops lie inside the image on every tiled axis: cut on both sides, the worst
    case (an edge tile's outer side is the whole image's border too)."""
    def inside(s: tiling.Span, length: int, spans: int) -> bool:
        return spans == 1 or (s.crop0 > 0 and s.crop1 < length)

    inner = [t for t in tile_plan.tiles if inside(t.y, tile_plan.height, len(tile_plan.ys))
             and inside(t.x, tile_plan.width, len(tile_plan.xs))]
    start = max(0, (len(inner) - most) // 2)
    return inner[start:start + most]


def agreement(backend: Backend, name: str, rgb: np.ndarray, scale: float, tile: int, context_lr: int,
              whole: np.ndarray, native_scale: float, most: int = 2) -> Agreement:
    """Run the interior tiles of `rgb` (HWC uint8) in tiles of `tile` input pixels with `context_lr` of context,
    the margin the run would take (tiling.measured_margin), and compare their written samples with `whole`'s (the
    whole-image output). No interior tile (the context reaches past the image): 0 tiles, which never passes."""
    x = rgb.transpose(2, 0, 1).astype(np.float32) / 255
    tile_plan = tiling.plan(x.shape[1], x.shape[2], scale, tile, tiling.measured_margin(context_lr, native_scale,
                                                                                       scale))
    tiles = interior_tiles(tile_plan, most) if tile_plan.count > 1 else []
    same, total, worst = 0, 0, 0
    for t in tiles:
        y = backend.infer(x[None, :, t.y.crop0:t.y.crop1, t.x.crop0:t.x.crop1], scale)[0]
        kept = (slice(None), slice(t.y.keep0, t.y.keep1), slice(t.x.keep0, t.x.keep1))
        diff = np.abs(_written(y[(slice(None), *t.keep_slices())]) - _written(whole[kept]))
        same, total, worst = same + int((diff == 0).sum()), total + diff.size, max(worst, int(diff.max()))
    return Agreement(name, tile, context_lr, len(tiles), same / total if total else 0.0, worst)


def smallest_context(backend: Backend, images: dict[str, np.ndarray], scale: float, tiles: list[int],
                     contexts: list[int], min_identical: float, max_diff: int, native_scale: float,
                     log=print, most: int = 2) -> tuple[int | None, list[Agreement]]:
    """The smallest of `contexts` (ascending) at which every image at every tile size is within the criterion,
    found by doubling then bisection (agreement grows with context), and every agreement measured; None when the
    largest fails."""
    wholes = {n: backend.infer(im.transpose(2, 0, 1)[None].astype(np.float32) / 255, scale)[0]
              for n, im in images.items()}
    seen: list[Agreement] = []

    def passes(c: int) -> bool:
        for n, im in images.items():
            for t in tiles:
                a = agreement(backend, n, im, scale, t, c, wholes[n], native_scale, most)
                seen.append(a)
                log(f"  {n} {im.shape[1]}x{im.shape[0]} tile {t} context {c}: {a.tiles} tiles, "
                    f"{100 * a.identical:.3f} % identical, max diff {a.max_diff}")
                if not a.within(min_identical, max_diff):
                    return False
        return True

    lo, hi = -1, 0  # contexts[lo] fails (-1: none tried); climb by doubling until contexts[hi] passes
    while not passes(contexts[hi]):
        if hi == len(contexts) - 1:
            return None, seen
        lo, hi = hi, min(2 * hi + 1, len(contexts) - 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if passes(contexts[mid]):
            hi = mid
        else:
            lo = mid
    return contexts[hi], seen


# The child that measures one call's peak: load the backend, run a small crop (lazy set-up), reset the peak RSS
# (Linux: /proc/self/clear_refs), run one crop of `side` input pixels square and print the peak over the RSS before it.
_CHILD = """
import json, sys
import numpy as np
from pipeline.backends import create
def kb(key):
    return next(int(ln.split()[1]) for ln in open("/proc/self/status") if ln.startswith(key)) * 1024
a = json.loads(sys.argv[1])
b = create(a["backend"], a["model"], a["precision"], scale=a["scale"], threads=a["threads"])
rng = np.random.default_rng(0)
b.infer(rng.random((1, 3, 16, 16), dtype=np.float32), a["scale"])
x = rng.random((1, 3, a["side"], a["side"]), dtype=np.float32)
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
before = kb("VmRSS:")
b.infer(x, a["scale"])
print(kb("VmHWM:") - before)
"""


def call_peak(model: str, backend: str, precision: str, side: int, scale: float, threads: int = 2) -> int:
    """Peak resident bytes one side x side call adds, in a fresh process that loaded the backend."""
    arg = json.dumps({"model": model, "backend": backend, "precision": precision, "side": side, "scale": scale,
                      "threads": threads})
    done = subprocess.run([sys.executable, "-c", _CHILD, arg], capture_output=True, text=True, check=True)
    return int(done.stdout.split()[-1])


def bytes_per_input_pixel(model: str, backend: str, precision: str, sides: tuple[int, int], scale: float,
                          threads: int = 2) -> dict:
    """Peak bytes per input pixel of one call: the larger of the slope of the call's peak between two crop sides
    and the larger side's peak over its pixels (so a runtime's scratch that does not grow with the crop is counted
    too), with both peaks. A backend that builds a file (an ONNX export) builds it first, in an uncounted run."""
    call_peak(model, backend, precision, sides[0], scale, threads)
    lo, hi = (call_peak(model, backend, precision, s, scale, threads) for s in sides)
    slope = (hi - lo) / (sides[1] ** 2 - sides[0] ** 2)
    return {"bytes_per_input_pixel": round(max(slope, hi / sides[1] ** 2)), "sides": list(sides),
            "call_peak": [lo, hi]}


def as_rows(seen: list[Agreement]) -> list[dict]:
    return [asdict(a) | {"identical": round(a.identical, 6)} for a in seen]
