"""The graph an engine of each precision is built from. TensorRT 11 networks are strongly typed: the graph's tensor
types are the engine's, and no builder flag asks for a precision.

    fp32, fp16   the ONNX file as exported (an fp16 file is an FP16 graph)
    bf16         the fp32 graph converted at build time (pipeline.export.fp16.convert_to_bf16): BF16 layers, our sr
                 ops and Resize in FP32 between Casts (their plugins run FP32 and FP16); compute capability >= 8.0
    int8         the fp32 graph's Q/DQ version (pipeline.export.quantize.int8_file, the file OpenVINO runs): its
                 Q/DQ pairs make the INT8 convolutions (explicit quantization: TensorRT 11 has no calibrator)

The fp32 graph of a derived engine is the folded one (pipeline.export.fold: bicubic folded into conv1 on the LR grid,
exported beside the file) where the model has a fixed integer scale, the folded file is there and every profile's
smallest input is one it takes (its `min_lr`), as OpenVINO runs it: there the int8 recipe quantizes the LR-grid
conv1 (most of the work) and the layers after it, where on the model graph only srcnn-x3's 1x1 conv2 (~10 % of the
MACs) was int8. Elsewhere (a scale chosen at run time: the folded graphs have no `size` input) it is the file's own
graph. The sidecar's `graph` says which. The float remainder of an int8 engine (the first and last layer's convs of
the border strips) stays FP32.

    source_precision(precision) -> str          the precision of the file an engine of `precision` is built from
    engine_precision(meta, requested) -> str    the precision an engine of this file would have, or why not
    engine_source(onnx_file, precision, profiles) -> (Path, int | None)   the fp32 graph file it is made from
    engine_graph(onnx_file, model, precision, profiles=None)             the graph TensorRT parses for it
"""
from __future__ import annotations

from pathlib import Path

import onnx

from pipeline.artifacts.identity import resolve
from pipeline.artifacts.onnx_file import folded_variants, load_onnx, onnx_metadata
from pipeline.errors import PipelineError
from pipeline.export.fp16 import convert_to_bf16
from pipeline.export.quantize import int8_file
from pipeline.precisions import BY_NAME, DERIVED, NAMES, version

ENGINE_PRECISIONS = NAMES  # every precision: bf16 and int8 (DERIVED) made from the fp32 file when it is built
FOLDED_GRAPHS = 1  # bumped when the choice of graph changes, so engines made by the older choice are rebuilt
BF16_MIN_CAPABILITY = (8, 0)  # Ampere: the first GPUs with BF16 tensor cores


def source_precision(precision: str) -> str:
    """The precision of the ONNX file an engine of `precision` is built from: fp32 for bf16 and int8, else its own."""
    return BY_NAME[precision].source


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
    folded = f", folded graph rule v{FOLDED_GRAPHS}"
    if precision == "bf16":
        return f"bf16 graph v{version('bf16-graph')}, sr ops and Resize fp32{folded}"
    if precision == "int8":
        return f"int8 Q/DQ recipe {version('qdq')}{folded}"
    return None


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


def engine_source(onnx_file: Path, precision: str, profiles=None) -> tuple[Path, int | None]:
    """The fp32 graph file an engine of `precision` is made from, and its folded scale (None: the file's own graph):
    the folded xk file beside a fixed-scale model's file for bf16 and int8 when it is there and every profile's
    smallest input is at least its `min_lr` (see the module's notes)."""
    onnx_file = Path(onnx_file)
    if precision not in DERIVED or profiles is None:
        return onnx_file, None
    spec = resolve(onnx=onnx_file)
    k = int(spec.default_scale)
    if spec.dynamic_scale or k != spec.default_scale:  # a folded graph serves one integer scale, without `size`
        return onnx_file, None
    path = folded_variants(onnx_file).get(k)
    if path is None or not path.is_file():
        return onnx_file, None
    min_lr = int(onnx_metadata(path).get("min_lr", 0))
    if any(min(p.height[0], p.width[0]) < min_lr for p in profiles):
        return onnx_file, None
    return path, k


def graph_note(source: Path, scale: int | None) -> str:
    """What the sidecar says of the graph an engine was built from."""
    return f"folded x{scale} ({source.name})" if scale else f"model graph ({source.name})"


def engine_graph(onnx_file: Path, model: onnx.ModelProto, precision: str, profiles=None,
                 log=print) -> onnx.ModelProto:
    """The graph to parse for an engine of `precision` from `onnx_file` (already loaded as `model`); with the
    engine's `profiles`, a derived one from the folded graph where engine_source picks it."""
    source, folded = engine_source(onnx_file, precision, profiles)
    if folded:
        model, _ = load_onnx(source)
    if precision == "bf16":
        return convert_to_bf16(model)
    if precision == "int8":
        scale = folded or resolve(onnx=onnx_file).default_scale  # calibrated at the model's own scale, as OpenVINO's
        q, _ = load_onnx(int8_file(source, scale, log=log))
        return q
    return model
