"""Recipe 4 - an onnxscript function (Selu) exported as an ONNX model-local function.

`Selu` below is written in onnxscript (Python syntax, ONNX ops) in our own domain `recipes`.

- Dynamo exporter (torch's default): `custom_translation_table` maps `aten.selu` to a
  translation that emits one `recipes::Selu` node; the function's FunctionProto goes into
  `model.functions`. (Returning `Selu(x)` from the translation would work too, but the exporter
  inlines function calls - its opset-conversion pass needs an inlined graph - so no function
  would be left.) onnxscript builds a custom-domain node only when `onnx.defs` knows its schema,
  hence `register_schema`.
- Legacy exporter: a symbolic calling `g.onnxscript_op(Selu, x)` keeps the function by itself.

Either way a plain ONNX Runtime session runs the file: it expands the function body.

    python -m pipeline.recipes.selu_function
"""
from __future__ import annotations

from pathlib import Path

import onnx
import torch
from onnx.defs import OpSchema
from onnxscript import FLOAT, script
from onnxscript import opset18 as op
from onnxscript.values import Opset

from pipeline.recipes._common import (
    check_close,
    custom_symbolic,
    export_legacy,
    op_types,
    run_ort,
    save,
    script_main,
)

recipes = Opset("recipes", 1)
OPSET = 18  # the function body's default-domain opset must equal the model's
ALPHA, GAMMA = 1.67326319217681884765625, 1.05070102214813232421875  # torch.selu's constants


@script(recipes, default_opset=op)
def Selu(X: FLOAT, alpha: float = ALPHA, gamma: float = GAMMA) -> FLOAT:  # noqa: N802 (op name)
    alpha_x = op.CastLike(alpha, X)
    gamma_x = op.CastLike(gamma, X)
    negative = gamma_x * (alpha_x * op.Exp(X) - alpha_x)
    positive = gamma_x * X
    return op.Where(op.CastLike(0, X) >= X, negative, positive)


def register_selu_schema() -> None:
    if onnx.defs.has("Selu", "recipes"):
        return
    float_attr = OpSchema.AttrType.FLOAT
    onnx.defs.register_schema(OpSchema(
        "Selu", "recipes", 1,
        inputs=[OpSchema.FormalParameter("X", "T")],
        outputs=[OpSchema.FormalParameter("Y", "T")],
        type_constraints=[("T", ["tensor(float)"], "float tensors")],
        attributes=[OpSchema.Attribute("alpha", float_attr, "", required=False),
                    OpSchema.Attribute("gamma", float_attr, "", required=False)]))


def selu_translation(x):
    return recipes.Selu(x)  # one custom-domain node; its body is the function attached below


def selu_symbolic(g, x):
    return g.onnxscript_op(Selu, x).setType(x.type())


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.selu(x)


def _check(name: str, onnx_model: onnx.ModelProto, x, want) -> float:
    functions = [f"{f.domain}::{f.name}" for f in onnx_model.functions]
    print(f"  {name}: graph ops {op_types(onnx_model)} | functions {functions}")
    assert "recipes::Selu" in op_types(onnx_model) and functions == ["recipes::Selu"]
    onnx.checker.check_model(onnx_model, full_check=True)
    return check_close(f"{name}: ORT vs torch.selu", run_ort(onnx_model, x)[0], want)


def main(out_dir: Path | None = None) -> dict:
    print("[selu_function] onnxscript Selu as a model-local function")
    model, x = Model().eval(), torch.randn(2, 3, 8, 8) * 2
    want = model(x)

    register_selu_schema()
    program = torch.onnx.export(model, (x,), dynamo=True, verbose=False,
                                custom_translation_table={torch.ops.aten.selu.default: selu_translation},
                                opset_version=OPSET, input_names=["input"], output_names=["output"])
    dynamo_model = program.model_proto
    dynamo_model.functions.append(Selu.to_function_proto())
    err_dynamo = _check("dynamo", dynamo_model, x, want)

    # register_custom_op_symbolic("aten::selu", selu_symbolic, OPSET), undone after the block
    with custom_symbolic("aten::selu", selu_symbolic, OPSET):
        legacy_model = export_legacy(model, (x,), opset_version=OPSET, custom_opsets={"recipes": 1},
                                     input_names=["input"], output_names=["output"])
    err_legacy = _check("legacy", legacy_model, x, want)

    save(dynamo_model, out_dir, "selu_function_dynamo.onnx")
    save(legacy_model, out_dir, "selu_function_legacy.onnx")
    return {"dynamo_ops": op_types(dynamo_model), "legacy_ops": op_types(legacy_model),
            "max_abs_err": max(err_dynamo, err_legacy)}


if __name__ == "__main__":
    raise SystemExit(script_main(__file__))
