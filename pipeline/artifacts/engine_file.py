"""Where an engine's JSON sidecar lives and reading it: what the runtime and the resolver need from an engine
file without TensorRT (pipeline.engine.sidecar writes sidecars and judges whether an engine is fresh)."""
from __future__ import annotations

import json
from pathlib import Path


def sidecar_path(engine: Path) -> Path:
    return Path(str(engine) + ".json")


def read_sidecar(engine: Path) -> dict | None:
    try:
        return json.loads(sidecar_path(engine).read_text())
    except (OSError, ValueError):
        return None
