"""Recipe 5 - build an ONNX model by hand with onnx.helper (y = a*x + b), then edit it (Add -> Sub).

An ONNX model is a protobuf: ModelProto -> GraphProto -> NodeProto / ValueInfoProto. Build it,
check it, run it; then change a node in place and run it again. `ir_version` is pinned because
onnx.helper stamps its newest IR version, which ONNX Runtime may not accept yet (<= 13 here).

    python -m pipeline.recipes.helper_model
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from pipeline.recipes._common import check_close, op_types, run_ort, save, script_main

IR_VERSION, OPSET = 10, 18


def build_linear() -> onnx.ModelProto:
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [10, 10])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [10, 10])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, [10, 10])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [10, 10])
    mul = helper.make_node("Mul", ["a", "x"], ["c"], name="mul")
    add = helper.make_node("Add", ["c", "b"], ["y"], name="add")
    graph = helper.make_graph([mul, add], "linear_func", [a, x, b], [y])
    return helper.make_model(graph, ir_version=IR_VERSION,
                             opset_imports=[helper.make_opsetid("", OPSET)])


def main(out_dir: Path | None = None) -> dict:
    print("[helper_model] onnx.helper: build a*x+b, check, run, edit Add->Sub, run again")
    model = build_linear()
    onnx.checker.check_model(model, full_check=True)
    print(f"  built: ops {op_types(model)}, ir_version {model.ir_version}, opset {OPSET}")
    rng = np.random.default_rng(0)
    a, x, b = (rng.standard_normal((10, 10), dtype=np.float32) for _ in range(3))
    err_add = check_close("a*x+b: ORT vs numpy", run_ort(model, a, x, b)[0], a * x + b, atol=1e-6)
    save(model, out_dir, "linear_func.onnx")

    # Edit: the second node becomes a Sub (same inputs/outputs), and the model is re-checked.
    edited = onnx.ModelProto()
    edited.CopyFrom(model)  # leave the original intact
    node = next(n for n in edited.graph.node if n.op_type == "Add")
    node.op_type, node.name = "Sub", "sub"
    onnx.checker.check_model(edited, full_check=True)
    print(f"  edited: ops {op_types(edited)}")
    err_sub = check_close("a*x-b: ORT vs numpy", run_ort(edited, a, x, b)[0], a * x - b, atol=1e-6)
    save(edited, out_dir, "linear_func_sub.onnx")
    return {"ops": op_types(model), "edited_ops": op_types(edited),
            "ir_version": edited.ir_version, "max_abs_err": max(err_add, err_sub)}


if __name__ == "__main__":
    raise SystemExit(script_main(__file__))
