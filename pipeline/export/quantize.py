"""int8 Q/DQ ONNX files, made from an fp32 file by ONNX Runtime's quantization tools (quantize_static).

    int8_file(fp32_path, scale, log=None) -> Path   the cached Q/DQ file (made on a miss)

The recipe (RECIPE, part of the file's name), all from ONNX Runtime's quantize_static: QDQ format, so one file
serves OpenVINO, ONNX Runtime and TensorRT's explicit quantization; symmetric int8 activations and per-channel
symmetric int8 weights; ranges from the 99.999th percentile of the activations (CalibrationMethod.Percentile) on 5
LR crops of each *training* image we ship (never the held-out ones), degraded at the graph's scale as in training.
Mixed precision (nodes_to_exclude): the first layer's convolutions (no activation upstream) and the last layer's (no
activation downstream: the reconstruction conv) stay in float, except the *image convs*: a first-layer conv that
reads the 8-bit image itself (folded SRCNN's LR-grid conv1, 9x9 conv1 and bicubic upsampler in one: most of the
MACs) runs int8 with its input shifted by 128/255 and quantized at exactly 1/255, so an 8-bit image enters int8
without loss (exact_image_input). Conv outputs are not quantized (OpTypesToExcludeOutputQuantization): the next
conv's input quantization follows its activation, and a pre-ReLU output quantized symmetric lost 0.23 dB more. Our
sr ops (sr::DynamicResize, sr::DeformConv2d) are never quantized: only Conv nodes are. Biases stay float
(QuantizeBias off): TensorRT's DequantizeLinear takes int8, not the int32 bias ONNX Runtime would make, and
OpenVINO and TensorRT fuse a float bias into the int8 convolution.

Held-out Y-PSNR loss through OpenVINO (pipeline.analysis.quality; int8 layers, float parts in bf16 where the CPU
has it: openvino_backend.OV_PRECISION), recipe 4 (first and last layer in float, Conv outputs quantized) ->
recipe 5, and OpenVINO's time at 256x256 on a 2-core EPYC with AVX512-BF16/VNNI (no AMX):

    srcnn-x3      0.070 -> 0.063 dB   within the 0.10 dB budget; 136 -> 68 ms (bf16 alone: 86 ms)
    deform-srcnn  0.030 -> 0.076 dB   within (its int8 part is the offset/mask conv feeding DeformConv2d; leaving
                                      that in float too, custom_op_neighbours, would leave nothing to quantize;
                                      its float parts, DeformConv2d included, now run bf16); 615 -> 496 ms
    srcnn         0.22  -> 0.18 dB    OVER: `auto` never picks it and `sr --precision int8` says it is over budget.

With float parts in f32 instead, recipe 5 on srcnn-x3 lost 0.067 dB at 102 ms. The last layer in int8 too lost
0.098-0.103 dB (at the budget's edge, so not shipped). scripts/int8_recipes.py measures other recipes
(KEEP:METHOD:CROPS:PERCENTILE).
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

RECIPE = 5  # bumped when the recipe changes, so older int8 files are not reused
CROP = 120  # LR calibration crop side: above every folded graph's smallest input
PERCENTILE = 99.999
METHOD = "Percentile"  # onnxruntime.quantization.CalibrationMethod's name
KEEP_FLOAT = ("first", "last")  # the convolutions left in float, see excluded()
CROPS = 5  # calibration crops per training image


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
    the bicubic upsampler. Their input holds 8-bit pixel values, which exact_image_input quantizes losslessly."""
    producer = {out: n for n in model.graph.node for out in n.output}
    weights = {t.name for t in model.graph.initializer}
    image = {i.name for i in model.graph.input} - weights

    def from_image(name: str) -> bool:
        node = producer.get(name)
        if node is None:
            return name in image
        pad_value = node.input[2] if node.op_type == "Pad" and len(node.input) > 2 else ""
        return node.op_type in PIXEL_MOVES and pad_value == "" and from_image(node.input[0])

    def unpadded(n) -> bool:
        attrs = {a.name: a for a in n.attribute}
        return not any(attrs["pads"].ints if "pads" in attrs else []) and \
            (attrs["auto_pad"].s if "auto_pad" in attrs else b"NOTSET") in (b"NOTSET", b"VALID")

    return [n.name for n in model.graph.node
            if n.op_type == "Conv" and n.input[1] in weights and unpadded(n) and from_image(n.input[0])]


def exact_image_input(model: onnx.ModelProto) -> dict[str, list[dict]]:
    """Make each image conv (image_convs) read x - IMAGE_SHIFT, its bias raised by sum(W) * IMAGE_SHIFT so it computes
    the same (no padding of its own, so no border term); returns ONNX Runtime's TensorQuantOverrides that quantize
    each shifted input at scale 1/255, zero point 0. Symmetric int8 of the unshifted image keeps 7 bits of 8 (0.09 dB
    more loss on srcnn-x3); shifted, an 8-bit image enters int8 exactly."""
    from onnx import numpy_helper

    inits = {t.name: t for t in model.graph.initializer}
    convs = set(image_convs(model))
    shift = numpy_helper.from_array(np.array(IMAGE_SHIFT, np.float32), "sr_image_shift")
    nodes, overrides = [], {}
    for n in model.graph.node:
        if n.name in convs:
            w = numpy_helper.to_array(inits[n.input[1]]).astype(np.float64)
            has_bias = len(n.input) > 2 and n.input[2] != ""
            b = numpy_helper.to_array(inits[n.input[2]]) if has_bias else np.zeros(w.shape[0])
            bias = numpy_helper.from_array((b + w.sum(axis=(1, 2, 3)) * IMAGE_SHIFT).astype(np.float32),
                                           f"{n.name}_shifted_bias")
            shifted = f"{n.input[0]}_shifted_{len(overrides)}"
            nodes.append(onnx.helper.make_node("Sub", [n.input[0], shift.name], [shifted], name=f"{n.name}_shift"))
            model.graph.initializer.append(bias)
            n.input[0] = shifted
            if has_bias:
                n.input[2] = bias.name
            else:
                n.input.append(bias.name)
            overrides[shifted] = [{"scale": np.array(IMAGE_STEP, np.float32), "zero_point": np.array(0, np.int8)}]
        nodes.append(n)
    if overrides:
        model.graph.initializer.append(shift)
        del model.graph.node[:]
        model.graph.node.extend(nodes)
    return overrides


def excluded(model: onnx.ModelProto, keep: tuple[str, ...] = KEEP_FLOAT, exact_image: bool = True) -> list[str]:
    """The Conv nodes the recipe leaves in float: 'first' (first_layer_convs), 'last' (last_layer_convs) and
    'custom' (custom_op_neighbours); with exact_image, the image convs run int8 whatever the rules say."""
    rules = {"first": first_layer_convs, "last": last_layer_convs, "custom": custom_op_neighbours}
    exact = set(image_convs(model)) if exact_image else set()
    return list(dict.fromkeys(name for k in keep for name in rules[k](model) if name not in exact))


def quantize(fp32: Path, dst: Path, scale: float, *, method: str = METHOD, keep: tuple[str, ...] = KEEP_FLOAT,
             crops: int = CROPS, percentile: float = PERCENTILE, exact_image: bool = True,
             float_outputs: bool = True) -> None:
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
    skip = excluded(model, keep, exact_image)
    overrides = exact_image_input(model) if exact_image else {}
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
