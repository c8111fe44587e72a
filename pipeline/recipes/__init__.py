"""The classic "PyTorch to ONNX custom ops" tutorial's recipes, kept working in today's torch.

Each recipe is a short module runnable as `python -m pipeline.recipes.<name>`; its `main(out_dir)`
prints what it shows, asserts the ONNX Runtime result against PyTorch and returns a small dict of
facts (op types, max abs error). `python -m pipeline.recipes` lists or runs them all.
"""
from __future__ import annotations

import importlib

# name -> what it shows (in the tutorial's order)
RECIPES = {
    "asinh": "ATen op symbolic: register_custom_op_symbolic('::asinh') -> Asinh (legacy exporter)",
    "deform_conv": "TorchScript op symbolic: torchvision::deform_conv2d -> DeformConv / custom op "
                   "with a local function",
    "my_add": "C++ extension op (cpp_extension) in an autograd.Function with symbolic -> Mul+Add",
    "selu_function": "onnxscript Selu as a model-local function (dynamo translation table, legacy)",
    "helper_model": "onnx.helper: build a*x+b, check, run, edit Add->Sub, run again",
    "extract": "onnx.utils.extract_model: sub-graphs and extra intermediate outputs for debugging",
    "export_only": "torch.onnx.is_in_onnx_export(): logic only the exported model has",
    "loop": "loop model: traced vs scripted export; dynamo + while_loop as today's equivalent",
}


def load(name: str):
    """The recipe module `name` (raises KeyError for an unknown name)."""
    if name not in RECIPES:
        raise KeyError(name)
    return importlib.import_module(f"{__name__}.{name}")
