"""Recipe 2 - map a TorchScript op with a symbolic: `torchvision::deform_conv2d` (legacy exporter).

The tutorial registers a symbolic for the torchvision op that emits `custom::deform_conv2d`; the
export works, but ONNX Runtime then refuses the file ("... is not a registered function/op"),
because nothing defines what that custom-domain node computes. Two ways out, both run here:

  a) emit the standard ONNX `DeformConv` (opset 19) directly;
  b) keep the custom-domain node, and ship its meaning inside the model as an ONNX model-local
     function whose body is the standard `DeformConv` (what pipeline.export does for `sr::`
     ops: a backend with its own kernel - our TensorRT plugin - can strip the body and use it).

`@parse_args` turns the TorchScript values of the scalar arguments into Python ints/bools.

    python -m pipeline.recipes.deform_conv
"""
from __future__ import annotations

from pathlib import Path

import onnx
import onnx.helper as oh
import torch
from onnx import AttributeProto
from onnxruntime.capi.onnxruntime_pybind11_state import Fail, InvalidGraph
from torch.onnx.symbolic_helper import _get_tensor_sizes, parse_args
from torchvision.ops import DeformConv2d

from pipeline.recipes._common import (
    check_close,
    custom_symbolic,
    export_legacy,
    op_types,
    run_ort,
    save,
    script_main,
)

OPSET = 19  # DeformConv entered the default ONNX domain in opset 19
OP = "torchvision::deform_conv2d"
ARGS = ("v", "v", "v", "v", "v", "i", "i", "i", "i", "i", "i", "i", "i", "b")


class Model(torch.nn.Module):
    """The tutorial's model: a plain conv predicts the offsets of a deformable conv."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 18, 3)  # 18 = 2 * 3 * 3 offsets
        self.conv2 = DeformConv2d(3, 3, 3)

    def forward(self, x):
        return self.conv2(x, self.conv1(x))


class ModulatedModel(torch.nn.Module):
    """DCNv2 with every parameter away from its default, to check the attribute mapping."""

    def __init__(self, groups=2, offset_groups=2):
        super().__init__()
        conv = dict(kernel_size=3, stride=2, padding=2, dilation=2)
        self.offset = torch.nn.Conv2d(4, 2 * offset_groups * 9, **conv)
        self.mask = torch.nn.Conv2d(4, offset_groups * 9, **conv)
        self.deform = DeformConv2d(4, 6, groups=groups, **conv)

    def forward(self, x):
        return self.deform(x, self.offset(x), torch.sigmoid(self.mask(x)))


@parse_args(*ARGS)
def tutorial_symbolic(g, input, weight, offset, mask, bias, stride_h, stride_w, pad_h, pad_w,
                      dil_h, dil_w, n_weight_grps, n_offset_grps, use_mask):
    return g.op("custom::deform_conv2d", input, offset)  # an op no runtime knows


def make_symbolic(op_type: str):
    """A symbolic emitting `op_type` with the attributes of the standard ONNX DeformConv."""

    @parse_args(*ARGS)
    def symbolic(g, input, weight, offset, mask, bias, stride_h, stride_w, pad_h, pad_w,
                 dil_h, dil_w, n_weight_grps, n_offset_grps, use_mask):
        # torchvision always passes a bias (zeros when there is none) and a mask (unused unless
        # use_mask); ONNX DeformConv takes X, W, offset, B, mask in that order.
        inputs = [input, weight, offset, bias] + ([mask] if use_mask else [])
        out = g.op(op_type, *inputs, strides_i=[stride_h, stride_w],
                   pads_i=[pad_h, pad_w, pad_h, pad_w], dilations_i=[dil_h, dil_w],
                   group_i=n_weight_grps, offset_group_i=n_offset_grps)
        # The exporter cannot infer a custom op's output shape: state it, [N, Cout, Ho, Wo].
        n, _, ho, wo = _get_tensor_sizes(offset)
        out.setType(input.type().with_sizes([n, _get_tensor_sizes(weight)[0], ho, wo]))
        return out

    return symbolic


def custom_function() -> onnx.FunctionProto:
    """custom::deform_conv2d defined as one standard DeformConv, attributes passed through."""
    attrs = {"strides": AttributeProto.INTS, "pads": AttributeProto.INTS,
             "dilations": AttributeProto.INTS, "group": AttributeProto.INT,
             "offset_group": AttributeProto.INT}
    body = oh.make_node("DeformConv", ["X", "W", "offset", "B", "mask"], ["Y"])
    body.attribute.extend(oh.make_attribute_ref(name, t) for name, t in attrs.items())
    # A trailing optional input may be left out by the caller; inside the body it is then "".
    return oh.make_function("custom", "deform_conv2d", ["X", "W", "offset", "B", "mask"], ["Y"],
                            [body], [oh.make_opsetid("", OPSET)], attributes=list(attrs))


def _export(model, x, symbolic, custom_opsets=None) -> onnx.ModelProto:
    # register_custom_op_symbolic(OP, symbolic, OPSET), undone after the block
    with custom_symbolic(OP, symbolic, OPSET):
        return export_legacy(model, (x,), opset_version=OPSET, custom_opsets=custom_opsets,
                             input_names=["input"], output_names=["output"])


def main(out_dir: Path | None = None) -> dict:
    print(f"[deform_conv] TorchScript-op symbolic: {OP}, legacy exporter, opset {OPSET}")
    torch.manual_seed(0)
    model, x = Model().eval(), torch.rand(1, 3, 10, 10)
    with torch.no_grad():
        want = model(x)

    # The tutorial's version: exports, but ONNX Runtime cannot load it.
    tutorial = _export(model, x, tutorial_symbolic)
    print("  tutorial symbolic, graph ops:", op_types(tutorial))
    try:
        run_ort(tutorial, x)
        raise AssertionError("expected ONNX Runtime to reject custom::deform_conv2d")
    except (Fail, InvalidGraph) as e:
        print("  ONNX Runtime, as in the tutorial:", str(e).strip().splitlines()[-1][:110])

    # a) standard DeformConv; b) custom-domain node + model-local function body.
    # Checked on the tutorial's model and on a DCNv2 (mask, strides, pads, groups...).
    dcn2, x2 = ModulatedModel().eval(), torch.rand(2, 4, 13, 11)
    with torch.no_grad():
        want2 = dcn2(x2)
    err = 0.0
    for label, net, inp, ref in (("tutorial model", model, x, want), ("DCNv2", dcn2, x2, want2)):
        standard = _export(net, inp, make_symbolic("DeformConv"))
        custom = _export(net, inp, make_symbolic("custom::deform_conv2d"), {"custom": 1})
        custom.functions.append(custom_function())
        print(f"  {label}: a) standard op, graph ops {op_types(standard)}")
        print(f"  {label}: b) custom op + local function, graph ops {op_types(custom)}"
              f" | functions {[f'{f.domain}::{f.name}' for f in custom.functions]}")
        assert "DeformConv" in op_types(standard) and "custom::deform_conv2d" in op_types(custom)
        for variant, onnx_model in (("a)", standard), ("b)", custom)):
            onnx.checker.check_model(onnx_model, full_check=True)
            err = max(err, check_close(f"{label}: {variant} ORT vs torchvision",
                                       run_ort(onnx_model, inp)[0], ref, atol=1e-4))
    save(standard, out_dir, "deform_conv_standard.onnx")
    save(custom, out_dir, "deform_conv_custom_function.onnx")
    return {"tutorial_ops": op_types(tutorial), "standard_ops": op_types(standard),
            "custom_ops": op_types(custom), "max_abs_err": err}


if __name__ == "__main__":
    raise SystemExit(script_main(__file__))
