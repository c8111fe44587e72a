"""A folded SRCNN graph (pipeline.export.fold) split per output phase, the form its int8 file is made from: the same
function, fewer MACs, and no Concat (OpenVINO 2026.4 computes a Concat's int8 output wrong, see below).

    split_phases(model) -> bool   rewrites the graph in place; False (untouched) when it is not a folded SRCNN's

The folded graph computes all s*s output phases of conv1 in one conv (fold1, 3 -> s*s*64 on the LR grid, a 7x7 window
for s=3), conv2 as a grouped 1x1 conv (fold2, one group per phase) and conv3 as one conv over all phases (fold3,
s*s*32 -> s*s*3, 3x3). Split, each phase g is a chain of its own, summed at the end:

    Slice(padded image) -> fold1_g -> Relu -> fold2_g (dense 64 -> 32) -> Relu -> fold3_g   (then Add over g)

fold1_g is fold1's kernel for phase g cropped to its non-zero rows and columns (6x6 to 7x7 at s=3: 18 % fewer MACs),
fold3_g is fold3's weights that read phase g's 32 channels, cropped likewise (2x2 to 3x3: 40 % fewer MACs), and
both crops are one Slice of the padded image (a phase's chain computes only the rows and columns its fold3_g
reads), so no feature map is ever sliced or concatenated. fold3_g are unpadded as fold3 is (the border strips
recompute its ring), so each still reads a ReLU directly (the int8 recipe's shift, pipeline.export.quantize).

Why no Concat: fold2's groups as nine convs concatenated before fold3 computed the same, but OpenVINO 2026.4 (CPU,
either inference precision) computes Concat -> QuantizeLinear -> DequantizeLinear (int8, zero point 0) -> Conv
wrong: its runtime graph quantizes each Concat input to u8 and runs the Conv on u8 (a signed range needs a zero
point's compensation there, apparently lost); on srcnn-x3 it was 0.21 mean off ONNX Runtime on the same file, which
is 0.006 off fp32. Smallest repro:
two [1, 4, 8, 8] inputs, Concat on channels, Q/DQ at scale 0.01 zero point int8 0, a 3x3 Conv with int8 per-channel
Q/DQ weights: OpenVINO's mean error against ONNX Runtime is 0.63 on outputs of mean 1.2. Right: uint8 with zero
point 0 or 128, one QuantizeLinear per Concat input with the Concat on the int8 tensors and one DequantizeLinear
after it (then the Conv runs s8, 16 % slower than u8 here), a single input; wrong also with the Q/DQ on each input.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

# FoldedSRCNN's parameters, as torch's exporter names their initializers
WEIGHTS = ("fold1.weight", "fold2.weight", "fold3.weight")
INT64_MAX = np.iinfo(np.int64).max


def _span(weight: np.ndarray) -> tuple[int, int, int, int]:
    """First and last non-zero row and column of a conv kernel [out, in, kh, kw]."""
    nz = np.abs(weight).sum(axis=(0, 1))
    rows, cols = np.nonzero(nz.sum(axis=1))[0], np.nonzero(nz.sum(axis=0))[0]
    return int(rows[0]), int(rows[-1]), int(cols[0]), int(cols[-1])


def _attr(node: onnx.NodeProto, name: str, default):
    found = [a for a in node.attribute if a.name == name]
    return helper.get_attribute_value(found[0]) if found else default


def _chain(model: onnx.ModelProto) -> list[onnx.NodeProto] | None:
    """fold1, Relu, fold2, Relu, fold3 of a folded SRCNN's graph, each read by the next only, convs unpadded; None
    when the graph has another shape."""
    by_weight = {n.input[1]: n for n in model.graph.node if n.op_type == "Conv" and len(n.input) > 2}
    if not all(w in by_weight for w in WEIGHTS):
        return None
    readers: dict[str, list[onnx.NodeProto]] = {}
    for n in model.graph.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    f1, f2, f3 = (by_weight[w] for w in WEIGHTS)
    chain = [f1]
    for nxt in ("Relu", f2, "Relu", f3):
        after = readers.get(chain[-1].output[0], [])
        ok = len(after) == 1 and (after[0] is nxt if isinstance(nxt, onnx.NodeProto) else after[0].op_type == nxt)
        if not ok:
            return None
        chain.append(after[0])
    if any(any(_attr(c, "pads", [])) or _attr(c, "auto_pad", b"NOTSET") not in (b"NOTSET", b"VALID")
           or any(s != 1 for s in _attr(c, "strides", [])) or any(d != 1 for d in _attr(c, "dilations", []))
           for c in (f1, f2, f3)) or _attr(f1, "group", 1) != 1 or _attr(f3, "group", 1) != 1:
        return None
    return chain


def split_phases(model: onnx.ModelProto) -> bool:
    """Rewrite a folded SRCNN's fold1 -> fold2 -> fold3 as one chain per output phase summed by Adds (the same
    function, fp32 rounding apart); the nodes are named /fold{1,2,3}/phase{g}/Conv. False when the graph is not one."""
    chain = _chain(model)
    if chain is None:
        return False
    f1, _, f2, _, f3 = chain
    inits = {t.name: t for t in model.graph.initializer}
    w1, b1, w2, b2, w3, b3 = (numpy_helper.to_array(inits[c.input[i]]) for c in (f1, f2, f3) for i in (1, 2))
    n = int(_attr(f2, "group", 1))
    co, mid = w1.shape[0] // n, w2.shape[0] // n
    if n < 2 or w2.shape[1] != co or w3.shape[1] != n * mid or w1.shape[0] != n * co:
        return False
    new, added, total = [], [], None
    for g in range(n):
        nodes, tensors, out = _phase(g, f1.input[0], w1[g * co:(g + 1) * co], b1[g * co:(g + 1) * co],
                                     w2[g * mid:(g + 1) * mid], b2[g * mid:(g + 1) * mid], w3[:, g * mid:(g + 1) * mid],
                                     b3 if g == 0 else None)
        new += nodes
        added += tensors
        if total is not None:
            last = g == n - 1
            new.append(helper.make_node("Add", [total, out], [f3.output[0] if last else f"/fold3/sum{g}"],
                                        name=f"/fold3/Add{g}"))
            out = new[-1].output[0]
        total = out
    drop = {id(c) for c in chain}
    nodes = []
    for node in model.graph.node:
        if node is f1:
            nodes += new
        if id(node) not in drop:
            nodes.append(node)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    kept = {i for node in model.graph.node for i in node.input}
    old = [t for t in model.graph.initializer if t.name not in kept]
    for t in old:
        model.graph.initializer.remove(t)
    model.graph.initializer.extend(added)
    return True


def _phase(g: int, image: str, w1, b1, w2, b2, w3, b3) -> tuple[list, list, str]:
    """Phase g's chain (nodes, initializers, output name): the padded image sliced to what its cropped fold1 and
    fold3 read, fold1_g, Relu, fold2_g, Relu, fold3_g (fold3's bias on phase 0's only)."""
    r0, r1, c0, c1 = _span(w1)
    a0, a1, e0, e1 = _span(w3)
    k1, k3 = w1.shape[-1], w3.shape[-1]
    # fold3_g's output row o reads fold1_g's rows o + a0 .. o + a1, each reading the image's rows from its r0 on
    end = lambda last, a_last: -((k1 - 1 - last) + (k3 - 1 - a_last)) or INT64_MAX  # noqa: E731
    tag = f"phase{g}"
    t = {f"{tag}.starts": np.array([r0 + a0, c0 + e0], np.int64),
         f"{tag}.ends": np.array([end(r1, a1), end(c1, e1)], np.int64),
         f"{tag}.axes": np.array([2, 3], np.int64),
         f"fold1.{tag}.weight": w1[:, :, r0:r1 + 1, c0:c1 + 1], f"fold1.{tag}.bias": b1,
         f"fold2.{tag}.weight": w2, f"fold2.{tag}.bias": b2,
         f"fold3.{tag}.weight": w3[:, :, a0:a1 + 1, e0:e1 + 1]}
    if b3 is not None:
        t[f"fold3.{tag}.bias"] = b3
    nodes = [helper.make_node("Slice", [image, f"{tag}.starts", f"{tag}.ends", f"{tag}.axes"],
                              [f"/{tag}/Slice_output_0"], name=f"/{tag}/Slice")]
    for layer in ("fold1", "fold2", "fold3"):
        weight, bias = f"{layer}.{tag}.weight", f"{layer}.{tag}.bias"
        name = f"/{layer}/{tag}"
        nodes.append(helper.make_node("Conv", [nodes[-1].output[0], weight, *([bias] if bias in t else [])],
                                      [f"{name}/Conv_output_0"], name=f"{name}/Conv",
                                      kernel_shape=list(t[weight].shape[2:])))
        if layer != "fold3":
            nodes.append(helper.make_node("Relu", nodes[-1].output, [f"{name}/Relu_output_0"], name=f"{name}/Relu"))
    tensors = [numpy_helper.from_array(np.ascontiguousarray(v), k) for k, v in t.items()]
    return nodes, tensors, nodes[-1].output[0]
