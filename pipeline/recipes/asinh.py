"""Recipe 1 - map an ATen op with a symbolic: `torch.asinh` -> ONNX `Asinh` (legacy exporter).

The legacy TorchScript exporter has no rule for `aten::asinh` (still true in torch 2.14), so at
opset 9 the export fails. `register_custom_op_symbolic("::asinh", fn, 9)` tells it which ONNX
node(s) to emit; "::" means the ATen namespace. The dynamo exporter (torch's default) ignores
such symbolics and maps asinh itself.

    python -m pipeline.recipes.asinh
"""
from __future__ import annotations

from pathlib import Path

import torch

from pipeline.recipes._common import (
    check_close,
    custom_symbolic,
    export_legacy,
    op_types,
    run_ort,
    save,
    script_main,
)

OPSET = 9  # the tutorial's opset; Asinh exists in ONNX since opset 9


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.asinh(x)


def asinh_symbolic(g, input, *, out=None):
    # `g.op` adds an ONNX node to the graph being built; the result is its output value.
    return g.op("Asinh", input)


def main(out_dir: Path | None = None) -> dict:
    print("[asinh] ATen symbolic: torch.asinh -> ONNX Asinh, legacy exporter, opset", OPSET)
    model, x = Model().eval(), torch.rand(1, 3, 10, 10) * 4 - 2

    try:  # Without a symbolic: the tutorial's starting point.
        export_legacy(model, (x,), opset_version=OPSET)
        raise AssertionError("expected the legacy exporter to reject aten::asinh at opset 9")
    except torch.onnx.errors.UnsupportedOperatorError as e:
        print(f"  without a symbolic: {type(e).__name__}: {str(e).splitlines()[0]}")

    # register_custom_op_symbolic("::asinh", asinh_symbolic, OPSET), undone after the block
    with custom_symbolic("::asinh", asinh_symbolic, OPSET):
        onnx_model = export_legacy(model, (x,), opset_version=OPSET,
                                   input_names=["input"], output_names=["output"])
    ops = op_types(onnx_model)
    print("  with the symbolic, graph ops:", ops)
    assert ops == ["Asinh"], ops
    save(onnx_model, out_dir, "asinh.onnx")

    (y,) = run_ort(onnx_model, x)
    err = check_close("ORT vs PyTorch", y, model(x))
    return {"ops": ops, "max_abs_err": err}


if __name__ == "__main__":
    raise SystemExit(script_main(__file__))
