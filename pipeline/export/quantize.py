"""int8 Q/DQ ONNX files, made from an fp32 file by ONNX Runtime's quantization tools (quantize_static).

    int8_file(fp32_path, scale, log=None) -> Path   the cached Q/DQ file (made on a miss)

The recipe (RECIPE, part of the file's name): QDQ format, so one file serves OpenVINO, ONNX Runtime and TensorRT's
explicit quantization; symmetric int8 activations and per-channel symmetric int8 weights; ranges from the 99.999th
percentile of the activations on crops of the *training* images we ship (never the held-out ones), degraded at the
graph's scale as in training. Mixed precision: the first layer's convolutions (those with no activation upstream:
SRCNN's 9x9 conv1, which folding splits into several convolutions on the LR grid) stay in float. Measured on
srcnn-x3's folded x3 graph, held-out Y-PSNR through ONNX Runtime: min-max ranges lose 0.25 dB, percentile ranges
0.21 dB. With this recipe the whole-image loss through OpenVINO is 0.11 dB on srcnn-x3 (just over the 0.10 dB
budget) and 0.7-0.8 dB on srcnn and deform-srcnn: int8 runs, and says it is over budget wherever it is used
(pipeline.analysis.quality); getting it within budget needs more than post-training quantization. Our sr ops
(sr::DynamicResize, sr::DeformConv2d) are never quantized: only Conv nodes are.
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

RECIPE = 2  # bumped when the recipe changes, so older int8 files are not reused
CROP = 120  # LR calibration crop side: above every folded graph's smallest input
PERCENTILE = 99.999


def _sha(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


def int8_path(fp32: Path) -> Path:
    return cache_dir() / "int8" / f"{fp32.stem}-{_sha(fp32)}-q{RECIPE}.onnx"


ACTIVATIONS = ("Relu", "LeakyRelu", "PRelu", "Sigmoid", "Tanh", "Clip", "HardSigmoid", "Elu", "Gelu", "Mish")


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


def _calibration(scale: float, inputs: set[str]) -> list[dict[str, np.ndarray]]:
    """Feeds for the calibration: 5 LR crops of every training image, degraded at `scale` as in training."""
    from pipeline.data import sample_images
    from pipeline.data.degradation import make_pair

    feeds = []
    for hr in sample_images.train().values():
        lr, _ = make_pair(hr, scale)
        h, w = lr.shape[:2]
        if min(h, w) < CROP:
            continue
        for y, x in ((0, 0), (h - CROP, w - CROP), (0, w - CROP), (h - CROP, 0), ((h - CROP) // 2, (w - CROP) // 2)):
            crop = (lr[y:y + CROP, x:x + CROP].astype(np.float32) / 255).transpose(2, 0, 1)[None]
            feed = {"input": np.ascontiguousarray(crop)}
            if "size" in inputs:
                side = int(round(CROP * scale))
                feed["size"] = np.array([side, side], dtype=np.int64)
            feeds.append(feed)
    return feeds


def quantize(fp32: Path, dst: Path, scale: float) -> None:
    """Write the Q/DQ file of `fp32` (calibrated at `scale`) to `dst`."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    model = onnx.load(str(fp32), load_external_data=False)
    feeds = _calibration(scale, {i.name for i in model.graph.input})
    if not feeds:
        raise PipelineError("no training image is large enough to calibrate int8")

    class Reader(CalibrationDataReader):
        def __init__(self):
            self._it = iter(feeds)

        def get_next(self):
            return next(self._it, None)

    with contextlib.redirect_stdout(io.StringIO()):  # its calibrator prints histogram settings
        quantize_static(str(fp32), str(dst), Reader(), quant_format=QuantFormat.QDQ, op_types_to_quantize=["Conv"],
                        per_channel=True, activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                        calibrate_method=CalibrationMethod.Percentile, nodes_to_exclude=first_layer_convs(model),
                        extra_options={"ActivationSymmetric": True, "WeightSymmetric": True,
                                       "CalibPercentile": PERCENTILE})


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
