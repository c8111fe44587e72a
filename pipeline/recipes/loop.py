"""Recipe 8 - a loop model: traced vs scripted export, and today's equivalent of scripting.

- Traced (`torch.onnx.export(model)` with the legacy exporter = torch.jit.trace): Python runs the
  loop once with the example's count; the graph holds that many Convs and ignores `n`.
- Scripted (`torch.jit.script(model)` first; torch 2.14 still exports it, deprecated): TorchScript
  compiles the loop itself, so the ONNX graph has a `Loop` whose trip count is the input `n`.
  (The tutorial's loop count was a module attribute; today's exporter folds that to a constant
  and unrolls it, so here the count is a graph input.)
- Dynamo (torch's default exporter) never scripts: torch.export traces, so a data-dependent
  loop is written with the `while_loop` control-flow operator, which it exports as `Loop`.

    python -m pipeline.recipes.loop
"""
from __future__ import annotations

import warnings
from pathlib import Path

import torch
from torch._higher_order_ops import while_loop  # torch.cond's looping sibling

from pipeline.recipes._common import check_close, export_legacy, op_types, run_ort, save, script_main

WHY_DYNAMO = ("torch.onnx.export now defaults to the dynamo exporter, which captures the model "
              "with torch.export tracing instead of TorchScript scripting, so data-dependent "
              "control flow must be spelled as torch.cond / while_loop to become ONNX If / Loop.")


class Model(torch.nn.Module):
    """Apply the same conv `n` times; `n` is an int64 scalar tensor input."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 3, 3, padding=1)

    def forward(self, x, n):
        for _ in range(int(n)):
            x = self.conv(x)
        return x


class WhileLoopModel(Model):
    """The same computation written for torch.export / the dynamo exporter."""

    def forward(self, x, n):
        _, y = while_loop(lambda i, y: i < n, lambda i, y: (i + 1, self.conv(y)),
                          (torch.zeros((), dtype=torch.int64), x))
        return y


def main(out_dir: Path | None = None) -> dict:
    print("[loop] loop model: traced vs scripted export, and the dynamo exporter's while_loop")
    torch.manual_seed(0)
    model, x, n = Model().eval(), torch.rand(1, 3, 10, 10), torch.tensor(2)
    names = dict(input_names=["input", "n"], output_names=["output"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer/script deprecation warnings; the text says it
        traced = export_legacy(model, (x, n), opset_version=17, **names)
        scripted = export_legacy(torch.jit.script(model), (x, n), opset_version=17, **names)
    modern_model = WhileLoopModel().eval()
    modern_model.load_state_dict(model.state_dict())
    modern = torch.onnx.export(modern_model, (x, n), dynamo=True, verbose=False,
                               **names).model_proto

    print(f"  traced:   ops {op_types(traced)}, inputs {[i.name for i in traced.graph.input]}")
    print(f"  scripted: ops {op_types(scripted)}, inputs {[i.name for i in scripted.graph.input]}")
    print(f"  dynamo + while_loop: ops {op_types(modern)}")
    assert op_types(traced).count("Conv") == int(n) and "Loop" not in op_types(traced)
    assert "Loop" in op_types(scripted) and "Loop" in op_types(modern)
    print("  why:", WHY_DYNAMO)

    err = 0.0
    with torch.no_grad():
        want = {k: model(x, torch.tensor(k)) for k in (2, 4)}
    err = max(err, check_close("traced, n=2 (its export count): ORT vs PyTorch",
                               run_ort(traced, x)[0], want[2]))
    stale = float((torch.from_numpy(run_ort(traced, x)[0]) - want[4]).abs().max())
    print(f"  traced, n=4: still 2 convs, max abs error {stale:.2f} (expected to be wrong)")
    assert stale > 1e-3
    for k in (2, 4):
        err = max(err, check_close(f"scripted, n={k}: ORT vs PyTorch",
                                   run_ort(scripted, x, torch.tensor(k))[0], want[k]))
        err = max(err, check_close(f"dynamo while_loop, n={k}: ORT vs PyTorch",
                                   run_ort(modern, x, torch.tensor(k))[0], want[k]))
    save(traced, out_dir, "loop_traced.onnx")
    save(scripted, out_dir, "loop_scripted.onnx")
    save(modern, out_dir, "loop_dynamo_while_loop.onnx")
    return {"traced_ops": op_types(traced), "scripted_ops": op_types(scripted),
            "dynamo_ops": op_types(modern), "max_abs_err": err, "traced_stale_err": stale}


if __name__ == "__main__":
    raise SystemExit(script_main(__file__))
