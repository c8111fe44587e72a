"""Triton model configuration for an exported sr model: its inputs and outputs (from the ONNX graph or the
engine's sidecar), batching within the engine's profiles, a dynamic batcher, an instance group, and the model
card facts as parameters.

Batching: Triton batches along a leading dimension it adds to *every* input. The run-time-factor models take
`size` = (H_out, W_out) with no batch dimension (and TensorRT's backend would prepend the batch size to a
batched shape tensor, giving 3 values to a 2-value input), so those configs say max_batch_size 0 and carry the
batch in `input`'s own first dimension (-1, up to the profile's maximum per request); the dynamic batcher then
only queues requests for the instances. Fixed-factor models (only `input`) let Triton batch up to the profile."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from models.spec import ModelSpec
from pipeline.backends import Descriptor, descriptors
from pipeline.engine.profiles import Profile
from pipeline.errors import PipelineError, check_choice
from pipeline.serve import protocol
from pipeline.serve.pbtxt import Enum, dumps

# ONNX TensorProto element type -> Triton data type
ONNX_TO_TRITON = {1: "FP32", 10: "FP16", 11: "FP64", 6: "INT32", 7: "INT64", 9: "BOOL", 2: "UINT8"}
# The backends a plain Triton model can be written for: those whose descriptor names the Triton platform serving
# their artifact (trt: TensorRT, ort: ONNX Runtime)
SERVED: dict[str, Descriptor] = {d.name: d for d in descriptors() if d.triton}


@dataclass(frozen=True)
class Platform:
    """What Triton's repository format says of one of its platforms."""

    model_file: str          # the model's file name in a version folder
    shape_tensors: bool      # inputs read on the host as shape tensors are declared so (TensorRT's)


PLATFORMS = {"tensorrt": Platform("model.plan", shape_tensors=True),
             "onnxruntime": Platform("model.onnx", shape_tensors=False)}
SHAPE_TENSOR_INPUTS = ("size",)  # the shape tensors of a platform that reads them (contract: DynamicResize's `size`)
QUEUE_DELAY_US = 100  # how long the batcher waits to fill a batch: small next to one image's inference


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: str                # Triton data type without the TYPE_ prefix: FP32, INT64, ...
    dims: tuple[int, ...]     # -1 = dynamic, batch dimension included

    @property
    def batched(self) -> bool:
        """Whether the first dimension is a dynamic batch dimension Triton can own."""
        return len(self.dims) > 1 and self.dims[0] == -1


@dataclass(frozen=True)
class ModelIO:
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    @property
    def triton_batchable(self) -> bool:
        return all(t.batched for t in self.inputs + self.outputs)


def _tensor(value_info) -> TensorSpec:
    t = value_info.type.tensor_type
    if t.elem_type not in ONNX_TO_TRITON:
        raise PipelineError(f"ONNX tensor '{value_info.name}' has element type {t.elem_type}, which Triton "
                            "configs here do not map")
    dims = tuple(d.dim_value if d.dim_value > 0 else -1 for d in t.shape.dim)
    return TensorSpec(value_info.name, ONNX_TO_TRITON[t.elem_type], dims)


def io_from_onnx(model) -> ModelIO:
    """Inputs and outputs of an ONNX ModelProto, symbolic dimensions as -1."""
    return ModelIO(tuple(_tensor(v) for v in model.graph.input), tuple(_tensor(v) for v in model.graph.output))


def io_from_sidecar(sidecar: dict) -> ModelIO:
    """The engine's I/O when its ONNX file is not at hand: the layout pipeline.export writes (image `input`
    NCHW, optional `size` int64[2] or `scale` float[2], image `output`), input names from the sidecar."""
    io = sidecar.get("io") or {}
    names = io.get("inputs") or (["input", "size"] if io.get("has_size_input") else ["input"])
    image_type = "FP16" if io.get("io_dtype") == "fp16" else "FP32"
    known = {"input": (image_type, (-1, 3, -1, -1)), "size": ("INT64", (2,)), "scale": ("FP32", (2,))}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise PipelineError(f"engine sidecar lists inputs {unknown} this pipeline does not export; "
                            "give the engine's ONNX file with --onnx")
    inputs = tuple(TensorSpec(n, *known[n]) for n in sorted(names, key=["input", "size", "scale"].index))
    return ModelIO(inputs, (TensorSpec("output", image_type, (-1, 3, -1, -1)),))


def profile_max_batch(profiles: list[Profile]) -> int:
    """Largest B such that every batch size 1..B fits some profile (what Triton may send)."""
    best = 0
    while any(p.batch[0] <= best + 1 <= p.batch[2] for p in profiles):
        best += 1
    if best == 0:
        raise PipelineError("the engine's profiles do not admit batch size 1; rebuild it with --batch 1,1,N")
    return best


def card_parameters(spec: ModelSpec, weights: str | Path | None, meta: dict[str, str]) -> dict[str, str]:
    """Model card facts (models/weights/<name>.json, or the card next to --weights) and export metadata,
    as Triton string parameters. A model known only from its file's metadata has no card here."""
    params = {protocol.MODEL: spec.name, "description": spec.description,
              **protocol.scale_parameters(spec.default_scale, *spec.scale_range)}
    card_file = Path(weights) if weights else spec.weights_path if spec.registered else None
    try:
        card = json.loads(card_file.with_suffix(".json").read_text()) if card_file else {}
    except (OSError, ValueError):
        card = {}
    for key in ("weights_sha256", "parameters"):
        if key in card:
            params[key] = str(card[key])
    for scale, ev in sorted((card.get("evaluation") or {}).get("scales", {}).items()):
        if "psnr_gain_db" in ev:
            params[f"psnr_gain_db_x{scale}"] = f"{ev['psnr_gain_db']:.3f}"
    for key in ("precision", "io_dtype", "ops", "exporter", "opset", "sr_op_versions"):
        if meta.get(key):
            params[key] = meta[key]
    return params


def served(backend: str) -> Descriptor:
    """The descriptor of `backend`, one a plain Triton model is written for (else one line naming those)."""
    return SERVED[check_choice("Triton backend", backend, SERVED)]


def served_platform(backend: str) -> str:
    """The Triton platform that serves `backend`'s artifact."""
    return str(served(backend).triton)  # SERVED holds only backends with one


def served_backend(engine: bool) -> str:
    """The served backend that runs TensorRT engines (`engine`), or the one that runs the exported file."""
    return next(name for name, d in SERVED.items() if d.runs_engines == engine)


def _tensor_config(t: TensorSpec, batching: bool, shape_tensor: bool) -> dict:
    entry = {"name": t.name, "data_type": Enum(f"TYPE_{t.dtype}"), "dims": list(t.dims[1:] if batching else t.dims)}
    if shape_tensor:
        entry["is_shape_tensor"] = True
    return entry


def triton_config(name: str, backend: str, io: ModelIO, *, max_batch: int, instances: int = 1, kind: str = "gpu",
                  parameters: dict[str, str] | None = None) -> tuple[str, dict]:
    """(config.pbtxt text, the same config as a dict). `max_batch` is the most images one execution may hold
    (the profile's maximum for engines)."""
    platform = served_platform(backend)
    if instances < 1 or max_batch < 1:
        raise PipelineError("instances and the maximum batch must be at least 1")
    batching = io.triton_batchable
    shape_inputs = SHAPE_TENSOR_INPUTS if PLATFORMS[platform].shape_tensors else ()
    config = {
        "name": name,
        "backend": platform,
        "max_batch_size": max_batch if batching else 0,
        "input": [_tensor_config(t, batching, t.name in shape_inputs) for t in io.inputs],
        "output": [_tensor_config(t, batching, False) for t in io.outputs],
        "dynamic_batching": {"max_queue_delay_microseconds": QUEUE_DELAY_US},
        "instance_group": [{"count": instances, "kind": Enum(f"KIND_{kind.upper()}")}],
        "parameters": [{"key": k, "value": {"string_value": v}} for k, v in (parameters or {}).items()],
    }
    if batching:
        config["dynamic_batching"]["preferred_batch_size"] = [max_batch]
    return dumps(config), config
