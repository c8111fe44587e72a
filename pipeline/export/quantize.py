"""int8 Q/DQ ONNX files, made from an fp32 file by ONNX Runtime's quantization tools (quantize_static).

    int8_file(fp32_path, scale, log=None) -> Path   the cached Q/DQ file (checked; made on a miss, once)
    calibration_feeds(scale, inputs, crops) -> feeds  the crops it calibrates on (bench's peers give NNCF the same)

The cached file is stamped (pipeline.artifacts.stamp: recipe_id(), the fp32 file's SHA-256, its own) and checked
before each use; a truncated, foreign, linked or unstamped one is made again. One process makes it under a file
lock; another asking meanwhile waits and reuses it.

Calibration streams (activation_stats): the feeds run one at a time through ONNX Runtime, and each activation keeps
only its min, max, channel means and the few largest values its percentile needs; the ranges reach quantize_static
as its calibration cache, so ONNX Runtime's calibrator, which holds every activation of every feed at once (~10 GB
on srcnn's HR-grid graph), never runs (it still does, in chunks of CALIB_CHUNK feeds, for the methods computed
only by it: Entropy, Distribution).

The recipe (RECIPE, part of the file's name), all from ONNX Runtime's quantize_static: QDQ format, so one file
serves OpenVINO, ONNX Runtime and TensorRT's explicit quantization; symmetric int8 activations and per-channel
symmetric int8 weights; ranges from the 99.999th percentile of |activation| (CalibrationMethod.Percentile's rule,
computed exactly here rather than off its 2048-bin histogram) on 5 LR crops of each *training* image we ship (never
the held-out ones), degraded at the graph's scale as in training.
Mixed precision (nodes_to_exclude, keep_float): in a model's own graph the first layer's convolutions (no activation
upstream) and the last layer's (no activation downstream: the reconstruction conv) stay in float; a folded graph
(pipeline.export.fold) keeps none in float. Three kinds of conv run int8 on a *shifted* input (shift_inputs: the
conv reads x - c, its bias carries c, zero point still 0, as TensorRT needs):
- the *image convs*: a first-layer conv that reads the 8-bit image itself (folded SRCNN's LR-grid conv1, 9x9 conv1
  and bicubic upsampler in one: most of the MACs), its input shifted by 128/255 and quantized at exactly 1/255, so
  an 8-bit image enters int8 without loss;
- the *ReLU-fed convs* without padding of their own (relu_convs: folded SRCNN's fold2 and, in the last layer,
  fold3): their input is never negative, so it is shifted by 128 steps and fills all of int8 instead of its
  positive half (one bit more); the step is the input's 99.999th percentile / 255 (input_stats);
- a folded graph's *border strips* (strip_convs: the first- and last-layer convs a model graph would keep in float,
  a 6-pixel frame, 3 % of a 768x768 output): their zero padding becomes a Pad node before them (explicit_padding,
  the same function) and their input's calibrated [min, percentile] fills int8's 256 values (input_shift).
A shifted conv's bias is then corrected with the int8 weights the file holds (settle_biases): b + W mean + Wq
(c - mean), each input channel's calibration mean, so the weights' rounding error meets the input's deviation from
its mean rather than the shift (without it, srcnn-x3's int8 output was 0.047 RMS off fp32; with it 0.005).
Conv outputs are not quantized (OpTypesToExcludeOutputQuantization): the next conv's input quantization follows its
activation, and a pre-ReLU output quantized symmetric lost 0.23 dB more. Our sr ops (sr::DynamicResize,
sr::DeformConv2d) are never quantized: only Conv nodes are. Biases stay float (QuantizeBias off): TensorRT's
DequantizeLinear takes int8, not the int32 bias ONNX Runtime would make, and OpenVINO and TensorRT fuse a float
bias into the int8 convolution.

Held-out Y-PSNR loss through OpenVINO (pipeline.quality; int8 layers, float parts in bf16 where the CPU
has it: openvino_backend.inference_hint), recipe 5 (image convs shifted, the rest of the first layer and the last in
float) -> recipe 6, on a 2-core AMX Xeon (scripts/int8_recipes.py):

    srcnn-x3      0.063 -> 0.052 dB   within the 0.10 dB budget; 33 -> 25 ms at 256x256 (bf16 alone: 34 ms): with
                                      fold3 in int8 too, OpenVINO runs the three LR-grid convs int8 back to back
                                      (fold3 in bf16 between int8 layers: 0.035 dB but 47-50 ms, layout reorders)
    deform-srcnn  0.076 -> 0.076 dB   within (its last conv is padded: float; its int8 part is the offset/mask
                                      conv feeding DeformConv2d, which custom_op_neighbours could keep in float)
    srcnn         0.18  -> 0.18 dB    OVER (fold3 in int8 costs it 0.11: with fold3 in float it lost 0.074 dB):
                                      recipe 8 (split per phase, below): 0.079 dB, within its budget.

(Recipe 7 changes only the folded graphs: srcnn, on the EPYC of the figures below, 0.165 -> 0.166 dB, still over;
deform-srcnn has none and keeps its file's contents.)

Recipe 6 -> 7 (a folded graph's border strips int8, read over their whole range), srcnn-x3 on a 2-core AMD EPYC
(AVX512-BF16/VNNI, no AMX; shared, load average 1.6; 256x256 -> 768x768, one interleaved run of 41 rounds,
medians): loss 0.0515 -> 0.0537 dB, fidelity to fp32 49.9 (worst image 48.2) -> 49.7 (48.1) dB (the strips in
symmetric int8 over |x|: 0.0584 dB, 49.3 (47.8)); 94.6 -> 91.8 ms at 1 thread, 52.3 -> 52.6 ms at 2 threads (no
change beyond the noise). OpenVINO's per-layer counters (Backend.op_breakdown, bench's op breakdown row) put the
strips' convolutions at 4.2 ms counted against 8.7 in bf16, of ~120 ms counted at 2 threads. OpenVINO + NNCF's
default int8 PTQ (nncf 3.4, nncf.quantize, 16 training crops) on the same folded fp32 file: 89.3 ms at 1 thread,
50.0 at 2 (2.7 % and 5 % faster than ours; it loses 0.35 dB, fidelity 42.0 (worst 39.1) dB: it quantizes
everything, strips and image included, as NNCF chooses). The int8 GEMM peak measured in the same run (bench's
roofline, torch._int_mm) was 835 GOP/s at 2 threads: srcnn-x3's 23.6 GOP take 28.3 ms there, 54 % of ours.

Recipe 7 -> 8: a folded SRCNN graph is quantized split per output phase (pipeline.export.phases: nine chains of
fold1 and fold3 cropped to their non-zero taps and a dense 64 -> 32 fold2, summed by Adds, no Concat; 25 % fewer
MACs, exact in fp32). The split with a Concat before fold3 (tried first) is what OpenVINO 2026.4
computes wrong (0.21 mean off ONNX Runtime on the same file, itself 0.006 off fp32): Concat -> Q/DQ int8 zero point 0
-> Conv, whatever feeds the Concat; phases.py's docstring has the smallest repro and the forms it gets right (a
Concat of int8 tensors is right but runs fold3 on s8, 16 % slower than u8; fold3 per phase summed needs no Concat).
tests/test_quantize_quality.py holds OpenVINO to ONNX Runtime on the shipped file. srcnn-x3 on the 2-core AMD EPYC
(256x256 -> 768x768, bf16 float parts, one interleaved run of 41 rounds, load average 0.9-1.0, medians; recipe
7 / 8 / NNCF): 2 threads 53.6 / 44.3 / 52.6 ms (1.19x NNCF; 68 % of the int8 GEMM peak's 30.0 ms), 1 thread 93.0 /
74.0 / 89.9 ms (1.22x, 75 %). Other runs, 25-31 rounds: 2 threads 1.22x (39.0 / 47.5 ms; with f32 float parts, the
Ice Lake case, 1.21x) and 1.11x with others' jobs on the cores (55.5 / 61.8 ms); 1 thread 1.21-1.23x in each: the
2-thread figure moves with the machine, around the 1.2x goal. On the quiet machine after the merge (41 rounds, load
average 0.8): 2 threads 47.6 / 37.3 / 46.7 ms (1.25x, 77 % of the peak's 28.8 ms), 1 thread 93.2 / 75.2 / 91.0
(1.21x, 73 %). Gate figures (pipeline.quality, held-out): loss
0.0564 dB (recipe 7: 0.0537), fidelity 49.36 (worst 47.38) dB with bf16 float parts; SRDEPLOY_CPU_BF16=0: 0.0555
(0.0593) dB, 49.40 (47.43) dB; NNCF's 0.349 dB, 42.0 (39.1) dB. srcnn (its folded x3 graph) 0.166 -> 0.079 dB,
fidelity 48.0 (worst 46.4) dB: within its budget now (fold3's int8 cost it most, and per phase its inputs and
weights have scales of their own), 55.5 -> 48.9 ms at 256x256 (2 threads, 5 calls each, not interleaved).
Where the time goes now (PERF_COUNT, 1 thread, 92.8 ms counted): fold1's nine convs 33.5 (recipe 7: 41.2), fold3's
27.6 (28.1: 40 % fewer MACs, but 27-channel convs on 32 inputs run less efficiently than one on 288), fold2's 10.3
(18.2 as one grouped conv), 77 % together; the strips' convs 6.1 (7 %); the rest ~15 (16 %): the output's
DepthToSpace 3.6, Concat 3.5, Slice 1.9 and final reorder 2.2, the rest reorders, Pad and FakeQuantize. Next: the
border frame inside the main convolutions (no strips, no output Concat/Slice: ~13 % of the time).
Tried and not kept: fold2's 9 identical groups as one dense 1x1 conv over the phases moved into the batch (the dense
kernel alone 2x faster, but in OpenVINO's NHWC int8 layout the reshape is two reorders of the 576-channel map: 1.5x
slower overall; into the width through transposes: 4x); the image conv's shift and Q/DQ ahead of its edge Pad (Q/DQ
-> Pad -> Conv runs fold1 in bf16, 2x slower; with a second Q/DQ after the Pad: 0.7 %, noise); uint8 activations
with zero point 0 in the file instead of the shift (NNCF's choice): 1.6 % at 1 thread, near the noise (OpenVINO
already runs a shifted input as u8: its runtime model's FakeQuantize outputs u8), and TensorRT reads the same file
and takes int8 with zero point 0 only; the output's two Concats (frame and interior) as zero Pads summed: 9.4 ms
against 5.3 for a 768x768 output alone in OpenVINO (1 thread); the split with its Concat of int8 tensors (right in
OpenVINO) 85.6 ms against 84.6 for fold3 uncropped per phase, 73-74 cropped as shipped (1 thread, 25 rounds).

Recipe 8 -> 9 (every CPU kind; figures on a 2-core AMD EPYC Zen 3, AVX2 and FMA only: no AVX-512, no VNNI, the
machine shared, load average 10-20; srcnn-x3, held-out, gate protocol; gain kept = 1 - loss / the model's gain
over bicubic, +0.598 dB PSNR-Y and +0.0133 SSIM-Y). Without VNNI, oneDNN's int8 kernels add two u8 x s8 products
in a saturating int16 (vpmaddubsw): OpenVINO's output there was not the file's (astronaut, RGB PSNR to fp32: the
file computed exactly 42.8 dB, OpenVINO 37.6) and recipe 8 lost 0.174 dB (71 % / 35 % of the PSNR-Y / SSIM-Y gain
kept). Step by step:
    7-bit weights ([-64, 63]) on every conv, to nearest     0.200 dB, SSIM-Y 0.0059   67 % / 55 %  fidelity 44.0
        (no saturation: OpenVINO equals the exact file, but 7-bit rounding costs what saturation did)
    + the shifted convs' weights rounded against their input's covariance (rounding.py, GPTQ's rule; the ReLU-fed
      ones back at 8 bits: their u8 inputs stay far below 255)
                                                            0.027 dB, 0.0017         96 % / 87 %  fidelity 52.9
      (the 99.99th percentile instead of 99.999 for the ranges: no change, 0.028 dB, 0.0017)
    + Conv -> Relu -> Conv pairs equalized (equalize.py)    0.022 dB, 0.0014         96 % / 89 %  fidelity 53.5
    + act-order (the inputs that vary most rounded first)   0.018 dB, 0.0012         97 % / 91 %  fidelity 53.9
Only the convs whose input spans all of u8 (the image convs, the strips') keep 7 bits without VNNI
(pipeline.native.cpu.int8_weight_bits, the one place that decides; the cached file's name and stamp carry the
width); with VNNI every conv keeps 8 bits.

scripts/int8_recipes.py measures other recipes (KEEP:METHOD:CROPS:PERCENTILE and switches).
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import warnings
from pathlib import Path

import numpy as np
import onnx

from pipeline.artifacts.atomic import atomic_path
from pipeline.artifacts.cache import cache_dir
from pipeline.artifacts.onnx_file import FOLDED_SCALE_KEY
from pipeline.artifacts.stamp import made_once, stamp, stamp_problem
from pipeline.data import sample_images
from pipeline.data.degradation import make_pair
from pipeline.errors import PipelineError, first_line
from pipeline.export.equalize import equalize
from pipeline.export.phases import split_phases
from pipeline.export.rounding import PatchCovariance, round_weights
from pipeline.native.cpu import int8_weight_bits
from pipeline.precisions import version

RECIPE = version("qdq")  # part of the file's name: bumped in pipeline.precisions when the recipe changes
CROP = 120  # LR calibration crop side: above every folded graph's smallest input
PERCENTILE = 99.999
METHOD = "Percentile"  # onnxruntime.quantization.CalibrationMethod's name
KEEP_FLOAT = ("first", "last")  # the convolutions a model's own graph leaves in float, see excluded()
# A folded graph's (pipeline.export.fold) leaves none: its first and last layers outside the image and ReLU-fed convs
# are the border strips, a 6-pixel frame (3 % of a 768x768 output), and in bf16 they cost more than int8 (docstring)
FOLDED_KEEP_FLOAT: tuple[str, ...] = ()
CROPS = 5  # calibration crops per training image
SHIFT_RELU = True  # ReLU-fed convs read their input shifted into all of int8 (relu_convs, shift_inputs)
PHASES = True  # a folded SRCNN graph is quantized split per output phase (pipeline.export.phases)
# Calibration feeds per pass of ONNX Runtime's calibrator (CalibStridedMinMax): it keeps every activation of a pass,
# so the whole set at once held ~10 GB on srcnn's HR-grid graph; a few at a time merge into the same histograms.
CALIB_CHUNK = 2
EQUALIZE = True  # cross-layer equalization of each Conv -> Relu -> Conv pair (pipeline.export.equalize)
HESSIAN_EVERY = 5  # every 5th calibration feed (one crop per training image) gives the input covariances


def recipe_id() -> str:
    """What an int8 file's stamp says it was made by: the recipe, its calibration settings and this CPU's weight
    width for the convs that read all of u8 (pipeline.native.cpu.int8_weight_bits)."""
    return (f"q{RECIPE}/{METHOD}/{PERCENTILE}/{CROPS}x{CROP}/{'+'.join(KEEP_FLOAT)}/"
            f"folded:{'+'.join(FOLDED_KEEP_FLOAT) or 'none'}/shift_relu={SHIFT_RELU}/phases={PHASES}/"
            f"equalize={EQUALIZE}/wide_weights={int8_weight_bits()}bit")


def keep_float(model: onnx.ModelProto) -> tuple[str, ...]:
    """The recipe's float layers for this graph (excluded()'s `keep`): a folded graph's or a model graph's."""
    folded = any(p.key == FOLDED_SCALE_KEY for p in model.metadata_props)
    return FOLDED_KEEP_FLOAT if folded else KEEP_FLOAT


def _sha(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


def int8_path(fp32: Path) -> Path:
    """The cached int8 file of `fp32` for this CPU's weight width: a VNNI machine's 8-bit weights saturate without
    VNNI, so a cache shared between kinds holds one file per width."""
    return cache_dir() / "int8" / f"{fp32.stem}-{_sha(fp32)}-q{RECIPE}w{int8_weight_bits()}.onnx"


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


def calibration_feeds(scale: float, inputs: set[str], crops: int = 5) -> list[dict[str, np.ndarray]]:
    """Feeds for the calibration: `crops` LR crops of every training image (corners, centre, then a fixed random
    draw), degraded at `scale` as in training."""
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


def ranged_tensors(model: onnx.ModelProto, skip: list[str], float_outputs: bool = True) -> list[str]:
    """The activations the quantizer needs a calibrated range of: the data input of every Conv it quantizes (not in
    `skip`), and with quantized outputs every Conv's output too (initializers excluded)."""
    weights = {t.name for t in model.graph.initializer}
    names = [t for n in model.graph.node if n.op_type == "Conv"
             for t in ((n.input[0],) if n.name not in skip else ()) + (() if float_outputs else tuple(n.output))
             if t not in weights]
    return list(dict.fromkeys(names))


def _top_k(top: np.ndarray, new: np.ndarray, k: int) -> np.ndarray:
    """The k largest of `top` (at most k values) and `new`; once `top` is full only values above its least are
    looked at, so a feed costs one comparison pass."""
    if top.size >= k:
        new = new[new > top.min()]
    both = np.concatenate([top, new]) if top.size else new
    return np.partition(both, both.size - k)[both.size - k:] if both.size > k else both.copy()


class _Tally:
    """One activation over the calibration feeds in bounded memory: its count, min and max, its mean per channel
    (`means`), and only as many of its largest values (of x, or of |x| with `absolute`) as the top fraction `cut`
    of the whole set can need."""

    def __init__(self, feeds: int, cut: float, absolute: bool, means: bool):
        self.feeds, self.cut, self.absolute, self.means = feeds, cut, absolute, means
        self.count, self.lo, self.hi, self.sums = 0, np.inf, -np.inf, 0.0
        self.top: np.ndarray = np.empty(0, np.float32)

    def add(self, y: np.ndarray) -> None:
        flat = y.ravel()
        self.count += flat.size
        self.lo, self.hi = min(self.lo, float(flat.min())), max(self.hi, float(flat.max()))
        if self.means:
            self.sums = self.sums + y.mean(axis=(0, 2, 3), dtype=np.float64)
        k = min(flat.size, int(np.ceil(self.cut * flat.size * self.feeds)) + 1)
        self.top = _top_k(self.top, np.abs(flat) if self.absolute else flat, k)

    def top_value(self) -> float:
        """The value with the fraction `cut` of the whole set above it (the top after cutting it)."""
        desc = np.sort(self.top)[::-1]
        return float(desc[min(len(desc) - 1, int(self.cut * self.count))])

    def mean(self) -> np.ndarray:
        return self.sums / self.feeds


def activation_stats(model: onnx.ModelProto, shifted: list[str], ranged: list[str], feeds: list[dict],
                     percentile: float, tick=None) -> tuple[dict[str, tuple], dict[str, _Tally]]:
    """One pass of ONNX Runtime (fp32) over the calibration feeds, one feed at a time (the memory is one feed's
    activations, whatever their number): input_stats of the `shifted` convs' data inputs, and a _Tally of |x| for
    each `ranged` activation (percentile_range)."""

    inputs = {n.name: n.input[0] for n in model.graph.node if n.name in shifted}
    wanted = {t: _Tally(len(feeds), (100 - percentile) / 200, False, True) for t in inputs.values()}
    ranges = {t: _Tally(len(feeds), (100 - percentile) / 100, True, False) for t in ranged}
    names = list(dict.fromkeys([*wanted, *ranges]))
    if names:
        session = _probe_session(model, names)
    for feed in feeds:
        for t, y in zip(names, session.run(names, feed) if names else (), strict=True):
            for tally in (wanted.get(t), ranges.get(t)):
                if tally is not None:
                    tally.add(y)
        if tick is not None:
            tick(1)
    stats = {name: (wanted[t].mean(), wanted[t].top_value(), wanted[t].lo) for name, t in inputs.items()}
    return stats, ranges


def percentile_range(tally: _Tally) -> tuple[float, float]:
    """ONNX Runtime's symmetric Percentile range: |x|'s percentile T, as (-T, T) clipped to [min, max] (exact here;
    its calibrator reads the same off a 2048-bin histogram of every activation held in memory at once)."""
    t = tally.top_value()
    return max(-t, tally.lo), min(t, tally.hi)


def _ranges(tallies: dict[str, _Tally], overrides: dict[str, list[dict]], method: str):
    """ONNX Runtime's TensorsData for quantize_static: each activation's Percentile (or MinMax) range; a shifted
    input (overrides) its int8 steps."""
    from onnxruntime.quantization.calibrate import CalibrationMethod, TensorData, TensorsData

    data = {}
    for name, t in tallies.items():
        lo, hi = percentile_range(t) if method == "Percentile" else (t.lo, t.hi)
        data[name] = TensorData(lowest=np.array(lo, np.float32), highest=np.array(hi, np.float32))
    for name, (override,) in overrides.items():
        step = float(override["scale"])
        data[name] = TensorData(lowest=np.array(-128 * step, np.float32), highest=np.array(127 * step, np.float32))
    return TensorsData(getattr(CalibrationMethod, method), data)


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


def input_shift(stats: tuple, image: bool, full: bool) -> tuple[float, float]:
    """(shift, step) of a shifted conv's input from its input_stats (mean, percentile, min): an image conv's 8-bit
    pixels at exactly 1/255; a full-range input's [min, percentile] over the 256 int8 values; a ReLU's
    [0, percentile] likewise."""
    _, top, lo = stats
    if image:
        return IMAGE_SHIFT, IMAGE_STEP
    lo = lo if full else 0.0
    step = max(top - lo, 1e-8) / 255
    return lo + 128 * step, step


def strip_convs(model: onnx.ModelProto, keep: tuple[str, ...]) -> list[str]:
    """The convs that a model graph's rule (KEEP_FLOAT) leaves in float and `keep` quantizes: a folded graph's
    border strips' first and last convs, which read the upsampled image (bicubic overshoots [0, 1] both ways) or a
    ReLU through their zero padding. They are read over their calibrated range ([min, percentile] in int8's 256
    values, explicit_padding first): symmetric int8 over |x| cost srcnn-x3 0.005 dB more."""
    floats = set(excluded(model, keep))
    return [name for name in excluded(model, KEEP_FLOAT) if name not in floats]


def explicit_padding(model: onnx.ModelProto, names: list[str]) -> list[str]:
    """Move each named Conv's own zero padding into a Pad node before it (the same function), so shift_inputs can
    shift its input without a border term; returns the named convs now unpadded (an auto_pad one stays as it is).
    OpenVINO runs such a Pad apart from the int8 conv: nothing measurable on the strips, 23 ms on a whole image
    (relu_convs)."""
    from onnx import helper, numpy_helper

    nodes, done = [], []
    for n in model.graph.node:
        attrs = {a.name: a for a in n.attribute}
        if n.name in names and n.op_type == "Conv" and "pads" in attrs and any(attrs["pads"].ints) \
                and (attrs["auto_pad"].s if "auto_pad" in attrs else b"NOTSET") == b"NOTSET":
            half = len(attrs["pads"].ints) // 2
            tag = f"{n.name}_pad".lstrip("/").replace("/", "_")
            pads = [0, 0, *attrs["pads"].ints[:half], 0, 0, *attrs["pads"].ints[half:]]
            model.graph.initializer.append(numpy_helper.from_array(np.array(pads, np.int64), f"{tag}s"))
            nodes.append(helper.make_node("Pad", [n.input[0], f"{tag}s"], [f"{tag}ded"], name=tag))
            n.input[0] = f"{tag}ded"
            attrs["pads"].ints[:] = [0] * (2 * half)
        if n.name in names and _unpadded(n):
            done.append(n.name)
        nodes.append(n)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return done


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


class _Feeds:
    """The calibration feeds as ONNX Runtime's calibrator reads them, a chunk (set_range) per pass: each feed read
    ticks `tick` (a progress bar's update)."""

    def __init__(self, feeds: list[dict], tick=None):
        self.feeds, self.tick, self._it = feeds, tick, iter(())

    def __len__(self) -> int:  # whole chunks (quantize_static asks for a multiple); the last one may be short
        return -(-len(self.feeds) // CALIB_CHUNK) * CALIB_CHUNK

    def set_range(self, start_index: int, end_index: int) -> None:
        self._it = iter(self.feeds[start_index:min(end_index, len(self.feeds))])

    def get_next(self):
        feed = next(self._it, None)
        if feed is not None and self.tick is not None:
            self.tick(1)
        return feed


@contextlib.contextmanager
def quiet_libraries(chatter=None):
    """ONNX Runtime's quantizer talks: Python warnings and logging (`Please consider to run pre-processing`),
    prints (histogram settings), its C++ log (`Removing initializer`). Kept from the terminal; the Python part goes
    to `chatter` (a line sink, --verbose) when given."""
    import onnxruntime as ort

    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            lines.append(f"{record.levelname.lower()}: {record.getMessage()}")

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    root.handlers = [Keep()]
    ort.set_default_logger_severity(3)  # errors only from sessions that set no level of their own
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        ort.set_default_logger_severity(2)  # ONNX Runtime's default (warnings)
        lines += [f"warning: {w.message}" for w in caught] + out.getvalue().splitlines()
        for line in lines if chatter is not None else ():
            chatter(f"onnxruntime.quantization: {line}")


def _load_fp32(fp32: Path) -> onnx.ModelProto:
    """The fp32 model with its external data (if any) read beside the file, whatever the working directory."""
    return onnx.load(str(fp32.resolve()), load_external_data=True)


def quantize(fp32: Path, dst: Path, scale: float, *, method: str = METHOD, keep: tuple[str, ...] | None = None,
             crops: int = CROPS, percentile: float = PERCENTILE, exact_image: bool = True,
             float_outputs: bool = True, shift_relu: bool = SHIFT_RELU, phases: bool = PHASES,
             weight_bits: int | None = None, progress=None) -> None:
    """Write the Q/DQ file of `fp32` (calibrated at `scale`) to `dst`. The keywords are the recipe (the defaults
    are the shipped one: `keep` None is keep_float's, `weight_bits` None this CPU's); scripts/int8_recipes.py tries
    others. `progress(total, unit, desc)` makes a bar."""
    from onnx import numpy_helper

    model = _load_fp32(Path(fp32))
    bits = int8_weight_bits() if weight_bits is None else weight_bits
    keep = keep_float(model) if keep is None else keep
    if phases:
        split_phases(model)  # a folded SRCNN's graph: one chain per output phase, fewer MACs (else untouched)
    feeds = calibration_feeds(scale, {i.name for i in model.graph.input}, crops)
    if not feeds:
        raise PipelineError("no training image is large enough to calibrate int8")
    if EQUALIZE:
        equalize(model, feeds[::HESSIAN_EVERY])  # the same function, each ReLU's channels alike for one step
    full = explicit_padding(model, strip_convs(model, keep)) if exact_image and shift_relu else []
    skip = excluded(model, keep, exact_image, shift_relu)
    image = image_convs(model) if exact_image else []
    shifted = image + (relu_convs(model, set(skip)) if shift_relu else []) + full
    own = method in ("Percentile", "MinMax")  # ranges streamed here; others: ONNX Runtime's calibrator, in chunks
    bar = progress(len(feeds) * (1 if own else 2), "crop", "int8 calibration") if progress else None
    tick = bar.update if bar is not None else None
    try:
        ranged = ranged_tensors(model, skip + shifted, float_outputs) if own else []
        stats, tallies = activation_stats(model, shifted, ranged, feeds, percentile, tick)
        hessians = conv_hessians(model, shifted, feeds[::HESSIAN_EVERY])
        shifts = {name: input_shift(stats[name], name in image, name in full) for name in stats}
        overrides, corrections = shift_inputs(model, shifts, {name: mean for name, (mean, *_) in stats.items()})
        if not [n for n in model.graph.node if n.op_type == "Conv" and n.name not in skip]:
            raise PipelineError(f"{fp32.name}: the int8 recipe leaves every convolution in float: nothing to "
                                "quantize")
        ranges = _ranges(tallies, overrides, method) if own else None
        reader = None if own else _Feeds(feeds, tick)
        # the convs whose input spans all of u8 at this CPU's width, the ReLU-fed ones at 8 bits
        widths = {n.input[1]: bits if n.name in image + full else 8 for n in model.graph.node if n.name in shifted}
        floats = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer if t.name in widths}
        _quantize_static(model, dst, reader, ranges, method, skip, percentile, overrides, float_outputs)
    finally:
        if bar is not None:
            bar.close()
    round_convs(dst, floats, widths, hessians)
    settle_biases(dst, corrections)  # from the int8 weights as rounded


def conv_hessians(model: onnx.ModelProto, names: list[str], feeds: list[dict]) -> dict[str, np.ndarray]:
    """Each named ungrouped, unpadded conv's input covariance over `feeds` (pipeline.export.rounding), by its
    weights' name: its own input's patches of its kernel's size, every other position (ONNX Runtime, fp32)."""

    shapes = {t.name: tuple(t.dims) for t in model.graph.initializer}
    convs = [n for n in model.graph.node if n.name in names and _unpadded(n)
             and next((a.i for a in n.attribute if a.name == "group"), 1) == 1]
    inputs = list(dict.fromkeys(n.input[0] for n in convs))
    if not inputs:
        return {}
    session = _probe_session(model, inputs)
    covs = {n.name: PatchCovariance(*shapes[n.input[1]][2:], stride=2) for n in convs}
    for feed in feeds:
        seen = dict(zip(inputs, session.run(inputs, feed), strict=True))
        for n in convs:
            covs[n.name].add(seen[n.input[0]])
    return {n.input[1]: covs[n.name].value() for n in convs}


def round_convs(path: Path, floats: dict[str, np.ndarray], widths: dict[str, int],
                hessians: dict[str, np.ndarray]) -> None:
    """Round again, from their float values (`floats`, by initializer name), the shifted convs' weights: each to
    its width in bits (`widths`: 7, [-64, 63], for a conv whose input spans all of u8 where a CPU without VNNI would
    saturate 8-bit ones: pipeline.native.cpu.int8_weight_bits), per output channel, symmetric; those with an input
    covariance (`hessians`) by pipeline.export.rounding's error-compensating rule, the rest to nearest."""
    from onnx import numpy_helper

    model = onnx.load(str(path))
    inits = {t.name: t for t in model.graph.initializer}
    for n in (n for n in model.graph.node if n.op_type == "DequantizeLinear"):
        q, source = n.input[0], n.input[0].removesuffix("_quantized")
        if q not in inits or source not in floats or inits[q].data_type != onnx.TensorProto.INT8:
            continue
        w, bits = floats[source].astype(np.float64), widths[source]
        top = 2 ** (bits - 1) - 1
        if source in hessians:
            rounded, step = round_weights(w, hessians[source], bits)
        elif bits < 8:
            step = np.maximum(np.abs(w).reshape(w.shape[0], -1).max(axis=1), 1e-12) / top
            rounded = np.clip(np.rint(w / step.reshape(-1, *[1] * (w.ndim - 1))), -top - 1, top).astype(np.int8)
        else:  # 8 bits to nearest: the quantizer's own
            continue
        inits[q].CopyFrom(numpy_helper.from_array(rounded, q))
        inits[n.input[1]].CopyFrom(numpy_helper.from_array(step.astype(np.float32), n.input[1]))
    onnx.save(model, str(path))


def _quantize_static(model, dst: Path, reader, ranges, method: str, skip: list[str], percentile: float,
                     overrides: dict, float_outputs: bool) -> None:
    """ONNX Runtime's quantize_static with the recipe's options, from the ranges computed here (given as its
    calibration cache, so its calibrator, which holds every activation at once, never runs) or from `reader`."""
    import tempfile

    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.calibrate import save_tensors_data

    with tempfile.TemporaryDirectory(prefix=".calibration-", dir=dst.parent) as tmp:
        cache = None
        if ranges is not None:
            cache = Path(tmp) / "ranges.json"
            save_tensors_data(ranges, cache)
        quantize_static(model, str(dst), reader, quant_format=QuantFormat.QDQ, op_types_to_quantize=["Conv"],
                        per_channel=True, activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                        calibrate_method=getattr(CalibrationMethod, method), nodes_to_exclude=skip,
                        calibration_cache_path=cache,
                        extra_options={"ActivationSymmetric": True, "WeightSymmetric": True,
                                       "CalibPercentile": percentile, "QuantizeBias": False,
                                       "TensorQuantOverrides": overrides, "CalibStridedMinMax": CALIB_CHUNK,
                                       "OpTypesToExcludeOutputQuantization": ["Conv"] if float_outputs else []})


def int8_cached(fp32: Path) -> Path | None:
    """The cached int8 file of `fp32` when its stamp says it is this recipe's file of this fp32 file and its bytes
    are intact (what int8_file returns without making it), else None."""
    path = int8_path(Path(fp32))
    return path if stamp_problem(path, recipe_id(), Path(fp32)) is None else None


def int8_file(fp32: Path, scale: float, log=None, progress=None, chatter=None) -> Path:
    """The int8 Q/DQ file of `fp32`, from the cache when its stamp says it is this recipe's file of this fp32 file
    and its bytes are intact, else made now (a few seconds to a minute; needs the export extra for the training
    images' degradation). One process makes it; another asking meanwhile waits and reuses it."""
    fp32 = Path(fp32)
    path = int8_path(fp32)
    if int8_cached(fp32) is not None:
        return path
    with made_once(path):
        problem = stamp_problem(path, recipe_id(), fp32)  # another process may have made it while we waited
        if problem is None:
            return path
        if log is not None:
            why = "" if problem == "it is missing" else f" (the cached one is not used: {problem})"
            log(f"quantizing {fp32.name} to int8 (calibrated on the training images), once{why}: {path}")
        path.unlink(missing_ok=True)  # a link goes, never what it points at
        try:
            with atomic_path(path) as tmp, quiet_libraries(chatter):
                quantize(fp32, Path(tmp), scale, crops=CROPS, weight_bits=int8_weight_bits(), progress=progress)
        except ImportError as e:
            raise PipelineError(f"making the int8 file needs {e.name} (pip install 'srdeploy[export]')") from None
        except PipelineError:
            raise
        except Exception as e:  # ONNX Runtime's quantizer raises its own types
            raise PipelineError(f"cannot quantize {fp32.name} to int8: {first_line(e)}") from None
        stamp(path, recipe_id(), fp32)
    return path


def _probe_session(model: onnx.ModelProto, tensors: list[str]):
    """An ONNX Runtime CPU session of `model` that also returns the intermediate `tensors` (fp32, quiet)."""
    import onnxruntime as ort

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    known = {o.name for o in probe.graph.output}
    probe.graph.output.extend(onnx.helper.make_empty_tensor_value_info(t) for t in tensors if t not in known)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(probe.SerializeToString(), options, providers=["CPUExecutionProvider"])
