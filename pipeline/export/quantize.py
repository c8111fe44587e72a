"""int8 Q/DQ ONNX files, made from an fp32 file by ONNX Runtime's quantization tools (quantize_static).

    int8_file(fp32_path, scale, log=None) -> Path   the cached Q/DQ file (made on a miss)

The recipe (RECIPE, part of the file's name), all from ONNX Runtime's quantize_static: QDQ format, so one file
serves OpenVINO, ONNX Runtime and TensorRT's explicit quantization; symmetric int8 activations and per-channel
symmetric int8 weights; ranges from the 99.999th percentile of the activations (CalibrationMethod.Percentile) on 5
LR crops of each *training* image we ship (never the held-out ones), degraded at the graph's scale as in training.
Mixed precision (nodes_to_exclude): the first layer's convolutions (no activation upstream) and the last layer's (no
activation downstream: the reconstruction conv) stay in float, with two exceptions that run int8 on a *shifted*
input (shift_inputs: the conv reads x - c, its bias carries c, zero point still 0):
- the *image convs*: a first-layer conv that reads the 8-bit image itself (folded SRCNN's LR-grid conv1, 9x9 conv1
  and bicubic upsampler in one: most of the MACs), its input shifted by 128/255 and quantized at exactly 1/255, so
  an 8-bit image enters int8 without loss;
- the *ReLU-fed convs* without padding of their own (relu_convs: folded SRCNN's fold2 and, in the last layer,
  fold3): their input is never negative, so it is shifted by 128 steps and fills all of int8 instead of its
  positive half (one bit more); the step is the input's 99.999th percentile / 255 (input_stats).
A shifted conv's bias is then corrected with the int8 weights the file holds (settle_biases): b + W mean + Wq
(c - mean), each input channel's calibration mean, so the weights' rounding error meets the input's deviation from
its mean rather than the shift (without it, srcnn-x3's int8 output was 0.047 RMS off fp32; with it 0.005).
Conv outputs are not quantized (OpTypesToExcludeOutputQuantization): the next conv's input quantization follows its
activation, and a pre-ReLU output quantized symmetric lost 0.23 dB more. Our sr ops (sr::DynamicResize,
sr::DeformConv2d) are never quantized: only Conv nodes are. Biases stay float (QuantizeBias off): TensorRT's
DequantizeLinear takes int8, not the int32 bias ONNX Runtime would make, and OpenVINO and TensorRT fuse a float
bias into the int8 convolution.

Held-out Y-PSNR loss through OpenVINO (pipeline.analysis.quality; int8 layers, float parts in bf16 where the CPU
has it: openvino_backend.OV_PRECISION), recipe 5 (image convs shifted, the rest of the first layer and the last in
float) -> recipe 6, on a 2-core AMX Xeon (scripts/int8_recipes.py):

    srcnn-x3      0.063 -> 0.052 dB   within the 0.10 dB budget; 33 -> 25 ms at 256x256 (bf16 alone: 34 ms): with
                                      fold3 in int8 too, OpenVINO runs the three LR-grid convs int8 back to back
                                      (fold3 in bf16 between int8 layers: 0.035 dB but 47-50 ms, layout reorders)
    deform-srcnn  0.076 -> 0.076 dB   within (its last conv is padded: float; its int8 part is the offset/mask
                                      conv feeding DeformConv2d, which custom_op_neighbours could keep in float)
    srcnn         0.18  -> 0.18 dB    OVER (fold3 in int8 costs it 0.11: with fold3 in float it lost 0.074 dB):
                                      `auto` never picks it and `sr --precision int8` says it is over budget.

scripts/int8_recipes.py measures other recipes (KEEP:METHOD:CROPS:PERCENTILE and switches).
"""
from __future__ import annotations

import contextlib
import hashlib
import io
from pathlib import Path

import numpy as np
import onnx

from pipeline.artifacts.atomic import atomic_path
from pipeline.artifacts.cache import cache_dir
from pipeline.errors import PipelineError, first_line

RECIPE = 6  # bumped when the recipe changes, so older int8 files are not reused
CROP = 120  # LR calibration crop side: above every folded graph's smallest input
PERCENTILE = 99.999
METHOD = "Percentile"  # onnxruntime.quantization.CalibrationMethod's name
KEEP_FLOAT = ("first", "last")  # the convolutions left in float, see excluded()
CROPS = 5  # calibration crops per training image
SHIFT_RELU = True  # ReLU-fed convs read their input shifted into all of int8 (relu_convs, shift_inputs)


def _sha(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


def int8_path(fp32: Path) -> Path:
    return cache_dir() / "int8" / f"{fp32.stem}-{_sha(fp32)}-q{RECIPE}.onnx"


ACTIVATIONS = ("Relu", "LeakyRelu", "PRelu", "Sigmoid", "Tanh", "Clip", "HardSigmoid", "Elu", "Gelu", "Mish")


def last_layer_convs(model: onnx.ModelProto) -> list[str]:
    """Conv nodes with no activation downstream: the network's last (linear) layer, however the graph splits it."""
    consumers: dict[str, list] = {}
    for n in model.graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    cache: dict[str, bool] = {}

    def activates(name: str) -> bool:  # whether an activation lies downstream of this value
        if name not in cache:
            cache[name] = False
            cache[name] = any(n.op_type in ACTIVATIONS or any(activates(o) for o in n.output)
                              for n in consumers.get(name, []))
        return cache[name]

    return [n.name for n in model.graph.node if n.op_type == "Conv" and not any(activates(o) for o in n.output)]


def custom_op_neighbours(model: onnx.ModelProto) -> list[str]:
    """Conv nodes that feed one of our custom-domain ops (through shape-free ops such as Slice and Sigmoid) or read
    its output directly: DeformConv2d's offset/mask conv, whose sampling positions int8 would move."""
    producer = {out: n for n in model.graph.node for out in n.output}
    custom = [n for n in model.graph.node if n.domain not in ("", "ai.onnx")]
    found: list[str] = []

    def up(name: str, depth: int = 0) -> None:
        node = producer.get(name)
        if node is None or depth > 6:
            return
        if node.op_type == "Conv":
            found.append(node.name)
        elif node.domain in ("", "ai.onnx"):
            for i in node.input:
                up(i, depth + 1)

    for c in custom:
        for i in c.input[1:]:  # not the data input: that is the previous layer, handled as any other
            up(i)
    return list(dict.fromkeys(found))


def first_layer_convs(model: onnx.ModelProto) -> list[str]:
    """Conv nodes with no activation upstream: the network's first (linear) layer, however the graph splits it
    (folded SRCNN computes its conv1 as several convolutions on the LR grid)."""
    producer = {out: n for n in model.graph.node for out in n.output}
    cache: dict[str, bool] = {}

    def activated(name: str) -> bool:  # whether an activation lies upstream of this value
        if name not in cache:
            node = producer.get(name)
            cache[name] = node is not None and (node.op_type in ACTIVATIONS or any(activated(i) for i in node.input))
        return cache[name]

    return [n.name for n in model.graph.node if n.op_type == "Conv" and not any(activated(i) for i in n.input)]


def _calibration(scale: float, inputs: set[str], crops: int = 5) -> list[dict[str, np.ndarray]]:
    """Feeds for the calibration: `crops` LR crops of every training image (corners, centre, then a fixed random
    draw), degraded at `scale` as in training."""
    from pipeline.data import sample_images
    from pipeline.data.degradation import make_pair

    rng = np.random.default_rng(0)
    feeds = []
    for hr in sample_images.train().values():
        lr, _ = make_pair(hr, scale)
        h, w = lr.shape[:2]
        if min(h, w) < CROP:
            continue
        spots = [(0, 0), (h - CROP, w - CROP), (0, w - CROP), (h - CROP, 0), ((h - CROP) // 2, (w - CROP) // 2)]
        spots += [(int(rng.integers(0, h - CROP + 1)), int(rng.integers(0, w - CROP + 1))) for _ in range(crops)]
        for y, x in spots[:crops]:
            crop = (lr[y:y + CROP, x:x + CROP].astype(np.float32) / 255).transpose(2, 0, 1)[None]
            feed = {"input": np.ascontiguousarray(crop)}
            if "size" in inputs:
                side = int(round(CROP * scale))
                feed["size"] = np.array([side, side], dtype=np.int64)
            feeds.append(feed)
    return feeds


# The image convs' input: an 8-bit pixel k/255 shifted by 128/255 is exactly int8 k - 128 at scale 1/255.
IMAGE_SHIFT = 128 / 255
IMAGE_STEP = 1 / 255
PIXEL_MOVES = ("Pad", "Slice", "Identity")  # ops that move or repeat pixels without arithmetic


def image_convs(model: onnx.ModelProto) -> list[str]:
    """Conv nodes without padding of their own whose data input is the image, moved or repeated by Pad (edge,
    reflect, or the default constant 0: a pixel value) and Slice only: folded SRCNN's LR-grid conv1, which carries
    the bicubic upsampler. Their input holds 8-bit pixel values, which shift_inputs quantizes losslessly."""
    producer = {out: n for n in model.graph.node for out in n.output}
    weights = {t.name for t in model.graph.initializer}
    image = {i.name for i in model.graph.input} - weights

    def from_image(name: str) -> bool:
        node = producer.get(name)
        if node is None:
            return name in image
        pad_value = node.input[2] if node.op_type == "Pad" and len(node.input) > 2 else ""
        return node.op_type in PIXEL_MOVES and pad_value == "" and from_image(node.input[0])

    return [n.name for n in model.graph.node
            if n.op_type == "Conv" and n.input[1] in weights and _unpadded(n) and from_image(n.input[0])]


def _unpadded(node: onnx.NodeProto) -> bool:
    """A Conv with no padding of its own: shifting its input (shift_inputs) has no border term."""
    attrs = {a.name: a for a in node.attribute}
    return not any(attrs["pads"].ints if "pads" in attrs else []) and \
        (attrs["auto_pad"].s if "auto_pad" in attrs else b"NOTSET") in (b"NOTSET", b"VALID")


def relu_convs(model: onnx.ModelProto, skip: set[str]) -> list[str]:
    """Conv nodes left for int8 (not in `skip`, not image convs) without padding of their own whose data input is a
    Relu's output and whose weights are initializers: their input is never negative, so symmetric int8 would waste
    its sign bit on it. (A padded one would need its padding as a Pad before the shift, which OpenVINO cannot fuse
    into the int8 conv: 23 ms more on srcnn-x3's last layer than the conv itself.)"""
    producer = {out: n for n in model.graph.node for out in n.output}
    weights = {t.name for t in model.graph.initializer}
    image = set(image_convs(model))
    return [n.name for n in model.graph.node
            if n.op_type == "Conv" and n.name not in skip | image and n.input[1] in weights
            and getattr(producer.get(n.input[0]), "op_type", "") == "Relu" and _unpadded(n)]


def input_stats(model: onnx.ModelProto, convs: list[str], feeds: list[dict],
                percentile: float) -> dict[str, tuple[np.ndarray, float]]:
    """Each named conv's data input over the calibration feeds (ONNX Runtime, fp32): its mean per channel, and its
    top after cutting the fraction (100 - percentile) / 200 of the values above it, as ONNX Runtime's Percentile
    calibration does (exactly here, from each feed's largest values; its calibrator reads a histogram)."""
    import onnxruntime as ort

    if not convs:
        return {}
    inputs = {n.name: n.input[0] for n in model.graph.node if n.name in convs}
    names = list(dict.fromkeys(inputs.values()))
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    known = {o.name for o in probe.graph.output}
    probe.graph.output.extend(onnx.helper.make_empty_tensor_value_info(t) for t in names if t not in known)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(probe.SerializeToString(), options, providers=["CPUExecutionProvider"])
    sums, tops, count = dict.fromkeys(names, 0.0), {t: [] for t in names}, dict.fromkeys(names, 0)
    cut = (100 - percentile) / 200
    for feed in feeds:
        for t, y in zip(names, session.run(names, feed), strict=True):
            sums[t] = sums[t] + y.astype(np.float64).mean(axis=(0, 2, 3))
            count[t] += y.size
            keep = min(y.size, int(np.ceil(cut * y.size * len(feeds))) + 1)  # enough for the whole set's top
            tops[t].append(np.partition(y.ravel(), y.size - keep)[y.size - keep:])
    stats = {}
    for name, t in inputs.items():
        top = np.sort(np.concatenate(tops[t]))[::-1]
        stats[name] = (sums[t] / len(feeds), float(top[min(len(top) - 1, int(cut * count[t]))]))
    return stats


def settle_biases(path: Path, corrections: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
    """Set each shifted conv's bias from the int8 weights the Q/DQ file holds (shift_inputs' bias correction)."""
    from onnx import numpy_helper

    if not corrections:  # nothing shifted: the file stays as the quantizer wrote it
        return
    model = onnx.load(str(path))
    inits = {t.name: t for t in model.graph.initializer}
    dequant = {n.output[0]: n for n in model.graph.node if n.op_type == "DequantizeLinear"}
    for n in model.graph.node:
        if n.op_type != "Conv" or len(n.input) < 3 or n.input[2] not in corrections:
            continue
        base, moved = corrections[n.input[2]]
        dq = dequant.get(n.input[1])
        if dq is None:  # weights left in float: the bias computed at the rewrite is exact
            continue
        q = numpy_helper.to_array(inits[dq.input[0]]).astype(np.float64)  # symmetric: no zero point
        weight = q * numpy_helper.to_array(inits[dq.input[1]]).astype(np.float64).reshape(-1, *[1] * (q.ndim - 1))
        bias = base + (weight.sum(axis=(2, 3)) * moved).sum(axis=1)
        inits[n.input[2]].CopyFrom(numpy_helper.from_array(bias.astype(np.float32), n.input[2]))
    onnx.save(model, str(path))


def _per_output(node: onnx.NodeProto, weight: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """The input channel means each output channel's weights meet, (out, in per group): grouped convs read a slice."""
    groups = next((a.i for a in node.attribute if a.name == "group"), 1)
    per = weight.shape[1]
    group_of = np.arange(weight.shape[0]) // (weight.shape[0] // groups)
    return np.asarray(mean, np.float64)[group_of[:, None] * per + np.arange(per)]


def shift_inputs(model: onnx.ModelProto, shifts: dict[str, tuple[float, float]],
                 means: dict[str, np.ndarray] | None = None) -> tuple[dict[str, list[dict]], dict]:
    """Make each named Conv (unpadded: no border term) read x - shift, its bias raised by sum(W) * shift so it
    computes the same. Returns ONNX Runtime's TensorQuantOverrides that quantize each shifted input at its step (zero
    point 0), and the bias corrections that settle_biases applies once the int8 weights Wq exist: bias = b + W mean +
    Wq (shift - mean) with each input channel's mean (input_stats), so the weights' rounding error meets the input's
    deviation from its mean, not the shift, and its constant part is gone (bias correction)."""
    from onnx import helper, numpy_helper

    inits = {t.name: t for t in model.graph.initializer}
    nodes, overrides, corrections = [], {}, {}
    for n in model.graph.node:
        if n.name in shifts:
            shift, step = shifts[n.name]
            tag = f"{n.name}_shift".lstrip("/").replace("/", "_")
            w = numpy_helper.to_array(inits[n.input[1]]).astype(np.float64)
            has_bias = len(n.input) > 2 and n.input[2] != ""
            b = numpy_helper.to_array(inits[n.input[2]]).astype(np.float64) if has_bias else np.zeros(w.shape[0])
            bias = numpy_helper.from_array((b + w.sum(axis=(1, 2, 3)) * shift).astype(np.float32), f"{tag}_bias")
            mean = np.full(w.shape[1], shift) if means is None else _per_output(n, w, means[n.name])
            corrections[bias.name] = (b + (w.sum(axis=(2, 3)) * mean).sum(axis=1), shift - mean)
            value = numpy_helper.from_array(np.array(shift, np.float32), f"{tag}_value")
            model.graph.initializer.extend([bias, value])
            nodes.append(helper.make_node("Sub", [n.input[0], value.name], [f"{tag}ed"], name=tag))
            n.input[0] = f"{tag}ed"
            if has_bias:
                n.input[2] = bias.name
            else:
                n.input.append(bias.name)
            overrides[n.input[0]] = [{"scale": np.array(step, np.float32), "zero_point": np.array(0, np.int8)}]
        nodes.append(n)
    if overrides:
        del model.graph.node[:]
        model.graph.node.extend(nodes)
    return overrides, corrections


def excluded(model: onnx.ModelProto, keep: tuple[str, ...] = KEEP_FLOAT, exact_image: bool = True,
             shift_relu: bool = SHIFT_RELU) -> list[str]:
    """The Conv nodes the recipe leaves in float: 'first' (first_layer_convs), 'last' (last_layer_convs) and
    'custom' (custom_op_neighbours); with exact_image, the image convs run int8 whatever the rules say, and with
    shift_relu so do the last layer's convs whose input is shifted (relu_convs: all 8 bits of int8 for it)."""
    rules = {"first": first_layer_convs, "last": last_layer_convs, "custom": custom_op_neighbours}
    exact = set(image_convs(model)) if exact_image else set()
    shifted = set(relu_convs(model, set())) if shift_relu else set()
    return list(dict.fromkeys(name for k in keep for name in rules[k](model)
                              if name not in exact and not (k == "last" and name in shifted)))


def quantize(fp32: Path, dst: Path, scale: float, *, method: str = METHOD, keep: tuple[str, ...] = KEEP_FLOAT,
             crops: int = CROPS, percentile: float = PERCENTILE, exact_image: bool = True,
             float_outputs: bool = True, shift_relu: bool = SHIFT_RELU) -> None:
    """Write the Q/DQ file of `fp32` (calibrated at `scale`) to `dst`. The keywords are the recipe (the defaults
    are the shipped one); scripts/int8_recipes.py tries others."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    model = onnx.load(str(fp32), load_external_data=False)
    feeds = _calibration(scale, {i.name for i in model.graph.input}, crops)
    if not feeds:
        raise PipelineError("no training image is large enough to calibrate int8")
    skip = excluded(model, keep, exact_image, shift_relu)
    image = image_convs(model) if exact_image else []
    stats = input_stats(model, image + (relu_convs(model, set(skip)) if shift_relu else []), feeds, percentile)
    # an image conv's input: 8-bit pixels at 1/255; a ReLU's: [0, its percentile] over 255 steps
    steps = {name: IMAGE_STEP if name in image else max(top, 1e-8) / 255 for name, (_, top) in stats.items()}
    shifts = {name: (IMAGE_SHIFT if name in image else 128 * step, step) for name, step in steps.items()}
    overrides, corrections = shift_inputs(model, shifts, {name: mean for name, (mean, _) in stats.items()})
    if not [n for n in model.graph.node if n.op_type == "Conv" and n.name not in skip]:
        raise PipelineError(f"{fp32.name}: the int8 recipe leaves every convolution in float: nothing to quantize")

    class Reader(CalibrationDataReader):
        def __init__(self):
            self._it = iter(feeds)

        def get_next(self):
            return next(self._it, None)

    with contextlib.redirect_stdout(io.StringIO()):  # its calibrator prints histogram settings
        quantize_static(model, str(dst), Reader(), quant_format=QuantFormat.QDQ, op_types_to_quantize=["Conv"],
                        per_channel=True, activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                        calibrate_method=getattr(CalibrationMethod, method), nodes_to_exclude=skip,
                        extra_options={"ActivationSymmetric": True, "WeightSymmetric": True,
                                       "CalibPercentile": percentile, "QuantizeBias": False,
                                       "TensorQuantOverrides": overrides,
                                       "OpTypesToExcludeOutputQuantization": ["Conv"] if float_outputs else []})
    settle_biases(dst, corrections)


def int8_file(fp32: Path, scale: float, log=None) -> Path:
    """The int8 Q/DQ file of `fp32`, from the cache or made now (a few seconds; needs the export extra for the
    training images' degradation)."""
    path = int8_path(Path(fp32))
    if path.is_file():
        return path
    if log is not None:
        log(f"quantizing {Path(fp32).name} to int8 (calibrated on the training images), once: {path}")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with atomic_path(path) as tmp:
            quantize(Path(fp32), Path(tmp), scale)
    except ImportError as e:
        raise PipelineError(f"making the int8 file needs {e.name} (pip install 'srdeploy[export]')") from None
    except PipelineError:
        raise
    except Exception as e:  # ONNX Runtime's quantizer raises its own types
        raise PipelineError(f"cannot quantize {Path(fp32).name} to int8: {first_line(e)}") from None
    return path
