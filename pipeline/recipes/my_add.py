"""Recipe 3 - a C++ extension op wrapped in `torch.autograd.Function` with a `symbolic`.

`my_add(a, b) = 2a + b` is compiled C++ (torch.utils.cpp_extension.load_inline, ninja; built once
into build/recipes/my_add and reused while the source and torch stay the same). The legacy
exporter cannot look inside a compiled function; it sees one PythonOp node for the autograd
Function and calls its `symbolic` staticmethod, which spells the op in ONNX: Mul then Add.

    python -m pipeline.recipes.my_add
"""
from __future__ import annotations

import functools
from pathlib import Path

import torch

from pipeline.recipes._common import (
    BUILD_DIR,
    check_close,
    export_legacy,
    op_types,
    run_ort,
    save,
    script_main,
)

CPP_SOURCE = r"""
torch::Tensor my_add(torch::Tensor a, torch::Tensor b) {
    return 2 * a + b;
}
"""


@functools.cache
def extension():
    """Compile (first call only; about half a minute) and import the extension module."""
    from torch.utils.cpp_extension import load_inline

    build_dir = BUILD_DIR / "my_add"
    build_dir.mkdir(parents=True, exist_ok=True)
    return load_inline(name="recipes_my_add", cpp_sources=CPP_SOURCE, functions=["my_add"],
                       build_directory=str(build_dir), extra_cflags=["-O2"], verbose=False)


class MyAddFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        return extension().my_add(a, b)

    @staticmethod
    def symbolic(g, a, b):
        two = g.op("Constant", value_t=torch.tensor([2], dtype=torch.float32))
        return g.op("Add", g.op("Mul", a, two), b)


my_add = MyAddFunction.apply


class Model(torch.nn.Module):
    def forward(self, a, b):
        # The tutorial used my_add(a, a); two inputs also catch a symbolic that swaps them.
        return my_add(a, b)


def main(out_dir: Path | None = None) -> dict:
    print("[my_add] C++ extension op + autograd.Function.symbolic, legacy exporter")
    ext = extension()
    print(f"  compiled op: {ext.__file__}")
    a, b = torch.rand(1, 3, 10, 10), torch.rand(1, 3, 10, 10)
    check_close("C++ my_add vs 2a+b in eager PyTorch", ext.my_add(a, b), 2 * a + b, atol=0)

    model = Model().eval()
    onnx_model = export_legacy(model, (a, b), opset_version=17,
                               input_names=["a", "b"], output_names=["output"])
    ops = op_types(onnx_model)
    print("  graph ops:", ops)
    assert ops[-2:] == ["Mul", "Add"], ops
    save(onnx_model, out_dir, "my_add.onnx")

    (y,) = run_ort(onnx_model, a, b)
    err = check_close("ORT vs PyTorch", y, model(a, b))
    return {"ops": ops, "max_abs_err": err, "library": ext.__file__}


if __name__ == "__main__":
    raise SystemExit(script_main(__file__))
