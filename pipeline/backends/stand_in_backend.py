"""A stand-in device, for measuring the host side of a run on any machine (bench, tests): never offered to users,
never picked by `auto` (its descriptor says `stand_in`).

It takes integer pixels like a device backend, keeps a device's timeline (each submission takes 0.4 ms per output
megapixel, about what the folded SRCNN should take on an H100/H200, after the one before it) and waits for it by
sleeping, not spinning, so it costs the host no CPU; `result` waits until its submission's end. Its output is
realistic pictures, the input's nearest-neighbour x scale (an integer scale), made once per input (kept by a
CRC of the input, up to CACHE_BYTES) and handed out without a copy per call, as a device's pinned buffer
would be: read-only, shared by every call on the same input.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from pathlib import Path

import numpy as np

from models.spec import ModelSpec, output_size
from pipeline.artifacts.identity import resolve
from pipeline.backends import pixels as px
from pipeline.backends.base import Backend, BackendStatus, DeviceMemory
from pipeline.backends.checks import check_batch
from pipeline.errors import PipelineError

try:
    from isal.isal_zlib import crc32
except ImportError:  # optional: zlib's is ~10x the CPU
    from zlib import crc32

MS_PER_MPIX = 0.4       # device time per output megapixel
CACHE_BYTES = 1 << 30   # outputs kept (each input's made once): a bench clip's frames and folder's images fit
# What it says it has, as a device would: an 80 GB card, its I/O per output pixel (integer input and output)
DEVICE_BYTES, BYTES_PER_OUTPUT_PIXEL = 80 << 30, 4.0


class _Timed(px.Pending):
    """A submission: its samples are ready at `end` (perf_counter seconds); `result` sleeps until then."""

    def __init__(self, samples: np.ndarray, end: float):
        self._samples, self._end = samples, end

    def result(self, out=None):
        wait = self._end - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        return self._samples if out is None else px.copy_out(self._samples, out)


class StandInBackend(Backend):
    """Nearest-neighbour x scale at a device's speed, without the device (see the module)."""

    def __init__(self, model: str | None, precision: str = "fp32", *, ms_per_mpix: float = MS_PER_MPIX):
        self.spec = resolve(model)
        self.model_name, self.precision, self.device = self.spec.name, precision, "stand-in"
        self.ms_per_mpix = ms_per_mpix
        self._cache: OrderedDict[tuple, np.ndarray] = OrderedDict()
        self._cached_bytes = 0
        self._lock = threading.Lock()
        self._free_at = 0.0  # when the stand-in device finishes what was submitted

    @classmethod
    def status(cls, spec: ModelSpec, precision: str, *, onnx: Path | None = None, engine: Path | None = None,
               weights: Path | None = None) -> BackendStatus:
        return cls.ok("a stand-in device (nearest-neighbour, sleeps for the device's time): measurement only")

    @classmethod
    def planned_files(cls, model: str, precision: str, scale: float, options: dict) -> list[Path] | None:
        return []  # it runs no file

    def load(self) -> StandInBackend:
        return self

    @property
    def host_cores(self) -> bool:
        return False  # it sleeps: decoding and encoding may take every core, as beside a GPU

    def device_memory(self) -> DeviceMemory:
        """A device's memory: whole images and frames, as on a GPU (its outputs live in host memory, bounded by
        CACHE_BYTES)."""
        return DeviceMemory(DEVICE_BYTES, BYTES_PER_OUTPUT_PIXEL)

    def describe(self) -> str:
        return f"{self.name} (no device: {self.ms_per_mpix:g} ms per output MPix, asleep; nearest-neighbour)"

    @staticmethod
    def _factor(scale: float) -> int:
        if scale != int(scale) or scale < 1:
            raise PipelineError(f"the stand-in device upscales by integer factors only, not x{scale:g}")
        return int(scale)

    def _key(self, pixels: np.ndarray, scale: float) -> tuple:
        """The input's shape, type, scale and CRC-32 of every sample (ISA-L's: 0.05 ms for a 512^2 image)."""
        return pixels.shape, pixels.dtype.str, scale, crc32(np.ascontiguousarray(pixels).reshape(-1))

    def _output(self, pixels: np.ndarray, scale: float) -> np.ndarray:
        """The input's nearest-neighbour output (NHWC, read-only), made on its first call and kept."""
        key = self._key(pixels, scale)
        with self._lock:
            got = self._cache.get(key)
            if got is not None:
                self._cache.move_to_end(key)
                return got
        f = self._factor(scale)
        got = np.repeat(np.repeat(pixels, f, axis=1), f, axis=2)
        got.flags.writeable = False
        with self._lock:
            self._cache[key] = got
            self._cached_bytes += got.nbytes
            while self._cached_bytes > CACHE_BYTES and len(self._cache) > 1:
                self._cached_bytes -= self._cache.popitem(last=False)[1].nbytes
        return got

    def _run(self, mpix: float) -> float:
        """Queue `mpix` output megapixels on the stand-in device; when they are done."""
        with self._lock:
            self._free_at = max(self._free_at, time.perf_counter()) + self.ms_per_mpix * mpix / 1e3
            return self._free_at

    def submit_pixels(self, pixels: np.ndarray, scale: float) -> px.Pending:
        px.check_pixels(pixels, self.name)
        samples = self._output(pixels, scale)
        return _Timed(samples, self._run(samples.shape[0] * samples.shape[1] * samples.shape[2] / 1e6))

    def infer_pixels(self, pixels: np.ndarray, scale: float) -> np.ndarray:
        return self.submit_pixels(pixels, scale).result()

    def infer(self, batch: np.ndarray, scale: float) -> np.ndarray:
        check_batch(batch, self.spec, scale, self.name)
        f = self._factor(scale)
        n, _, h, w = batch.shape
        oh, ow = output_size(h, w, scale)
        y = np.repeat(np.repeat(batch, f, axis=2), f, axis=3)[:, :, :oh, :ow]
        time.sleep(max(0.0, self._run(n * oh * ow / 1e6) - time.perf_counter()))
        return y
