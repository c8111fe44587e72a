"""An engine's JSON sidecar: where it lives and reading it, strictly (a file a user gave is never trusted blindly).
What the runtime and the model resolver need from an engine file without TensorRT; pipeline.engine.sidecar writes
sidecars and judges whether an engine is fresh."""
from __future__ import annotations

import json
from pathlib import Path

from pipeline.artifacts.confine import regular_file_problem, sibling
from pipeline.errors import PipelineError, first_line


def sidecar_path(engine: Path) -> Path:
    return Path(str(engine) + ".json")


def sidecar_problem(engine: Path) -> tuple[dict | None, str | None]:
    """(sidecar, None), or (None, why it cannot be used): missing, not a regular file, not JSON, not an object,
    `onnx_metadata` not an object of strings."""
    path = sidecar_path(engine)
    problem = regular_file_problem(path)
    if problem:
        return None, "is missing" if problem == "does not exist" else problem
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as e:
        return None, f"cannot be read ({getattr(e, 'strerror', None) or first_line(e)})"
    except ValueError as e:
        return None, f"is not valid JSON ({first_line(e)})"
    if not isinstance(data, dict):
        return None, f"is not a JSON object (its top level is a {type(data).__name__})"
    meta = data.get("onnx_metadata")
    if meta is not None and not (isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())):
        return None, "has an 'onnx_metadata' that is not an object of strings"
    for key in ("onnx", "model"):
        if not isinstance(data.get(key, ""), str):
            return None, f"has a '{key}' field that is not a string"
    return data, None


def read_sidecar(engine: Path) -> dict | None:
    """The sidecar, or None when it is missing or malformed (staleness checks then rebuild the engine)."""
    return sidecar_problem(engine)[0]


def load_sidecar(engine: Path) -> dict:
    """The sidecar of an engine a user gave; one PipelineError line naming the sidecar and what is wrong."""
    data, problem = sidecar_problem(engine)
    if problem:
        raise PipelineError(f"engine sidecar {sidecar_path(engine)} {problem}; build engines with "
                            "`python -m pipeline engine`, which writes it")
    return data


def sidecar_onnx(engine: Path, sidecar: dict) -> Path | None:
    """The ONNX file the engine was built from, when it lies in the engine's own folder (a plain name there, or
    a path into that folder); a path anywhere else is not followed (None: the sidecar itself says enough)."""
    value = sidecar.get("onnx") or ""
    if not isinstance(value, str) or not value:
        return None
    named = Path(value)
    here = Path(engine).parent
    if len(named.parts) > 1:
        if named.is_absolute() and named.parent.resolve() == here.resolve() and ".." not in named.parts:
            value = named.name
        else:
            return None
    return sibling(Path(engine), value, "ONNX file (sidecar 'onnx')", missing_ok=True)
