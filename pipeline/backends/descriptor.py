"""What a backend is, as data: its name, where it runs, its rank in the expected order, each precision it runs and the
artifact that precision runs from, and the typed options its constructor takes. Every backend has one, its row of
pipeline.backends.registry.TABLE (its class reads it as `DESCRIPTOR`); the registry, the expected orders, `--precision
auto`'s candidates, the CLI's choices and help and `backends`' table all read them, never a list of their own.

The precisions themselves (their types, budgets and what they are made from) are pipeline.precisions' table, which
export, the engine builder and the artifact cache below this package read too.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path

from pipeline.precisions import ARTIFACTS, Artifact

PathLike = str | Path


@dataclass(frozen=True)
class Runs:
    """One precision a backend runs, from which artifact (a pipeline.precisions.ARTIFACTS key), and how."""

    precision: str
    artifact: str
    how: str = ""


@dataclass(frozen=True)
class Descriptor:
    name: str
    device: str                  # "cpu", "cuda", or "cpu or cuda" (the GPU where there is one)
    runs: tuple[Runs, ...]
    options: type                # its constructor's keyword options: a frozen dataclass (below)
    summary: str
    cpu_rank: int | None = None  # its place in the expected order on a machine without a CUDA GPU, fastest first
    gpu_rank: int | None = None  # with one: every GPU-ranked backend comes before the CPU-ranked ones
    alias_of: str | None = None  # another backend's session under a fixed provider: measured and compared once, there
    stand_in: bool = False       # no real runtime: measures the host side (bench, tests); never offered, never `auto`
    triton: str | None = None    # the Triton platform that serves its artifact as a plain model (`triton --backend`)

    def __post_init__(self):
        unknown = [r.artifact for r in self.runs if r.artifact not in ARTIFACTS]
        if unknown:
            raise ValueError(f"{self.name}: unknown artifact {unknown[0]!r}")

    @property
    def precisions(self) -> tuple[str, ...]:
        return tuple(r.precision for r in self.runs)

    @property
    def gpu_only(self) -> bool:
        return self.device == "cuda"

    @property
    def runs_weights(self) -> bool:
        """It runs the model's PyTorch weights as they are: no file is made for it (an export, an engine)."""
        return all(r.artifact == "weights" for r in self.runs)

    @property
    def runs_engines(self) -> bool:
        """It runs TensorRT engines (built for one GPU, batch limits from their profiles), never a file as exported."""
        return all(r.artifact == "engine" for r in self.runs)

    @property
    def pins_threads(self) -> bool:
        """A CPU session made with a thread count (`threads`): a threads sweep re-creates it with each count."""
        return not self.gpu_only and not self.runs_weights and "threads" in self.option_names()

    def artifact(self, precision: str) -> Artifact:
        """The artifact `precision` runs from here (KeyError: a precision it does not run)."""
        return ARTIFACTS[{r.precision: r.artifact for r in self.runs}[precision]]

    def option_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in fields(self.options))

    def option_problem(self, key: str, value) -> str | None:
        """Why `value` is not what option `key` declares (for the plain types: int, bool, str, a path, a dict), or
        None. A bool is not an int here, a string of digits is not a number, bytes are not a path, and a count is
        within its range (_RANGES)."""
        declared = next((f.type for f in fields(self.options) if f.name == key), None)
        kinds = _PLAIN.get(declared)
        if kinds is None or value is None and "None" in declared:
            return None
        ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
        if not ok:
            return f"option '{key}' of backend '{self.name}' takes {_SAY.get(declared, declared)}, got {value!r}"
        lo, hi = _RANGES.get(key, (None, None))
        if lo is not None and isinstance(value, int) and not lo <= value <= hi:
            return f"option '{key}' of backend '{self.name}' must be from {lo} to {hi}, got {value!r}"
        return None


MAX_THREADS = 4096  # inference threads: ONNX Runtime takes a C int, and no machine here has more cores
# The declared types `option_problem` checks (the dataclasses' annotations are strings: `from __future__`)
_PLAIN = {"int": (int,), "int | None": (int,), "bool": (bool,), "bool | None": (bool,), "str": (str,),
          "str | None": (str,), "PathLike | None": (str, os.PathLike), "dict | None": (dict,)}
_RANGES = {"threads": (1, MAX_THREADS), "device": (0, 1 << 16)}
_SAY = {"PathLike | None": "a file path (str or os.PathLike) or None", "dict | None": "a dict or None"}


# -- the typed options (each backend's constructor takes exactly its dataclass's fields, with the same defaults:
# tests/test_backend_descriptors.py holds them to it) -------------------------------------------------------------
@dataclass(frozen=True)
class Hooks:
    """Where progress lines, bars and libraries' talk go: they choose nothing, so `create` hands each to the backends
    whose options name it and drops it for the others (a caller passes them whichever backend `auto` picks)."""

    log: Callable[[str], object] | None = None
    progress: Callable | None = None   # progress(total, unit, desc) -> a bar (update, close)
    chatter: Callable[[str], object] | None = None


HOOKS = tuple(f.name for f in fields(Hooks))


@dataclass(frozen=True)
class TorchOptions:
    device: str | None = None          # "cpu", "cuda", "cuda:N"; None: the GPU where there is one
    weights: PathLike | None = None
    channels_last: bool | None = None  # None: the model's choice for the device
    threads: int | None = None
    cuda_graph: bool = False
    tf32: bool = False


@dataclass(frozen=True)
class FileOptions:
    """A backend that runs an exported ONNX file: the given one, or the cached export of `weights`."""

    onnx: PathLike | None = None
    weights: PathLike | None = None
    threads: int | None = None
    exporter: str = "dynamo"
    log: Callable[[str], object] | None = None


@dataclass(frozen=True)
class OrtOptions(FileOptions):
    ops: str = "custom"
    io_dtype: str = "fp32"
    profile: dict | None = None        # the TensorRT provider's shapes
    tf32: bool = False
    shrink_arena: bool = False         # a server's: the CPU arena gives back what a run grew it by
    provider: str | None = None        # 'cpu', 'cuda' or 'tensorrt' (a Choice's); None: the best one here


@dataclass(frozen=True)
class SrKernelsOptions(FileOptions):
    io_dtype: str = "fp32"


@dataclass(frozen=True)
class OpenVinoOptions(FileOptions):
    progress: Callable | None = None
    chatter: Callable[[str], object] | None = None
    float_parts: str | None = None     # int8's float layers: 'bf16' or 'f32' (a Choice's); None: bf16 where it runs


@dataclass(frozen=True)
class StandInOptions:
    ms_per_mpix: float = 0.4           # the stand-in device's time per output megapixel


@dataclass(frozen=True)
class TrtOptions:
    engine: PathLike | None = None
    onnx: PathLike | None = None
    profile: object | None = None      # an engine.Profile for the build; None: the model's default
    weights: PathLike | None = None
    cuda_graph: bool = False
    device: int = 0                    # the CUDA device ordinal
    log: Callable[[str], object] | None = None
