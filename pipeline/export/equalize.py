"""Cross-layer equalization before int8: the same function in fp32, channels that share one int8 step made alike.

    equalize(model, feeds) -> list[str]   rescales each Conv -> Relu -> Conv(s) pair in place; the convs it touched

An activation is quantized with one step for all its channels (per tensor), so a channel whose values stay small
is read with few int8 levels. ReLU is positively homogeneous (relu(x / s) = relu(x) / s for s > 0), so dividing
the producing conv's output channel c (weights and bias) by s_c and multiplying the consuming convs' input channel
c weights by s_c computes the same, with channel c's range divided by s_c. s_c = (range_c / max range) ** ALPHA:
the small channels are raised towards the largest, the consumer's weights (rounded per *output* channel) meet the
other half of the balance (SmoothQuant's rule; the producer's weights, rounded per output channel, do not care).
"""
from __future__ import annotations

import numpy as np
import onnx

ALPHA = 0.5  # how far each channel's range moves towards the largest one's (0: untouched, 1: all equal)
FLOOR = 1e-3  # a channel that never fires is not raised above this share of the largest range


def _pairs(model: onnx.ModelProto) -> list[tuple[onnx.NodeProto, str, list[onnx.NodeProto]]]:
    """(producer Conv, its Relu's output, the Convs reading that output), where the Relu is the producer's only
    reader, the Convs its only readers, and every conv ungrouped with initializer weights."""
    weights = {t.name for t in model.graph.initializer}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for n in model.graph.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    outputs = {o.name for o in model.graph.output}

    def plain(n: onnx.NodeProto) -> bool:
        return n.op_type == "Conv" and n.input[1] in weights and \
            next((a.i for a in n.attribute if a.name == "group"), 1) == 1

    uses: dict[str, int] = {}
    for n in model.graph.node:
        for i in n.input:
            uses[i] = uses.get(i, 0) + 1

    def own(n: onnx.NodeProto, k: int) -> bool:  # its weights (k=1) or bias (k=2) are no other node's
        return len(n.input) > k and n.input[k] in weights and uses[n.input[k]] == 1

    found = []
    for relu in (n for n in model.graph.node if n.op_type == "Relu"):
        producer = [n for n in model.graph.node if relu.input[0] in n.output]
        consumers = readers.get(relu.output[0], [])
        if len(producer) == 1 and plain(producer[0]) and own(producer[0], 1) and own(producer[0], 2) \
                and readers.get(relu.input[0]) == [relu] \
                and consumers and all(plain(c) and own(c, 1) and c.input[0] == relu.output[0] for c in consumers) \
                and relu.output[0] not in outputs and relu.input[0] not in outputs:
            found.append((producer[0], relu.output[0], consumers))
    return found


def equalize(model: onnx.ModelProto, feeds: list[dict]) -> list[str]:
    """Rescale every Conv -> Relu -> Conv(s) pair (module docstring), each channel's range its max over `feeds`
    (ONNX Runtime, fp32). Returns the names of the convs whose weights changed."""
    import onnxruntime as ort
    from onnx import numpy_helper

    pairs = _pairs(model)
    if not pairs or not feeds:
        return []
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    known = {o.name for o in probe.graph.output}
    tensors = [t for _, t, _ in pairs]
    probe.graph.output.extend(onnx.helper.make_empty_tensor_value_info(t) for t in tensors if t not in known)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(probe.SerializeToString(), options, providers=["CPUExecutionProvider"])
    top = {t: 0.0 for t in tensors}
    for feed in feeds:
        for t, y in zip(tensors, session.run(tensors, feed), strict=True):
            top[t] = np.maximum(top[t], y.max(axis=(0, 2, 3)))
    inits = {t.name: t for t in model.graph.initializer}
    touched = []
    for producer, t, consumers in pairs:
        r = np.asarray(top[t], np.float64)
        s = (np.maximum(r, FLOOR * r.max()) / max(r.max(), 1e-12)) ** ALPHA
        for name, shape in ((producer.input[1], (-1, 1, 1, 1)), (producer.input[2], (-1,))):
            value = numpy_helper.to_array(inits[name]).astype(np.float64) / s.reshape(shape)
            inits[name].CopyFrom(numpy_helper.from_array(value.astype(np.float32), name))
        for c in consumers:
            value = numpy_helper.to_array(inits[c.input[1]]).astype(np.float64) * s.reshape(1, -1, 1, 1)
            inits[c.input[1]].CopyFrom(numpy_helper.from_array(value.astype(np.float32), c.input[1]))
        touched += [producer.name, *(c.name for c in consumers)]
    return touched
