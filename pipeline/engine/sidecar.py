"""The JSON sidecar next to every engine, and whether an engine is fresh for this machine and ONNX file."""
from __future__ import annotations

import json
import time
from pathlib import Path

from pipeline.artifacts.confine import regular_file_problem, sibling
from pipeline.engine.profiles import Profile
from pipeline.errors import PipelineError, first_line

SIDECAR_VERSION = 1


ENV_KEYS = ("tensorrt", "gpu", "compute_capability", "plugin_sha256")


def sidecar_path(engine: Path) -> Path:
    return Path(str(engine) + ".json")


def make_sidecar(env: dict, *, onnx_file: Path, onnx_sha256: str, model: str, precision: str, ops: str,
                 profiles: list[Profile], io: dict | None = None, build_seconds: float | None = None,
                 tf32: bool = False, workspace_mb: int | None = None) -> dict:
    return {
        "sidecar_version": SIDECAR_VERSION,
        **{k: env.get(k) for k in ("tensorrt", "cuda", "gpu", "compute_capability", "plugin_library", "plugin_sha256")},
        "onnx": str(onnx_file),
        "onnx_sha256": onnx_sha256,
        "model": model,
        "precision": precision,
        "tf32": bool(tf32),  # FP32 math may use TF32 (engine --tf32); off keeps FP32 engines FP32-accurate
        "workspace_mb": workspace_mb,
        "ops": ops,
        "profiles": [p.to_dict() for p in profiles],
        "io": io or {},
        "build_seconds": build_seconds,
        "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


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


def sidecar_problems(sidecar: dict | None, env: dict, onnx_sha256: str | None = None) -> list[str]:
    """Why an engine cannot be used on this machine (empty list = fresh). `env` = current_environment()."""
    if sidecar is None:
        return ["no readable sidecar (.engine.json), so its TensorRT/GPU/plugin build is unknown"]
    if sidecar.get("sidecar_version") != SIDECAR_VERSION:
        return [f"sidecar version {sidecar.get('sidecar_version')} != {SIDECAR_VERSION}"]
    problems = []
    names = {"tensorrt": "TensorRT", "gpu": "GPU", "compute_capability": "compute capability",
             "plugin_sha256": "plugin library"}
    for key in ENV_KEYS:
        if sidecar.get(key) != env.get(key):
            was, now = sidecar.get(key), env.get(key)
            if key == "plugin_sha256":
                was, now = (str(was)[:12], str(now)[:12])
            problems.append(f"{names[key]} {was} (built) != {now} (here)")
    if onnx_sha256 is not None and sidecar.get("onnx_sha256") != onnx_sha256:
        problems.append("the ONNX file changed since the build")
    return problems


def sidecar_profiles(sidecar: dict) -> list[Profile]:
    return [Profile.from_dict(p) for p in sidecar.get("profiles", [])]


def check_engine(engine: Path, env: dict, onnx_sha256: str | None = None) -> dict:
    """Sidecar of a usable engine, or PipelineError saying why it is stale/foreign and how to rebuild."""
    engine = Path(engine)
    if not engine.is_file():
        raise PipelineError(f"engine not found: {engine} (build it with `python -m pipeline engine` / `make engine`)")
    sidecar = read_sidecar(engine)
    problems = sidecar_problems(sidecar, env, onnx_sha256)
    if problems:
        onnx_file = (sidecar or {}).get("onnx", "MODEL.onnx")
        raise PipelineError(f"engine {engine.name} is stale or foreign: {'; '.join(problems)}; rebuild it with "
                            f"`python -m pipeline engine --onnx {onnx_file} --output {engine}`")
    return sidecar


def sidecar_tf32(sidecar: dict) -> bool:
    """Whether the engine may use TF32; sidecars from before the flag had TensorRT's default, TF32 on."""
    return bool(sidecar.get("tf32", True))


def plan_engine(engine: Path, env: dict, onnx_sha256: str, profiles: list[Profile], *,
                tf32: bool = False) -> tuple[str, str]:
    """What to do with a cached engine: ("use", why) / ("build", why) / ("rebuild", why). Pure logic."""
    if not Path(engine).is_file():
        return "build", "no engine yet"
    sidecar = read_sidecar(engine)
    problems = sidecar_problems(sidecar, env, onnx_sha256)
    if problems:
        return "rebuild", "; ".join(problems)
    if sidecar.get("profiles") != [p.to_dict() for p in profiles]:
        return "rebuild", "profiles changed"
    if sidecar_tf32(sidecar) != tf32:
        was, want = ("on" if v else "off" for v in (sidecar_tf32(sidecar), tf32))
        return "rebuild", f"built with TF32 {was}, wanted {want}"
    return "use", f"up to date (TensorRT {env.get('tensorrt')}, {env.get('gpu')})"

