"""Which model is this? The one answer every command, stage and backend asks for.

    resolve(model=None, onnx=None, engine=None, weights=None) -> ModelSpec

An engine's sidecar or an ONNX file's metadata names the model it holds (a registered name gives the registered
spec, anything else the spec the file carries); `model`, when also given, must be that model. Without a file,
`model` is a registered name, a checkpoint path or a package.module:factory (models.lookup). Every failure is one
PipelineError line. Nothing here imports PyTorch unless `model` is a user's checkpoint or factory, which must be
loaded to be known.
"""
from __future__ import annotations

from pathlib import Path

from models.lookup import get_spec
from models.spec import MODELS, ModelError, ModelSpec, weights_path
from pipeline.artifacts.engine_file import load_sidecar
from pipeline.artifacts.onnx_file import onnx_metadata, path_or_file, registered_name_problem
from pipeline.errors import PipelineError

__all__ = ["resolve", "check_weights"]


def resolve(model: str | None = None, onnx: str | Path | None = None, engine: str | Path | None = None,
            weights: str | Path | None = None) -> ModelSpec:
    """The model `engine` (else `onnx`) holds, checked against `model` when that is given too; else the model
    `model` names, None meaning "not given". `weights`, for a model named without a file, must be a weights
    file the model can use (a user's checkpoint or factory brings its own)."""
    if engine is not None:
        return _from_engine(Path(engine), model)
    if onnx is not None:
        return _from_onnx(path_or_file(onnx), model)
    if model is None:
        raise PipelineError("no model given: name one with --model, or pass an --onnx or --engine file")
    try:
        spec = get_spec(model)
    except ModelError as e:
        raise PipelineError(str(e)) from None
    if weights is not None:
        check_weights(spec, weights)
    return spec


def check_weights(spec: ModelSpec, weights: str | Path | None = None) -> Path:
    """The weights file building `spec` from PyTorch reads (`weights` or the shipped one), or one PipelineError
    line: missing, a folder, the model runs only from its exported file, or a user's model given --weights."""
    if not spec.registered:
        raise PipelineError(f"model '{spec.name}' is not registered here, so it runs only from its ONNX file")
    if spec.external is not None:
        if weights is not None and Path(weights).resolve() != spec.weights_path.resolve():
            raise PipelineError(f"--weights does not apply to {spec.name}: a checkpoint or factory brings its own "
                                "weights")
        return spec.weights_path
    try:
        return weights_path(spec, weights)
    except ModelError as e:
        raise PipelineError(str(e)) from None


def _held(what: str, meta: dict[str, str], model: str | None, verb: str) -> ModelSpec:
    """The spec a file's metadata describes; `model` (if given) must be the model it names."""
    name = meta.get("model")
    if model is not None and name is not None and name != model:
        raise PipelineError(f"{what} was {verb} for model '{name}', not '{model}' (leave out --model to use the "
                            "file's)")
    if isinstance(name, str) and name in MODELS:
        problem = registered_name_problem(meta)  # the name of one of ours on another model's weights and contract
        if problem:
            raise PipelineError(f"{what}: {problem}")
        return MODELS[name]
    try:
        return ModelSpec.from_metadata(meta)
    except (KeyError, ValueError) as e:
        raise PipelineError(f"{what} does not say which model it holds (metadata field {e} missing or bad); "
                            "export it again with `python -m pipeline export`") from None


def _from_onnx(path, model: str | None) -> ModelSpec:
    return _held(str(path), onnx_metadata(path), model, "exported")


def _from_engine(engine: Path, model: str | None) -> ModelSpec:
    """From the sidecar (a missing or malformed one is an error), which carries the ONNX file's metadata (engines
    built before it: the model name)."""
    sidecar = load_sidecar(engine)
    meta = sidecar.get("onnx_metadata") or {"model": sidecar.get("model")}
    if meta.get("model") in (None, "?"):
        if model is None:
            raise PipelineError(f"the sidecar of {engine.name} does not name its model; name it with --model or "
                                "rebuild the engine with `python -m pipeline engine`")
        return resolve(model)
    return _held(engine.name, meta, model, "built")
