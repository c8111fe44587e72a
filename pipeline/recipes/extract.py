"""Recipe 6 - debug an ONNX model: cut sub-graphs with onnx.utils.extract_model, add outputs.

`extract_model(in_path, out_path, input_names, output_names)` keeps only the nodes between the
given tensors. The same call with *more output names* is the tutorial's debugging trick: expose
intermediate tensors as extra graph outputs and compare each with PyTorch's (forward hooks), to
find the first layer where the exported model goes wrong.

    python -m pipeline.recipes.extract
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import onnx
import onnx.utils
import torch

from pipeline.recipes._common import check_close, export_legacy, op_types, run_ort, save, script_main


def _convs(n: int) -> torch.nn.Sequential:
    return torch.nn.Sequential(*(torch.nn.Conv2d(3, 3, 3) for _ in range(n)))


class Model(torch.nn.Module):
    """The tutorial's two-branch model."""

    def __init__(self):
        super().__init__()
        self.convs1, self.convs2, self.convs3, self.convs4 = _convs(3), _convs(2), _convs(2), _convs(3)

    def forward(self, x):
        x = self.convs1(x)
        x1 = self.convs2(x)
        x2 = self.convs3(x)
        return self.convs4(x1 + x2)


def block_output(model: onnx.ModelProto, block: str) -> str:
    """Name of the tensor a submodule produces: the legacy exporter scopes node names '/block/...'."""
    return [n.output[0] for n in model.graph.node if n.name.startswith(f"/{block}/")][-1]


def main(out_dir: Path | None = None) -> dict:
    print("[extract] onnx.utils.extract_model: sub-graphs and extra debug outputs")
    torch.manual_seed(0)
    model, x = Model().eval(), torch.rand(1, 3, 20, 20)
    captured = {}  # PyTorch's intermediates, by block name
    for block in ("convs1", "convs2", "convs3"):
        getattr(model, block).register_forward_hook(
            lambda mod, inp, out, block=block: captured.__setitem__(block, out.detach()))
    with torch.no_grad():
        want = model(x)

    full = export_legacy(model, (x,), opset_version=17, input_names=["input"], output_names=["output"])
    names = {block: block_output(full, block) for block in captured}
    print(f"  full model: {len(full.graph.node)} nodes; block outputs {names}")

    with tempfile.TemporaryDirectory() as tmp:
        full_path, sub_path, dbg_path = (Path(tmp) / n for n in ("full.onnx", "sub.onnx", "dbg.onnx"))
        onnx.save(full, full_path)
        # Sub-graph: convs2 alone, fed with convs1's output.
        onnx.utils.extract_model(str(full_path), str(sub_path), [names["convs1"]], [names["convs2"]])
        # Debugging: the whole model, with every block's output as an extra graph output.
        onnx.utils.extract_model(str(full_path), str(dbg_path), ["input"],
                                 ["output"] + [names[b] for b in ("convs1", "convs2", "convs3")])
        sub, debug = onnx.load(sub_path), onnx.load(dbg_path)

    print(f"  sub-graph convs1 -> convs2: ops {op_types(sub)}")
    assert op_types(sub) == ["Conv", "Conv"], op_types(sub)
    err = check_close("sub-graph: ORT vs model.convs2", run_ort(sub, captured["convs1"])[0],
                      captured["convs2"])

    outs = run_ort(debug, x)
    print(f"  debug model outputs: {[o.name for o in debug.graph.output]}")
    err = max(err, check_close("debug output 'output'", outs[0], want))
    for block, got in zip(("convs1", "convs2", "convs3"), outs[1:], strict=True):
        err = max(err, check_close(f"debug output {block}", got, captured[block]))
    save(sub, out_dir, "extract_convs2.onnx")
    save(debug, out_dir, "extract_debug_outputs.onnx")
    return {"sub_ops": op_types(sub), "debug_outputs": [o.name for o in debug.graph.output],
            "max_abs_err": err}


if __name__ == "__main__":
    raise SystemExit(script_main(__file__))
