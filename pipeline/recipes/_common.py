"""Small helpers the recipes share: export to bytes, run in ONNX Runtime, compare with PyTorch."""
from __future__ import annotations

import contextlib
import io
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch

REPO = Path(__file__).resolve().parents[2]
BUILD_DIR = REPO / "build" / "recipes"


def export_legacy(model: torch.nn.Module, args: tuple, **kwargs) -> onnx.ModelProto:
    """The tutorial-era TorchScript exporter (`dynamo=False`), in memory."""
    buf = io.BytesIO()
    with warnings.catch_warnings():
        # torch >= 2.9 warns that the legacy exporter is deprecated; the recipe says so itself.
        warnings.simplefilter("ignore", DeprecationWarning)
        # Tracer warnings here come from torchvision/torch internals the recipes do not control.
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        torch.onnx.export(model, args, buf, dynamo=False, **kwargs)
    return onnx.load_from_string(buf.getvalue())


@contextlib.contextmanager
def custom_symbolic(name: str, symbolic, opset: int):
    """`register_custom_op_symbolic` for the duration of a `with` block, then the state before.

    Registrations are process-wide, and pipeline.export registers its own symbolics too, so a
    symbolic registered earlier for `name` at `opset` is put back afterwards. And a name that had
    no symbolic at all is dropped again: torch 2.14's unregister leaves an empty entry behind,
    which makes the next export of that op fail with a ValueError instead of the usual
    "not supported" error.
    """
    from torch.onnx._internal.torchscript_exporter import registration

    qualified = f"aten{name}" if name.startswith("::") else name
    table = registration.registry._registry  # private: read and restored, nothing else
    group = table.get(qualified)
    previous = group._functions._overrides.get(opset) if group is not None else None
    torch.onnx.register_custom_op_symbolic(name, symbolic, opset)
    try:
        yield
    finally:
        torch.onnx.unregister_custom_op_symbolic(name, opset)
        if previous is not None:
            torch.onnx.register_custom_op_symbolic(name, previous, opset)
        elif group is None:
            table.pop(qualified, None)


def session(model: onnx.ModelProto | bytes) -> ort.InferenceSession:
    data = model if isinstance(model, bytes) else model.SerializeToString()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1  # tiny models; the machine is shared
    opts.log_severity_level = 3
    return ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])


def run_ort(model: onnx.ModelProto | bytes, *inputs) -> list[np.ndarray]:
    """Feed inputs positionally (torch tensors or arrays); return every graph output."""
    sess = session(model)
    feeds = {i.name: np.asarray(x.detach().cpu() if isinstance(x, torch.Tensor) else x)
             for i, x in zip(sess.get_inputs(), inputs, strict=True)}
    return sess.run(None, feeds)


def check_close(what: str, got, want, atol: float = 1e-5) -> float:
    """Print and assert the max abs error of `got` (usually ONNX Runtime) against `want` (PyTorch)."""
    want = want.detach().cpu().numpy() if isinstance(want, torch.Tensor) else np.asarray(want)
    got = np.asarray(got)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    err = float(np.abs(got.astype(np.float64) - want).max()) if got.size else 0.0
    print(f"  {what}: max abs error {err:.2e} (atol {atol:g})")
    assert err <= atol, f"{what}: max abs error {err} > {atol}"
    return err


def op_types(model: onnx.ModelProto) -> list[str]:
    """Node op types of the main graph, domain-qualified when not the default domain."""
    return [f"{n.domain}::{n.op_type}" if n.domain else n.op_type for n in model.graph.node]


def save(model: onnx.ModelProto, out_dir: Path | None, name: str) -> None:
    """Keep a copy for Netron when the caller asked for one (`--out DIR`)."""
    if out_dir is None:
        return
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / name
    tmp = path.with_suffix(".onnx.tmp")
    onnx.save(model, tmp)
    tmp.replace(path)
    print(f"  saved {path}")


def script_main(file: str) -> int:
    """`python -m pipeline.recipes.NAME [--out DIR]`: the same as `python -m pipeline.recipes NAME [--out DIR]`."""
    import sys

    from pipeline.recipes.__main__ import main  # it imports every recipe, and each recipe imports this module

    return main([Path(file).stem, *sys.argv[1:]])
