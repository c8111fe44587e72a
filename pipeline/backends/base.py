"""The one inference interface every backend implements (PyTorch, ONNX Runtime, TensorRT, ...)."""
from __future__ import annotations

import importlib.util
from abc import ABC, abstractmethod
from pathlib import Path
from typing import ClassVar, NamedTuple

import numpy as np

from models.spec import ModelSpec
from pipeline.backends import pixels as px
from pipeline.backends.descriptor import Descriptor
from pipeline.errors import PipelineError, check_choice
from pipeline.precisions import AUTO, DEFAULT, GRAPH, NAMES


class BackendStatus(NamedTuple):
    name: str
    available: bool
    reason: str


def installed(package: str) -> bool:
    """Whether an optional package can be imported, without importing it (torch alone takes seconds)."""
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # ValueError: blocked as sys.modules[package] = None
        return False


def check_precision(precision: str, allowed: tuple[str, ...] = GRAPH) -> str:
    return check_choice("precision", precision, allowed)


def check_auto_engine(precision: str, engine) -> None:
    """Refuses `--precision auto` with an engine file: the one place this is said (the sr stage and create()).

    Args:
        precision: the precision asked for.
        engine: the engine file given, or None.

    Raises:
        PipelineError: for 'auto' with an engine (an engine's precision is built in).
    """
    if precision == AUTO and engine is not None:
        raise PipelineError("--precision auto weighs the precisions of a model file; an engine has one: give "
                            "--onnx or --model instead, or the engine's own precision")


def check_run_precision(precision: str, auto: bool = False) -> str:
    """A precision some backend runs (the sr stage checks it before choosing one); `auto`: 'auto' too."""
    return check_precision(precision, NAMES + ((AUTO,) if auto else ()))


# Device memory per output pixel of an engine whose activations were allocated with it (TensorRT, ORT's TensorRT
# provider): only its I/O grows -- float32 output, its float32 copy, integer output; the input is 1/scale^2 of that.
ENGINE_BYTES_PER_OUTPUT_PIXEL = 32.0


class DeviceMemory(NamedTuple):
    """What sizes a device backend's tiles: the device's free bytes and the model's measured bytes of working
    memory per output pixel."""

    free_bytes: int
    bytes_per_output_pixel: float


class Backend(ABC):
    """A model loaded on one runtime (ONNX Runtime, OpenVINO, TensorRT, PyTorch).

    `infer(x, scale)` takes an NCHW float32 RGB batch in [0, 1] and returns the NCHW float32 output of size
    round(H * scale) x round(W * scale) (models.spec.output_size). Outputs are not clipped: clipping and rounding to
    the image's bit depth happen once, where images are written.

    Each subclass has a row in registry.TABLE. Its `DESCRIPTOR` is the data: name, device, ranks in the expected
    order, the precisions it runs and from which file, and its typed options (`create` checks them). The class
    itself says whether it can run here (`status`: one line of why not). Every attribute a caller reads is
    declared here, with a default where one makes sense, so a new backend that follows this class works everywhere.

    Attributes:
        DESCRIPTOR: what the backend is, as data (pipeline.backends.descriptor.Descriptor).
        name: DESCRIPTOR.name, e.g. "torch", "ort", "trt" (set from the descriptor, never by hand).
        device: where it runs, e.g. "cpu", "cuda:0".
        precision: the precision it runs, e.g. "fp32", "bf16".
        model_name: the registered model's name.
        spec: the model's ModelSpec.
        onnx_file: the ONNX file it runs, or None (PyTorch, an engine).
    """

    DESCRIPTOR: ClassVar[Descriptor]
    name: ClassVar[str]  # DESCRIPTOR.name, e.g. "torch", "ort", "ort-sr-kernels", "trt" (set below, never by hand)
    device: str = "cpu"  # e.g. "cpu", "cuda:0"
    precision: str       # "fp32" or "fp16"
    model_name: str
    spec: ModelSpec
    # The ONNX file a loaded backend runs (None: it runs no ONNX file, e.g. PyTorch or an engine).
    onnx_file: Path | None = None

    def model_file(self) -> Path | None:
        """The file whose numbers a loaded backend runs (what a measured precision loss is kept for): its ONNX
        file, or None."""
        return self.onnx_file

    def run_file(self, scale: float) -> Path | None:
        """The file whose numbers run at `scale` (what a quality record and `--precision auto`'s pick are kept
        for): model_file(), unless the backend runs another graph at some scales (a folded sibling)."""
        return self.model_file()

    def files(self, scale: float) -> list[Path]:
        """The files a loaded backend runs at `scale`, made now on a miss (what its Choice names and a Ray actor is
        sent; the files travelling beside each are added there): its ONNX file, or none."""
        return [self.onnx_file] if self.onnx_file is not None else []

    def decided(self) -> dict[str, str]:
        """What the loaded backend settled from this machine that its Choice names, as its constructor's keywords
        (ONNX Runtime: its provider; OpenVINO int8: its float parts), so every node loads the same; {} for none."""
        return {}

    @classmethod
    def planned_files(cls, model: str, precision: str, scale: float, options: dict) -> list[Path] | None:
        """The files a load at `precision` with `options` (the constructor's keywords) would run at `scale`, named
        without loading: exactly what its `files(scale)` returns (the file that runs at `scale` last, where it is
        among them), when every one is cached and verified; None when that is not known without loading (a file
        to make, a given file that does not check, or a backend that does not say: here)."""
        return None

    @classmethod
    def settles(cls, precision: str, options: dict) -> dict[str, str]:
        """What a load at `precision` with `options` (the constructor's keywords) settles from this machine, decided
        now from availability alone, nothing loaded (its Choice names it; `decided()` after the load must agree);
        {} for none."""
        return {}

    def model_options(self) -> dict:
        """The create() options that load the same model file again (at another precision, say)."""
        return {"onnx": self.onnx_file}

    def fp32_twin(self) -> Backend:
        """This backend on the same model file at fp32, loaded: what a lower precision's loss is measured against
        (pipeline.quality)."""
        return type(self)(self.model_name, DEFAULT, **self.model_options()).load()
    # TensorRT optimisation profiles the loaded engine admits (engine.Profile); None: any shape and batch.
    profiles: list | None = None
    # Why this backend runs: "requested: NAME" or "auto: ..." (set through `selected`), and in a few words.
    selection_reason: str = ""
    selection_brief: str = ""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "DESCRIPTOR" in cls.__dict__:  # the name is the descriptor's (a class outside the table declares its own)
            cls.name = cls.DESCRIPTOR.name

    @classmethod
    @abstractmethod
    def status(cls, spec: ModelSpec, precision: str, *, onnx: Path | None = None, engine: Path | None = None,
               weights: Path | None = None) -> BackendStatus:
        """Whether this backend can run `spec` at `precision` here (from `onnx`/`engine` when given, else built
        with `weights`), and why (not)."""

    @classmethod
    def ok(cls, reason: str) -> BackendStatus:
        return BackendStatus(cls.name, True, reason)

    @classmethod
    def no(cls, reason: str) -> BackendStatus:
        return BackendStatus(cls.name, False, reason)

    @abstractmethod
    def load(self) -> Backend:
        """Create sessions/engines; raise PipelineError with one clear line when impossible."""

    @abstractmethod
    def infer(self, batch: np.ndarray, scale: float) -> np.ndarray:
        """Run one batch; validates rank, channels, dtype and scale before launching."""

    def selected(self, reason: str, brief: str = "") -> Backend:
        """Record why this backend was chosen, and in a few words for one-line headers (registry.create_named,
        auto.create); returns self."""
        self.selection_reason, self.selection_brief = reason, brief or reason
        return self

    def max_input_size(self) -> tuple[int, int] | None:
        """Largest input (H, W) the loaded backend admits, from its profiles (the sr stage tiles bigger images to
        it); None: any."""
        if not self.profiles:
            return None
        return max(p.height[2] for p in self.profiles), max(p.width[2] for p in self.profiles)

    def input_limit(self, scale: float) -> tuple[int, int] | None:
        """Largest input (H, W) the loaded backend admits at `scale` (what the sr stage tiles to): its profiles'
        largest input, bounded by their largest output over the scale (a profile for x2-x4 at x6 admits less than
        its input range); `max_input_size` without profiles; None: any."""
        if not self.profiles:
            return self.max_input_size()
        sides = [p.max_input_at(scale) for p in self.profiles]
        return max(h for h, _ in sides), max(w for _, w in sides)

    def describe(self) -> str:
        return f"{self.name} ({self.device}, {self.precision})"

    def op_breakdown(self, size: int, scale: float, calls: int = 5) -> list[dict] | None:
        """Where one call on a `size`x`size` image at `scale` spends its time, from the runtime's own per-layer
        counters: {"op", "kernel", "ms"} per op type and kernel (the median over `calls`), largest first; None where
        the runtime keeps no such counters."""
        return None

    # -- what the sr stage asks of every backend (defaults: the host path) -----------------------------

    @property
    def on_gpu(self) -> bool:
        """Whether inference runs on a CUDA device (then decoding and encoding may use every core)."""
        return str(self.device).startswith("cuda")

    @property
    def host_cores(self) -> bool:
        """Whether inference itself runs on the host's cores (then decoding and encoding take a share beside it)."""
        return not self.on_gpu

    def infer_pixels(self, pixels: np.ndarray, scale: float) -> np.ndarray:
        """NHWC BGR uint8/uint16 samples -> NHWC BGR samples of the same type at the output size, converted
        by pipeline.backends.pixels' rule (byte-identical on every backend). Here: `infer` between the numpy
        conversions; device backends override it to copy integers and convert, clamp, round and cast there."""
        px.check_pixels(pixels, self.name)
        depth = 16 if pixels.dtype == np.uint16 else 8
        y = self.infer(px.to_unit(pixels), scale)
        samples, counts = px.samples_checked(y, depth)
        if counts is not None:  # a NaN or inf value: NonFiniteOutput carries the samples to the caller
            raise px.NonFiniteOutput(counts, samples)
        return samples

    def submit_pixels(self, pixels: np.ndarray, scale: float) -> px.Pending:
        """`infer_pixels`, collected later: the sr stage reads and submits the next batch before it collects this
        one (`result(out)` copies straight into the output, then raises NonFiniteOutput if a sample's output was
        not finite). Here: computed now; device backends enqueue the copies and the run on their stream and return
        at once."""
        try:
            return px.Ready(self.infer_pixels(pixels, scale))
        except px.NonFiniteOutput as e:  # raised where it is collected, like a device backend's
            return px.Ready(e.samples, e.counts)

    def run_streams(self, wanted: int) -> int:
        """From now on, run up to `wanted` submissions (submit_pixels) at once, each on its own share of the cores,
        for a caller that keeps that many in flight (a folder of images); 1 sets the default back. Returns how many
        run at once. Here 1: one at a time (a device backend overlaps its copies with the host's work instead);
        `infer` and `infer_pixels` always run one call on every core they have."""
        return 1

    def device_memory(self) -> DeviceMemory | None:
        """Free device memory and the model's activation cost, for a backend whose activations live on a
        device; None: host memory bounds the tiles (pipeline.images.tiling.auto_tile)."""
        return None
