"""The `sr` model of a Triton repository: a Python-backend model (REPO/sr/config.pbtxt + 1/model.py) that runs the
sr stage on the torch-free runtime (pipeline.serve.sr_service) over the plain model's own file: ONNX Runtime on
the repository's ONNX file, or TensorRT on the engine (copied beside model.py with its sidecar). Images in, images
out; the tensors are pipeline.serve.tensors. Its Python environment is named in the config (EXECUTION_ENV_PATH)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from pipeline.artifacts.atomic import atomic_path, atomic_write
from pipeline.artifacts.confine import safe_component
from pipeline.backends import backend_class
from pipeline.engine import sidecar_path
from pipeline.errors import PipelineError
from pipeline.serve import protocol
from pipeline.serve.pbtxt import Enum, dumps
from pipeline.serve.tensors import INPUTS, OUTPUTS
from pipeline.serve.triton_config import QUEUE_DELAY_US

SR_MAX_BATCH = 8       # images the dynamic batcher gathers into one execution (equal sizes run as one batch)
ADAPTER = Path(__file__).with_name("python_model") / "model.py"


def _copy(src: Path, dst: Path) -> None:
    with atomic_path(dst) as tmp:
        shutil.copyfile(src, tmp)


def sr_config(name: str, *, model_file: str, backend: str, env: str | None, instances: int, kind: str,
              max_batch: int = SR_MAX_BATCH, parameters: dict[str, str] | None = None) -> tuple[str, dict]:
    params = {protocol.MODEL_FILE: model_file, protocol.BACKEND: backend, **(parameters or {})}
    if env:
        params["EXECUTION_ENV_PATH"] = env
    config = {
        "name": name,
        "backend": "python",
        "max_batch_size": max_batch,
        "input": [{"name": k, "data_type": Enum(t), "dims": dims, "optional": True} for k, (t, dims) in INPUTS.items()],
        "output": [{"name": k, "data_type": Enum(t), "dims": dims} for k, (t, dims) in OUTPUTS.items()],
        # equal shapes batch (image bytes always do; the model then runs equal image sizes as one batch)
        "dynamic_batching": {"max_queue_delay_microseconds": QUEUE_DELAY_US},
        "instance_group": [{"count": instances, "kind": Enum(f"KIND_{kind.upper()}")}],
        "parameters": [{"key": k, "value": {"string_value": v}} for k, v in params.items()],
    }
    return dumps(config), config


def write_sr_model(repo: Path, plain_model_file: Path, *, name: str = protocol.SR_MODEL, backend: str,
                   env: str | None, instances: int = 1, kind: str = "cpu",
                   parameters: dict[str, str] | None = None) -> Path:
    """Write REPO/<name>/ next to the plain model whose file is `plain_model_file` (`backend`'s artifact: the sr model
    runs it on that backend); returns its config file."""
    name = safe_component(name, "--sr-name")
    model_dir = Path(repo) / name
    if model_dir.resolve() == plain_model_file.parent.parent.resolve():
        raise PipelineError(f"the sr model's name '{name}' is the plain model's; give the plain model another --name")
    version = model_dir / "1"
    if backend_class(backend).DESCRIPTOR.runs_engines:  # it reads the sidecar beside the engine (profiles, plugins)
        model_file = version / "model.engine"
        _copy(plain_model_file, model_file)
        _copy(sidecar_path(plain_model_file), sidecar_path(model_file))
        rel = "1/model.engine"
    else:  # the plain model's file (and the external data beside it), not a second copy
        rel = os.path.relpath(plain_model_file, model_dir)
    text, _ = sr_config(name, model_file=rel, backend=backend, env=env, instances=instances, kind=kind,
                        parameters=parameters)
    _copy(ADAPTER, version / "model.py")
    atomic_write(model_dir / "config.pbtxt", text)
    return model_dir / "config.pbtxt"
