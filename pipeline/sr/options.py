"""RunOptions: everything an sr run is asked to do, as one typed value. The CLI builds it from its arguments
(pipeline.cli.sr) and the Python API from its keywords; nothing below pipeline.cli sees argparse. Which fields an
executor takes, each executor declares (pipeline.sr.flow's Executor protocol)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from pipeline.backends import BackendRequest
from pipeline.precisions import AUTO

PathLike = str | Path


@dataclass(frozen=True)
class RunOptions:
    input: PathLike
    output: PathLike
    model: str | None = None          # registered name or checkpoint; None: what the backend or file was made for
    scale: float | None = None        # None: the model's default
    backend: Any = "auto"             # a backend name ('auto' picks) or an already-loaded pipeline.backends.Backend
    precision: str = "fp32"           # fp32 | fp16 | bf16 | int8 | auto
    onnx: PathLike | None = None
    engine: PathLike | None = None
    weights: PathLike | None = None
    threads: int | None = None
    fmt: str | None = None            # output image format (videos keep their container)
    jpeg_quality: int = 95
    strip_metadata: bool = False      # outputs without the input's ICC profile, EXIF and XMP (images.metadata)
    tile: int | None = None           # LR tile side; 0 never tiles; None sizes from free memory
    tile_overlap: int | None = None
    batch: int | str = 1              # or 'auto'
    workers: int | None = None        # decode/encode threads (None: the default for the backend's device)
    skip_existing: bool = False
    reference: PathLike | None = None  # ground-truth HR folder: PSNR/SSIM against bicubic
    summary: PathLike | None = None   # --summary JSON file
    progress: bool = True             # False: the first line and failures only
    verbose: bool = False
    codec: str | None = None          # video encoding (pipeline.sr.videofmt)
    crf: int | None = None
    preset: str | None = None         # x264/x265 preset (None: videofmt.DEFAULT_PRESET)
    audio: str = "copy"               # copy | drop
    segment_seconds: float | None = None  # a clip cut at keyframes into segments this long (pipeline.sr.video.segments)
    log: Callable[[str], object] | None = None  # where lines go (default: stderr)

    @property
    def request(self) -> BackendRequest:
        """The backend fields as one value (a loaded backend given: its name is not asked for)."""
        return BackendRequest(self.backend_name or AUTO, self.precision, self.onnx, self.engine, self.weights,
                              self.threads)

    @property
    def backend_name(self) -> str | None:
        """The requested backend's name, or None when an already-loaded backend was given."""
        return self.backend if isinstance(self.backend, str) else None


OPTION_FIELDS = frozenset(f.name for f in fields(RunOptions))  # what an executor that takes every option declares
_FLAGS = {"fmt": "--format", "progress": "--quiet"}    # the fields whose command-line option has another name


def option_flag(name: str) -> str:
    """The command-line option of a RunOptions field ('tile_overlap' -> '--tile-overlap'): what a refusal names."""
    return _FLAGS.get(name, "--" + name.replace("_", "-"))
