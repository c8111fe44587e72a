"""Measure each Real-ESRGAN model's tile overlap and memory cost once, and store them (models/weights/tiles.json).

    python scripts/measure_tiles.py overlap [MODEL ...]   # `make tile-data` runs both
    python scripts/measure_tiles.py memory [MODEL ...]

Overlap: through the torch backend (fp32, the CPU's channels-last direct kernels, as `sr --backend torch` runs),
the middle interior tiles planned by pipeline.images.tiling on crops of held-out photos (cut on every side the
plan cuts: the worst case) against the whole crop, on the written 8-bit samples of their kept regions. RRDBNet: the
smallest context with >= 99.9 % identical and none more than 1 level apart, on squares (a tile cut on all four
sides). Compact: its exact margin is small and stays; the measurement checks that it gives 100 % identical (on
strips shorter than the tile: cut on two sides, which is all an exact margin needs).
Memory: what one call adds to a fresh process's peak RSS at two crop sides (pipeline.sr.tile_measure.call_peak).
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from models.registry import get_spec  # noqa: E402
from models.tile_data import DATA_FILE  # noqa: E402
from pipeline.backends import create  # noqa: E402
from pipeline.data.sample_images import load_rgb  # noqa: E402
from pipeline.sr import tile_measure  # noqa: E402

# name -> (architecture, criterion: min identical share, max level gap or None for "exact margin kept")
ARCH = {"realesrgan-x4plus": "rrdbnet", "realesrgan-x4plus-anime": "rrdbnet", "realesr-animevideov3": "compact"}
RULES = {"rrdbnet": (0.999, 1), "compact": (1.0, 0)}
# photo crops (photo, top, left, height, width), big enough for a tile cut on all four sides at the largest context
# tried: strips (tiles cut on two sides only) passed x4plus at 80 px, where a square's interior tile was 97.4 %
# identical, so RRDBNet is measured on squares, one interior tile each (the cost of a 23-block net on 2 cores)
STRIPS = {"realesrgan-x4plus": [("chelsea", 0, 100, 300, 300), ("astronaut", 100, 100, 300, 300)],
          "realesrgan-x4plus-anime": [("chelsea", 0, 100, 240, 240)],
          "realesr-animevideov3": [("astronaut", 180, 120, 12, 160), ("chelsea", 90, 100, 12, 160)]}
TILES = {"realesrgan-x4plus": [32], "realesrgan-x4plus-anime": [32], "realesr-animevideov3": [16, 32]}
INTERIOR = {"realesrgan-x4plus": 1, "realesrgan-x4plus-anime": 1, "realesr-animevideov3": 2}
# interior tiles of 32 reach 124 px on 300^2 squares, 92 on 240^2 (94: the exact margin, none)
CONTEXTS = {"realesrgan-x4plus": list(range(88, 121, 8)), "realesrgan-x4plus-anime": [*range(56, 93, 4), 94]}
MEMORY = {"realesrgan-x4plus": ([("torch", "fp32")], (24, 48)),
          "realesrgan-x4plus-anime": ([("torch", "fp32")], (32, 64)),
          "realesr-animevideov3": ([("torch", "fp32"), ("ort", "fp32"), ("openvino", "fp32")], (64, 128))}


def _where() -> str:
    """The machine and date: CPU model, cores, widest vector ISA (the kernels' summation order depends on it)."""
    info = Path("/proc/cpuinfo").read_text().splitlines()
    cpu = next((ln.split(":", 1)[1].strip() for ln in info if ln.startswith("model name")), platform.processor())
    flags = next((ln.split(":", 1)[1].split() for ln in info if ln.startswith("flags")), [])
    isa = "AVX-512" if "avx512f" in flags else "AVX2 only" if "avx2" in flags else "no AVX2"
    return f"{cpu} ({os.cpu_count()} cores, {isa}), {platform.machine()}, {datetime.date.today().isoformat()}"


def _load() -> dict:
    return json.loads(DATA_FILE.read_text()) if DATA_FILE.is_file() else {"overlap": {}, "memory": {}}


def _save(data: dict) -> None:
    tmp = DATA_FILE.with_name(DATA_FILE.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(DATA_FILE)


def overlap(name: str) -> dict:
    spec, arch = get_spec(name), ARCH[name]
    min_identical, max_diff = RULES[arch]
    images = {f"{p}[{y}:{y + h},{x}:{x + w}]": load_rgb(p)[y:y + h, x:x + w] for p, y, x, h, w in STRIPS[name]}
    backend = create("torch", name, "fp32", scale=spec.default_scale, threads=2)
    exact_lr = -(-spec.receptive_radius // int(spec.default_scale))
    contexts = [exact_lr] if arch == "compact" else CONTEXTS[name]
    print(f"{name}: {arch}, exact context {exact_lr} input px", flush=True)
    found, seen = tile_measure.smallest_context(backend, images, spec.default_scale, TILES[name], contexts,
                                                min_identical, max_diff, spec.default_scale, most=INTERIOR[name])
    return {"architecture": arch, "context_lr": None if arch == "compact" or found == exact_lr else found,
            "exact_lr": exact_lr, "verified_lr": found, "min_identical": min_identical, "max_diff": max_diff,
            "backend": "torch fp32, 2 threads", "measured": _where(), "runs": tile_measure.as_rows(seen)}


def memory(name: str) -> dict:
    spec = get_spec(name)
    pairs, sides = MEMORY[name]
    out = {}
    for backend, precision in pairs:
        row = tile_measure.bytes_per_input_pixel(name, backend, precision, sides, spec.default_scale)
        print(f"{name} {backend} {precision}: {row}", flush=True)
        out[f"{backend}/{precision}"] = row | {"measured": _where()}
    return out


def main(argv: list[str]) -> int:
    what, names = argv[0], argv[1:] or list(ARCH)
    for name in names:
        row = overlap(name) if what == "overlap" else memory(name)
        data = _load()  # read just before writing: the other half may be measured by another run meanwhile
        data[what][name] = row
        _save(data)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
