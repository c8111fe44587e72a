"""The JSON sidecar next to every engine (reading it: pipeline.artifacts.engine_file), and whether an engine is
fresh for this machine and ONNX file."""
from __future__ import annotations

import time
from pathlib import Path

from pipeline.artifacts.engine_file import load_sidecar, read_sidecar, sidecar_onnx, sidecar_path, sidecar_problem
from pipeline.engine.precision import derivation
from pipeline.engine.profiles import Profile
from pipeline.errors import PipelineError
from pipeline.precisions import version

SIDECAR_VERSION = version("engine")  # the sidecar format (pipeline.precisions.ARTIFACTS)

__all__ = ["ENV_KEYS", "SIDECAR_VERSION", "check_engine", "load_sidecar", "make_sidecar", "plan_engine", "read_sidecar",
           "sidecar_onnx", "sidecar_path", "sidecar_problem", "sidecar_problems", "sidecar_profiles", "sidecar_tf32"]


ENV_KEYS = ("tensorrt", "gpu", "compute_capability", "plugin_sha256")


def make_sidecar(env: dict, *, onnx_file: Path, onnx_sha256: str, model: str, precision: str, ops: str,
                 profiles: list[Profile], io: dict | None = None, build_seconds: float | None = None,
                 tf32: bool = False, workspace_mb: int | None = None, derivation: str | None = None) -> dict:
    return {
        "sidecar_version": SIDECAR_VERSION,
        **{k: env.get(k) for k in ("tensorrt", "cuda", "gpu", "compute_capability", "plugin_library", "plugin_sha256")},
        "onnx": str(onnx_file),
        "onnx_sha256": onnx_sha256,
        "model": model,
        "precision": precision,
        "derivation": derivation,  # a bf16/int8 engine's graph, made from the fp32 file (pipeline.engine.precision)
        "tf32": bool(tf32),  # FP32 math may use TF32 (engine --tf32); off keeps FP32 engines FP32-accurate
        "workspace_mb": workspace_mb,
        "ops": ops,
        "profiles": [p.to_dict() for p in profiles],
        "io": io or {},
        "build_seconds": build_seconds,
        "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


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
                tf32: bool = False, precision: str | None = None) -> tuple[str, str]:
    """What to do with a cached engine: ("use", why) / ("build", why) / ("rebuild", why). Pure logic. precision:
    bf16/int8 for an engine derived from the fp32 file (None: the file's own)."""
    if not Path(engine).is_file():
        return "build", "no engine yet"
    sidecar = read_sidecar(engine)
    problems = sidecar_problems(sidecar, env, onnx_sha256)
    if problems:
        return "rebuild", "; ".join(problems)
    if sidecar.get("profiles") != [p.to_dict() for p in profiles]:
        return "rebuild", "profiles changed"
    if sidecar.get("derivation") != derivation(precision):  # its graph: the file as it is, or made from it
        was, want = (d or "the file as it is" for d in (sidecar.get("derivation"), derivation(precision)))
        return "rebuild", f"built from {was}, wanted {want}"
    if sidecar_tf32(sidecar) != tf32:
        was, want = ("on" if v else "off" for v in (sidecar_tf32(sidecar), tf32))
        return "rebuild", f"built with TF32 {was}, wanted {want}"
    return "use", f"up to date (TensorRT {env.get('tensorrt')}, {env.get('gpu')})"

