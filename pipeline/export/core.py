"""`export_model`: registered model -> verified ONNX file (either exporter, custom or standard ops, FP32/FP16)."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import onnx
import torch

from models.registry import (
    ModelSpec,
    WeightsError,
    load_model,
    size_tensor,
)
from pipeline.artifacts.atomic import atomic_path
from pipeline.artifacts.cache import EXPORTERS, OPS, SIZE_INPUTS
from pipeline.artifacts.identity import resolve
from pipeline.errors import PipelineError, check_choice, first_line
from pipeline.export import dynamo, extras, fp16, graph, sr_ops, torchscript
from pipeline.export import verify as verification
from pipeline.precisions import GRAPH

DEFAULT_OPSET = {"dynamo": 20, "torchscript": 20}
MIN_OPSET = sr_ops.DEFORM_CONV_MIN_OPSET  # DeformConv (standard op and sr::DeformConv2d body) exists from 19
MAX_OPSET = {"dynamo": 21, "torchscript": 20}


@dataclass
class ExportResult:
    path: Path
    model: str
    exporter: str
    ops: str
    precision: str
    io_dtype: str
    opset: int
    max_abs_error: float | None  # None when verify=False
    seconds: float
    size_input: str | None = "size"  # "size" / "scale" / None (static model)
    weights_sha256: str = ""


def onnx_filename(model: str, *, exporter: str = "dynamo", ops: str = "custom", precision: str = "fp32",
                  io_dtype: str = "fp32", size_input: str = "size") -> str:
    """Canonical file name the `--all` mode writes, e.g. `deform-srcnn.custom.fp16.onnx`; non-default
    choices add a part: `.torchscript`, `.io-fp16`, `.scale-input`."""
    parts = [model, ops, precision]
    if exporter != "dynamo":
        parts.append(exporter)
    if precision == "fp16" and io_dtype == "fp16":
        parts.append("io-fp16")
    if size_input == "scale":
        parts.append("scale-input")
    return ".".join(parts) + ".onnx"


def check_output_path(output: Path) -> Path:
    """Fail early (before a slow export) when the file cannot be written; creates missing parent dirs."""
    output = Path(output)
    if output.is_dir():
        raise PipelineError(f"output path {output} is a directory; give a file name such as {output}/model.onnx")
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise PipelineError(f"cannot create output directory {output.parent}: {e.strerror or e}") from None
    if not os.access(output.parent, os.W_OK | os.X_OK):
        raise PipelineError(f"output directory {output.parent} is not writable")
    if output.exists() and not os.access(output, os.W_OK):
        raise PipelineError(f"output file {output} exists and is not writable")
    return output


def _example_args(spec: ModelSpec, size_input: str | None) -> tuple:
    # Batch 2 and H != W so the exporter cannot specialise dims on example values (0/1, equal sizes).
    x = torch.rand(2, 3, 16, 20)
    if size_input == "size":
        return (x, size_tensor(16, 20, spec.default_scale))
    if size_input == "scale":
        return (x, torch.tensor([spec.default_scale] * 2, dtype=torch.float32))
    return (x,)


@dataclass
class _Graph:
    """An exported, finished FP32 graph plus what the later steps need."""
    proto: onnx.ModelProto
    spec: ModelSpec
    module: torch.nn.Module
    exporter: str
    ops: str
    opset: int
    size_input: str | None
    weights_sha256: str


def build_graph(model: str, *, exporter: str = "dynamo", ops: str = "custom", weights: Path | None = None,
                opset: int | None = None, size_input: str = "size") -> _Graph:
    """Export one model to a finished FP32 ModelProto (not written). Errors are PipelineError lines."""
    spec = resolve(model)
    check_choice("exporter", exporter, EXPORTERS)
    check_choice("ops flavour", ops, OPS)
    check_choice("size input", size_input, SIZE_INPUTS)
    if size_input == "scale" and ops != "standard":
        raise PipelineError("--size-input scale (Resize with run-time scales) exists only with --ops standard")
    opset = DEFAULT_OPSET[exporter] if opset is None else int(opset)
    if opset < MIN_OPSET:
        raise PipelineError(f"opset {opset} is too old: DeformConv (body of sr::DeformConv2d, and the standard "
                            f"flavour) needs opset >= {MIN_OPSET}")
    if opset > MAX_OPSET[exporter]:
        raise PipelineError(f"opset {opset} is too new for the {exporter} exporter (max {MAX_OPSET[exporter]})")
    weights_path = Path(weights) if weights is not None else spec.weights_path
    try:
        module = load_model(model, weights_path)
    except WeightsError as e:
        raise PipelineError(str(e)) from None
    sha = spec.weights_sha256(weights_path)
    io = size_input if spec.dynamic_scale else None
    names = ["input"] + ([io] if io else [])
    backend = dynamo if exporter == "dynamo" else torchscript
    try:
        proto = backend.export(module, _example_args(spec, io), names, ops=ops, opset=opset)
    except Exception as e:  # a torch exporter failure: keep the cause chained, show one line
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise PipelineError(f"{exporter} export of '{model}' failed: {first}") from e
    proto = graph.normalise_io(proto, io)
    try:
        proto = graph.finish(proto)
    except ValueError as e:
        raise PipelineError(first_line(e)) from e
    graph.set_metadata(proto, {
        **spec.to_metadata(),  # what a runtime without the registry needs (models.spec.ModelSpec.from_metadata)
        "weights_sha256": sha,
        "size_input": io or "none",
        "exporter": exporter,
        "ops": ops,
        "opset": str(opset),
        "sr_op_versions": graph.sr_op_versions(proto),
        "torch_version": torch.__version__,
    })
    return _Graph(proto, spec, module, exporter, ops, opset, io, sha)


def write_variant(g: _Graph, output: Path, *, precision: str = "fp32", io_dtype: str = "fp32", verify_: bool = True,
                  scale: float | None = None, started: float | None = None, siblings: bool = True) -> ExportResult:
    """Write `g` at one precision atomically (temp file, verify, rename); nothing is left behind on failure.
    `siblings`: also write what a torch-free runtime needs beside it (folded variants, reference outputs)."""
    started = time.perf_counter() if started is None else started
    check_choice("precision", precision, GRAPH)
    check_choice("I/O dtype", io_dtype, GRAPH)
    if precision == "fp32" and io_dtype == "fp16":
        raise PipelineError("--io-dtype fp16 needs --precision fp16")
    output = check_output_path(output)
    if scale is not None:
        try:
            g.spec.check_scale(scale)
        except ValueError as e:
            raise PipelineError(str(e)) from None
    proto = g.proto
    if precision == "fp16":
        proto = graph.check(fp16.convert_to_fp16(proto, io_dtype))
    graph.set_metadata(proto, {"precision": precision, "io_dtype": io_dtype if precision == "fp16" else "fp32"})
    with atomic_path(output) as tmp:
        onnx.save_model(proto, tmp)
        err = None
        if verify_:
            err = verification.max_abs_error(tmp, g.module, g.spec, size_input=g.size_input, io_dtype=io_dtype,
                                       scales=verification.verify_scales(g.spec, scale))
            tol = verification.TOLERANCE[precision]
            if not err <= tol:
                raise PipelineError(f"verification failed for {output}: max |ORT - PyTorch| = {err:.3g} > {tol:g} "
                                    f"({precision}); file not written")
        if siblings:  # after verification, before the rename: the file never names a sibling that is not there
            named = extras.write_reference_outputs(g.module, g.spec, output)
            if precision == "fp32":
                named.update(extras.write_folded_variants(g.module, g.spec, output))
            onnx.save_model(graph.set_metadata(proto, named), tmp)
    return ExportResult(output, g.spec.name, g.exporter, g.ops, precision, io_dtype, g.opset, err,
                        time.perf_counter() - started, g.size_input, g.weights_sha256)


def export_model(model: str, output: Path, *, exporter: str = "dynamo", ops: str = "custom", precision: str = "fp32",
                 io_dtype: str = "fp32", weights: Path | None = None, opset: int | None = None, verify: bool = True,
                 size_input: str = "size", scale: float | None = None, siblings: bool = True) -> ExportResult:
    """Export registered `model` to `output` (.onnx) and verify it with ONNX Runtime against PyTorch.

    exporter: "dynamo" | "torchscript"; ops: "custom" (sr ops with standard-ONNX bodies) | "standard";
    precision "fp32" | "fp16" (io_dtype "fp32" keeps float32 I/O via Casts, "fp16" makes I/O half);
    weights None = the shipped weights; opset None = the exporter's default; size_input "scale" (standard ops
    only) takes run-time scale factors float[2] instead of the output size; scale = factor used to verify;
    siblings: write folded variants (SRCNN, fp32) and reference outputs beside the file, named in its metadata.
    Raises PipelineError (one line) on bad input, export failure or a verification error above tolerance.
    """
    started = time.perf_counter()
    check_output_path(output)  # before the slow part
    check_choice("precision", precision, GRAPH)
    check_choice("I/O dtype", io_dtype, GRAPH)
    if scale is not None:
        try:
            resolve(model).check_scale(scale)
        except ValueError as e:
            raise PipelineError(str(e)) from None
    g = build_graph(model, exporter=exporter, ops=ops, weights=weights, opset=opset, size_input=size_input)
    return write_variant(g, output, precision=precision, io_dtype=io_dtype, verify_=verify, scale=scale,
                         started=started, siblings=siblings)
