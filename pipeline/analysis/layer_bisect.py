"""Find the first ONNX node whose output diverges from the PyTorch module it came from.

Every float intermediate of the graph is marked as a graph output and run once in ONNX Runtime (CPU);
PyTorch forward hooks record the output of every leaf module.  ONNX nodes are matched to modules by
the exporter's naming (legacy exporter: node names '/conv1/Conv', '/relu_1/Relu' for a second call;
dynamo exporter: the 'pkg.torch.onnx.name_scopes' metadata), then by output shape and call order.
Walking the graph in topological order, the first matched node whose max abs error exceeds
rtol * max(1, max |torch output|) is named, with the unmatched nodes between it and the last agreeing
match listed as suspects.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, shape_inference

_FLOAT_TYPES = {1: np.float32, 10: np.float16, 11: np.float64}


def _module_of(node, modules: set[str]) -> str | None:
    for p in node.metadata_props:  # dynamo exporter
        if p.key.endswith("name_scopes"):
            try:
                scopes = [s for s in ast.literal_eval(p.value) if s]
            except (ValueError, SyntaxError):
                scopes = []
            for i in range(len(scopes), 0, -1):
                for name in (scopes[i - 1], ".".join(scopes[:i])):
                    if name in modules:
                        return name
    # legacy exporter: '/conv1/Conv', '/body/0/conv/Conv', '/relu_1/Relu'
    parts = [p for p in node.name.split("/") if p][:-1]
    for i in range(len(parts), 0, -1):
        cand = ".".join(parts[:i])
        if cand in modules:
            return cand
        base = re.sub(r"_\d+$", "", cand)
        if base in modules:
            return base
    return None


def _with_all_outputs(model):
    """Copy of `model` whose float node outputs are all graph outputs (types from shape inference)."""
    try:
        inferred = shape_inference.infer_shapes(model)
    except Exception:  # custom ops without shape functions: fall back to what the file says
        inferred = model
    types = {vi.name: vi.type.tensor_type.elem_type for vi in
             list(inferred.graph.value_info) + list(inferred.graph.output) + list(inferred.graph.input)}
    m = onnx.ModelProto()
    m.CopyFrom(model)
    existing = {o.name for o in m.graph.output}
    for node in m.graph.node:
        if node.op_type in ("Constant", "Shape", "ConstantOfShape"):
            continue
        for out in node.output:
            if not out or out in existing:
                continue
            et = types.get(out, 1)
            if et not in _FLOAT_TYPES:
                continue
            m.graph.output.append(helper.make_tensor_value_info(out, et, None))
            existing.add(out)
    return m


def _torch_outputs(module, args) -> tuple[dict[str, list], set[str]]:
    import torch

    calls: dict[str, list] = {}
    hooks = []
    names = set()
    for name, mod in module.named_modules():
        if not name or any(True for _ in mod.children()):
            continue
        names.add(name)

        def hook(_m, _inp, out, name=name):
            if isinstance(out, torch.Tensor):
                calls.setdefault(name, []).append(out.detach().float().cpu().numpy())

        hooks.append(mod.register_forward_hook(hook))
    try:
        with torch.inference_mode():
            final = module(*args)
    finally:
        for h in hooks:
            h.remove()
    calls.setdefault("<output>", []).append(final.detach().float().cpu().numpy())
    return calls, names


def bisect_onnx(onnx_model, module, feeds: dict[str, np.ndarray], *, extra_args: tuple = (),
                rtol: float = 1e-4, session_options=None) -> dict:
    """Compare `onnx_model` (path or ModelProto) node by node with torch `module` on `feeds`.

    `feeds["input"]` (float32 NCHW) is also the first argument of `module`; `extra_args` follow it.
    Returns {'first_divergent': {...} | None, 'suspects': [...], 'matches': [...], 'summary': str}.
    """
    import torch  # the reference side only; ONNX Runtime runs without it

    model = onnx.load(str(onnx_model)) if isinstance(onnx_model, (str, Path)) else onnx_model
    marked = _with_all_outputs(model)
    so = session_options or ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(marked.SerializeToString(), so, providers=["CPUExecutionProvider"])
    run_feeds = {}
    for inp in sess.get_inputs():
        v = feeds[inp.name]
        run_feeds[inp.name] = v.astype(np.float16) if inp.type == "tensor(float16)" else v
    names = [o.name for o in sess.get_outputs()]
    values = dict(zip(names, sess.run(names, run_feeds), strict=True))

    calls, modules = _torch_outputs(module, (torch.from_numpy(feeds["input"]), *extra_args))
    used: dict[str, set[int]] = {}
    graph_out = model.graph.output[0].name
    matches, first, suspects_since = [], None, []
    for node in model.graph.node:
        mod = _module_of(node, modules) or ("<output>" if graph_out in node.output else None)
        out_name = node.output[0] if node.output else None
        val = values.get(out_name)
        ref = None
        if mod is not None and val is not None:
            for k, t in enumerate(calls.get(mod, [])):
                if k not in used.setdefault(mod, set()) and t.shape == val.shape:
                    used[mod].add(k)
                    ref = (k, t)
                    break
        if ref is None:
            if val is not None and first is None:
                suspects_since.append({"node": node.name, "op_type": node.op_type, "output": out_name})
            continue
        k, t = ref
        err = float(np.max(np.abs(val.astype(np.float64) - t))) if val.size else 0.0
        bound = rtol * max(1.0, float(np.max(np.abs(t))) if t.size else 1.0)
        ok = bool(np.isfinite(err) and err <= bound)
        entry = {"node": node.name, "op_type": node.op_type, "output": out_name, "module": mod, "call": k,
                 "max_abs": err, "bound": bound, "ok": ok}
        matches.append(entry)
        if first is None:
            if ok:
                suspects_since = []
            else:
                first = entry
    if first is None:
        summary = f"no divergence above rtol {rtol:g} in {len(matches)} matched nodes"
    else:
        summary = (f"first diverging node: '{first['node']}' ({first['op_type']}, module '{first['module']}'), "
                   f"max abs {first['max_abs']:.3g} > {first['bound']:.3g}")
    return {"first_divergent": first, "suspects": suspects_since[-10:] if first else [], "matches": matches,
            "summary": summary}
