"""Recipe 7 - `torch.onnx.is_in_onnx_export()`: logic that exists only in the exported model.

It returns True only while torch.onnx.export traces the model (both exporters), so a model can
e.g. append post-processing for deployment - here a clip to [0, 1] - that eager PyTorch skips.

    python -m pipeline.recipes.export_only
"""
from __future__ import annotations

from pathlib import Path

import torch

from pipeline.recipes._common import check_close, export_legacy, op_types, run_ort, save, script_main


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 3, 3)

    def forward(self, x):
        x = self.conv(x)
        if torch.onnx.is_in_onnx_export():
            x = torch.clip(x, 0, 1)
        return x


def main(out_dir: Path | None = None) -> dict:
    print("[export_only] torch.onnx.is_in_onnx_export(): a clip only the ONNX model has")
    torch.manual_seed(0)
    model, x = Model().eval(), torch.randn(1, 3, 10, 10)
    with torch.no_grad():
        eager = model(x)
    assert not torch.onnx.is_in_onnx_export()
    assert eager.min() < 0 or eager.max() > 1, "test input should produce values outside [0, 1]"
    print(f"  eager output range [{eager.min():.2f}, {eager.max():.2f}] (no clip)")

    legacy = export_legacy(model, (x,), opset_version=17, input_names=["input"], output_names=["output"])
    dynamo = torch.onnx.export(model, (x,), dynamo=True, verbose=False,
                               input_names=["input"], output_names=["output"]).model_proto
    err = 0.0
    for name, onnx_model in (("legacy", legacy), ("dynamo", dynamo)):
        ops = op_types(onnx_model)
        print(f"  {name} exporter: graph ops {ops}")
        assert "Clip" in ops, ops
        (y,) = run_ort(onnx_model, x)
        err = max(err, check_close(f"{name}: ORT vs clip(eager, 0, 1)", y, eager.clamp(0, 1)))
    save(legacy, out_dir, "export_only.onnx")
    return {"legacy_ops": op_types(legacy), "dynamo_ops": op_types(dynamo), "max_abs_err": err}


if __name__ == "__main__":
    raise SystemExit(script_main(__file__))
