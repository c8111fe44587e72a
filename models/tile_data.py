"""What tiles of a model need, measured once (scripts/measure_tiles.py, `make tile-data`) and stored beside the
weights (models/weights/tiles.json, with how, when and where each figure was measured). Torch-free.

- overlap: the context (input pixels) at which tiles agree with the whole image on the written 8-bit output within
  the model's rule (RRDBNet: >= 99.9 % identical, none more than 1 level apart); None where the exact margin (the
  receptive field, ModelSpec.receptive_radius) is kept.
- memory: peak resident bytes per input pixel of one tile, per backend/precision.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path

from models.spec import WEIGHTS_DIR

DATA_FILE = WEIGHTS_DIR / "tiles.json"


@functools.cache
def _data(path: Path = DATA_FILE) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):  # not measured (or unreadable): every model keeps its exact margin and estimate
        return {}


def overlap_lr(model: str) -> int | None:
    """The measured context (input pixels) tiles of `model` take, or None (the exact margin)."""
    value = _data().get("overlap", {}).get(model, {}).get("context_lr")
    return int(value) if value is not None else None


def overlap_rule(model: str) -> str:
    """What the stored overlap promises, in words ('' without one)."""
    row = _data().get("overlap", {}).get(model, {})
    if row.get("context_lr") is None:
        return ""
    return (f"{row['context_lr']} input px measured: >= {100 * row['min_identical']:g} % of 8-bit values identical "
            f"to the whole image, none more than {row['max_diff']} level apart")


def bytes_per_input_pixel(model: str, backend: str, precision: str) -> float | None:
    """Peak bytes per input pixel of one tile of `model` on `backend` at `precision`: the measured figure, else the
    largest measured for the model on any backend (a runtime's own cost is of the same order), else None."""
    rows = _data().get("memory", {}).get(model, {})
    row = rows.get(f"{backend}/{precision}")
    if row is not None:
        return float(row["bytes_per_input_pixel"])
    values = [float(r["bytes_per_input_pixel"]) for r in rows.values()]
    return max(values) if values else None
