"""The least builder workspace an engine needs for our DeformConv2d layers (plain Python + the CPU kernel library).

The default (fused) DeformConv2d kernel needs none; a plugin built with SR_DEFORM_CONV2D_IMPL=im2col asks TensorRT for
its im2col columns plus a cuBLAS slice (plugins_trt/deformConv2d/README.md). Under a smaller workspace limit TensorRT
finds no implementation and fails late with an obscure error, so the engine stage refuses such a --workspace before
building and names the minimum. The size comes from the same C++ rule the plugin's getWorkspaceSize uses, for the
implementation the same variable selects (libsr_kernels_cpu: sr_deform_conv2d_min_workspace).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import onnx

from pipeline.contract import DEFORM_CONV, DOMAIN
from pipeline.engine.profiles import Profile
from pipeline.errors import PipelineError
from pipeline.native.kernels_cpu import deform_conv2d_min_workspace


@dataclass(frozen=True)
class DeformLayer:
    name: str
    c_in: int
    kernel: tuple[int, int]
    strides: tuple[int, int]
    pads: tuple[int, int, int, int]
    dilations: tuple[int, int]

    def output_size(self, h: int, w: int) -> tuple[int, int]:
        def axis(size: int, i: int) -> int:
            span = self.dilations[i] * (self.kernel[i] - 1) + 1
            return (size + self.pads[i] + self.pads[i + 2] - span) // self.strides[i] + 1

        return axis(h, 0), axis(w, 1)


def _weight_dims(graph: onnx.GraphProto, name: str) -> list[int] | None:
    for init in graph.initializer:
        if init.name == name:
            return list(init.dims)
    for node in graph.node:  # a Constant node feeding the layer
        if node.op_type == "Constant" and name in node.output:
            for a in node.attribute:
                if a.name == "value":
                    return list(a.t.dims)
    return None


def deform_layers(model: onnx.ModelProto) -> list[DeformLayer]:
    """The sr::DeformConv2d nodes of a graph with their channels, kernel and attributes (from W's dims)."""
    layers = []
    for node in model.graph.node:
        if node.domain != DOMAIN or node.op_type != DEFORM_CONV:
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        dims = _weight_dims(model.graph, node.input[1])
        if dims is None or len(dims) != 4:
            raise PipelineError(f"DeformConv2d '{node.name}': its weight {node.input[1]} is not a constant 4-D tensor, "
                                "so the workspace it needs cannot be computed")
        group = int(attrs.get("group", 1))
        layers.append(DeformLayer(name=node.name or node.output[0], c_in=group * dims[1], kernel=(dims[2], dims[3]),
                                  strides=tuple(attrs.get("strides", (1, 1))),
                                  pads=tuple(attrs.get("pads", (0, 0, 0, 0))),
                                  dilations=tuple(attrs.get("dilations", (1, 1)))))
    return layers


def _fixed(profile: Profile) -> bool:
    return all(len(set(getattr(profile, k))) == 1 for k in ("batch", "height", "width", "scale"))


def min_workspace_bytes(model: onnx.ModelProto, profiles: list[Profile], precision: str) -> tuple[int, str]:
    """(bytes, which layer and profile) the largest DeformConv2d request needs; (0, "") without such layers.

    The SR models run the deformable layer on the upscaled image, so its input is bounded by the profile's largest
    output (and input) size."""

    elem = 2 if precision == "fp16" else 4
    best, where = 0, ""
    for layer in deform_layers(model):
        for i, p in enumerate(profiles):
            out_h, out_w = p.size_values()[2]
            h_out, w_out = layer.output_size(max(out_h, p.height[2]), max(out_w, p.width[2]))
            need = deform_conv2d_min_workspace(p.batch[2], layer.c_in, layer.kernel[0], layer.kernel[1], h_out, w_out,
                                               elem, _fixed(p))
            if need > best:
                best, where = need, f"DeformConv2d '{layer.name}' at profile {i} (batch {p.batch[2]}, {h_out}x{w_out})"
    return best, where


def check_workspace(workspace_mb: int, model: onnx.ModelProto, profiles: list[Profile], precision: str) -> int:
    """Minimum in MiB (0 without DeformConv2d layers); PipelineError when `workspace_mb` is below it."""
    need, where = min_workspace_bytes(model, profiles, precision)
    need_mb = math.ceil(need / (1 << 20))
    if need and int(workspace_mb) < need_mb:
        raise PipelineError(f"--workspace {workspace_mb} MiB is below the {need_mb} MiB that {where} needs "
                            f"(im2col columns + cuBLAS slice): use --workspace {need_mb} or more, or a smaller profile")
    return need_mb
