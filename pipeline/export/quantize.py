"""int8 Q/DQ ONNX files, made from an fp32 file by ONNX Runtime's quantization tools (quantize_static).

    int8_file(fp32_path, scale, log=None) -> Path   the cached Q/DQ file (made on a miss)

The recipe (RECIPE, part of the file's name), all from ONNX Runtime's quantize_static: QDQ format, so one file
serves OpenVINO, ONNX Runtime and TensorRT's explicit quantization; symmetric int8 activations and per-channel
symmetric int8 weights; ranges from the 99.999th percentile of the activations (CalibrationMethod.Percentile) on 5
LR crops of each *training* image we ship (never the held-out ones), degraded at the graph's scale as in training.
Mixed precision (nodes_to_exclude): the first layer's convolutions (no activation upstream: SRCNN's 9x9 conv1,
which folding splits into several convolutions on the LR grid) and the last layer's (no activation downstream: the
reconstruction conv) stay in float; the middle ones run int8. Our sr ops (sr::DynamicResize, sr::DeformConv2d) are
never quantized: only Conv nodes are. Biases stay float (QuantizeBias off, recipe 4): TensorRT's DequantizeLinear
takes int8, not the int32 bias ONNX Runtime would make, and OpenVINO and TensorRT fuse a float bias into the int8
convolution. Held-out Y-PSNR loss through OpenVINO (pipeline.analysis.quality, 2-core AMX
Xeon), first layer only in float -> first and last in float:

    srcnn-x3      0.109 -> 0.069 dB   within the 0.10 dB budget
    deform-srcnn  0.67  -> 0.030 dB   within (its int8 part is the offset/mask conv feeding DeformConv2d; leaving
                                      that in float too, custom_op_neighbours, would leave nothing to quantize)
    srcnn         0.78  -> 0.22 dB    OVER: its middle conv alone costs 0.22 dB (min-max ranges 0.27 dB);
                                      `auto` never picks it and `sr --precision int8` says it is over budget.
                                      scripts/int8_recipes.py measures other recipes (KEEP:METHOD:CROPS:PERCENTILE).
Other range estimators on srcnn-x3: entropy 0.105 dB (first and last in float), min-max 0.166 dB (first only).
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

RECIPE = 4  # bumped when the recipe changes, so older int8 files are not reused
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


def excluded(model: onnx.ModelProto, keep: tuple[str, ...] = KEEP_FLOAT) -> list[str]:
    """The Conv nodes the recipe leaves in float: 'first' (first_layer_convs), 'last' (last_layer_convs) and
    'custom' (custom_op_neighbours)."""
    rules = {"first": first_layer_convs, "last": last_layer_convs, "custom": custom_op_neighbours}
    return list(dict.fromkeys(name for k in keep for name in rules[k](model)))


def quantize(fp32: Path, dst: Path, scale: float, *, method: str = METHOD, keep: tuple[str, ...] = KEEP_FLOAT,
             crops: int = CROPS, percentile: float = PERCENTILE) -> None:
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
    skip = excluded(model, keep)
    if not [n for n in model.graph.node if n.op_type == "Conv" and n.name not in skip]:
        raise PipelineError(f"{fp32.name}: the int8 recipe leaves every convolution in float: nothing to quantize")

    class Reader(CalibrationDataReader):
        def __init__(self):
            self._it = iter(feeds)

        def get_next(self):
            return next(self._it, None)

    with contextlib.redirect_stdout(io.StringIO()):  # its calibrator prints histogram settings
        quantize_static(str(fp32), str(dst), Reader(), quant_format=QuantFormat.QDQ, op_types_to_quantize=["Conv"],
                        per_channel=True, activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                        calibrate_method=getattr(CalibrationMethod, method), nodes_to_exclude=skip,
                        extra_options={"ActivationSymmetric": True, "WeightSymmetric": True,
                                       "CalibPercentile": percentile, "QuantizeBias": False})


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
