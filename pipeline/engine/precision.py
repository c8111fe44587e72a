"""The graph an engine of each precision is built from. TensorRT 11 networks are strongly typed: the graph's tensor
types are the engine's, and no builder flag asks for a precision.

    fp32, fp16   the ONNX file as exported (an fp16 file is an FP16 graph)
    bf16         the fp32 file converted at build time (pipeline.export.fp16.convert_to_bf16): BF16 layers, our sr
                 ops in FP32 between Casts (their plugins run FP32 and FP16); a GPU of compute capability 8.0 or newer
    int8         the fp32 file's Q/DQ version (pipeline.export.quantize.int8_file, the file OpenVINO runs): its
                 Q/DQ pairs make the INT8 convolutions (explicit quantization: TensorRT 11 has no calibrator)

    source_precision(precision) -> str          the precision of the file an engine of `precision` is built from
    engine_precision(meta, requested) -> str    the precision an engine of this file would have, or why not
    engine_graph(onnx_file, model, precision)   the graph TensorRT parses for it
"""
from __future__ import annotations

from pathlib import Path

import onnx

from pipeline.artifacts.identity import resolve
from pipeline.artifacts.onnx_file import load_onnx
from pipeline.errors import PipelineError
from pipeline.export.fp16 import convert_to_bf16
from pipeline.export.quantize import RECIPE, int8_file

ENGINE_PRECISIONS = ("fp32", "fp16", "bf16", "int8")
DERIVED = ("bf16", "int8")  # made from the fp32 file when the engine is built
BF16_GRAPH = 2  # bumped when convert_to_bf16's output changes, so older bf16 engines are rebuilt
BF16_MIN_CAPABILITY = (8, 0)  # Ampere: the first GPUs with BF16 tensor cores


def source_precision(precision: str) -> str:
    """The precision of the ONNX file an engine of `precision` is built from: fp32 for bf16 and int8, else its own."""
    return "fp32" if precision in DERIVED else precision


def engine_precision(meta: dict, requested: str | None) -> str:
    """The precision of an engine built from a file with metadata `meta`: the file's own, or bf16/int8 made from
    an fp32 file. Anything else is a PipelineError saying what to give instead."""
    own = meta.get("precision", "fp32")
    if requested is None or requested == own:
        return own
    if requested not in ENGINE_PRECISIONS:
        raise PipelineError(f"unknown engine precision {requested!r} (one of {', '.join(ENGINE_PRECISIONS)})")
    if requested in DERIVED and own == "fp32":
        return requested
    if requested in DERIVED:
        raise PipelineError(f"a {requested} engine is made from the fp32 file, and this one is an {own} graph")
    raise PipelineError(f"this file is an {own} graph and a TensorRT 11 engine has its graph's precision: export "
                        f"an {requested} file (`python -m pipeline export --precision {requested}`)")


def derivation(precision: str | None) -> str | None:
    """What a derived engine's graph was made by (kept in its sidecar: a change rebuilds it), None for a file's own."""
    return {"bf16": f"bf16 graph v{BF16_GRAPH}, sr ops and Resize fp32",
            "int8": f"int8 Q/DQ recipe {RECIPE}"}.get(precision)


def bf16_problem(compute_capability: str) -> str | None:
    """Why this GPU cannot run a bf16 engine, or None."""
    try:
        cc = tuple(int(p) for p in str(compute_capability).split("."))
    except ValueError:
        return None  # unknown: let TensorRT decide
    if cc < BF16_MIN_CAPABILITY:
        need = ".".join(map(str, BF16_MIN_CAPABILITY))
        return f"bf16 engines need a GPU of compute capability {need} or newer (Ampere); it has {compute_capability}"
    return None


def engine_graph(onnx_file: Path, model: onnx.ModelProto, precision: str, log=print) -> onnx.ModelProto:
    """The graph to parse for an engine of `precision` from `onnx_file` (already loaded as `model`)."""
    if precision == "bf16":
        return convert_to_bf16(model)
    if precision == "int8":
        scale = resolve(onnx=onnx_file).default_scale  # calibrated at the model's own scale, as OpenVINO's file
        q, _ = load_onnx(int8_file(Path(onnx_file), scale, log=log))
        return q
    return model
