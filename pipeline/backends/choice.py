"""One backend request in, one frozen choice out, the same on every executor.

    BackendRequest       what a run asks for: backend or 'auto', precision or 'auto', the model files, threads,
                         one backend's typed options (pipeline.cli.options.BackendArgs builds it from the flags)
    choose(request, model, scale) -> Choice     which backend runs which precision from which files, and why
    load(choice) -> Backend                     the loaded backend the choice names: the one way to get one
    create(backend, model, precision, **opts)   the shortcut load(choose(...)), the request as keywords
    given(loaded, scale) -> Choice              the Choice of a backend the caller loaded itself (chooses nothing)

A Choice is a plain value: the Ray driver chooses once and sends it, with exactly the files it names, to every
actor, which loads it by `load`. Choosing reads the stores first and loads nothing when they hold the facts: a
stored `--precision auto` pick that still holds (select.stored_pick), or a named backend at a fixed precision whose
files are all cached (Backend.planned_files); the provider and float parts come from availability (registry.settled).
Only a missing fact loads (select.pick: a file to make, an export or a Q/DQ file; candidates to time), and that
backend is handed to the next `load` of the same Choice in this process; a GPU backend on a machine without a GPU is
not loaded: its choice names the graph it is built from.
"""
from __future__ import annotations

import hashlib
import os
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path

from models.spec import file_sha256
from pipeline import quality
from pipeline.artifacts.cache import cache_dir
from pipeline.artifacts.identity import resolve
from pipeline.artifacts.onnx_file import folded_variants, onnx_metadata, reference_file
from pipeline.artifacts.stamp import content_sha256, data_files, stamp_path
from pipeline.backends.base import Backend
from pipeline.backends.decide import elsewhere, requested
from pipeline.backends.descriptor import HOOKS
from pipeline.backends.registry import CLASSES, backend_class, checked_options, create_named, option_values, settled
from pipeline.backends.select import Reused, pick, stored_pick
from pipeline.engine import sidecar_path
from pipeline.errors import PipelineError
from pipeline.export.cached import onnx_for
from pipeline.native.cuda_driver import gpu_visible
from pipeline.precisions import AUTO, BUDGET_DB, BY_NAME, DEFAULT

PathLike = str | Path
SHARED = "shared"  # where a given file (--onnx, --engine, --weights) lands under a Ray node's artifact cache
FILE_OPTIONS = ("onnx", "engine", "weights")


@dataclass(frozen=True)
class BackendRequest:
    """The backend fields of a run. `options`: one backend's typed options (its descriptor's dataclass, e.g.
    OrtOptions(io_dtype='fp16')); the fields here win over the same ones inside it."""

    backend: str = AUTO
    precision: str = DEFAULT
    onnx: PathLike | None = None
    engine: PathLike | None = None
    weights: PathLike | None = None
    threads: int | None = None
    options: object | None = None

    def keywords(self) -> dict:
        """The options as create()'s keywords (the typed options' fields, then the fields set here)."""
        own = {k: getattr(self, k) for k in (*FILE_OPTIONS, "threads") if getattr(self, k) is not None}
        return {**_typed(self.backend, self.options), **own}


def _typed(backend: str, options, keywords: dict | None = None) -> dict:
    """One backend's typed options as keywords (registry.option_values); with backend 'auto' there is no one
    backend's type: refused, in one line."""
    if backend == AUTO and options is not None:
        raise PipelineError("options= is one backend's typed options; with backend 'auto' give keywords")
    return option_values(backend, options, keywords)


@dataclass(frozen=True)
class ArtifactFile:
    path: str    # where the choosing process has it
    rel: str     # where a Ray node puts it, under its artifact cache
    sha256: str


@dataclass(frozen=True)
class Choice:
    """What runs: a backend, its precision, the model and scale, the files, and why.

    What the chooser's machine settled is part of it too, so every node loads the same: `provider`, ONNX Runtime's
    (a plain "ort" takes TensorRT, else CUDA, else the CPU: ort_backend.pick_provider) and `float_parts`, OpenVINO
    int8's (bf16 where the CPU has it, else f32). One thing is still decided at run time, outside the Choice: the
    fp32 re-run of a tile whose output is not finite (pipeline.sr.runner.finite), counted in each record.
    """

    backend: str
    precision: str
    model: str
    scale: float
    options: tuple[tuple[str, object], ...]   # the constructor's keywords (no hooks), files as paths
    files: tuple[ArtifactFile, ...]           # every file it runs, with what travels beside them
    why: str
    brief: str
    quality: dict | None = field(default=None, compare=False)  # the measured loss it stands on (bf16, int8)
    provider: str | None = None      # ONNX Runtime's provider ('cpu', 'cuda', 'tensorrt'); None: not ONNX Runtime
    float_parts: str | None = None   # OpenVINO int8's float layers ('bf16', 'f32'); None: not OpenVINO int8

    def decided(self) -> dict[str, str]:
        """The settled fields as the backend's constructor keywords (what `load` passes it)."""
        return {k: v for k, v in (("provider", self.provider), ("float_parts", self.float_parts)) if v is not None}

    def key(self) -> dict:
        """What the outputs it makes depend on, as plain values (a video segment's key): backend, precision, model,
        scale, the SHA-256 of every file it runs, and what the chooser's machine settled (provider, float parts)."""
        return {"model": self.model, "backend": self.backend, "precision": self.precision, "scale": self.scale,
                "files": sorted(f.sha256 for f in self.files), **self.decided()}

    @property
    def runs(self) -> str:
        """'openvino int8': what runs, backend and precision together."""
        return f"{self.backend} {self.precision}"

    def moved(self, where: dict[str, str]) -> Choice:
        """This choice with its given files (--onnx, --engine, --weights) at other paths (a Ray node's copies)."""
        return replace(self, options=tuple((k, where.get(str(v), v) if k in FILE_OPTIONS else v)
                                           for k, v in self.options))


def choose(request: BackendRequest, model: str | None, scale: float | None = None, *, here: bool = False,
           **hooks) -> Choice:
    """Decides which backend runs which precision for `model` here.

    Args:
        request: the backend, precision and options asked for (BackendRequest).
        model: a registered model name, or None when the request names a file.
        scale: the run's scale (default: the model's).
        here: it is loaded in this process (the local run, Triton's model, preview): a backend that cannot run here
            is refused now, before any file is made for it.
        **hooks: log, progress and chatter callbacks for the slow steps (an export, a calibration, a measurement).

    Returns:
        The Choice: backend, precision, files, why. Unless `here`, a GPU-only backend asked for on a machine without
        a GPU is chosen by name and loaded where it runs (a Ray cluster's GPU nodes).

    Raises:
        PipelineError: one line, as create() does.
    """
    return _choose(request.backend, model, request.precision, scale, request.keywords(), hooks, here=here)


def load(choice: Choice, **hooks) -> Backend:
    """Loads the backend a Choice names: the one way anyone gets a backend (create is load(choose(...))).

    Args:
        choice: what choose() decided (its files where it says, or in this node's cache).
        **hooks: log, progress and chatter callbacks for the slow steps.

    Returns:
        The loaded Backend, with the Choice's reason as its `selection_reason`.

    Raises:
        PipelineError: one line, when the backend cannot be loaded here.
    """
    loaded = _JUST_LOADED.take(choice)
    if loaded is None:
        loaded = create_named(choice.backend, choice.model, choice.precision,
                              **{**dict(choice.options), **choice.decided()}, **hooks)
        _check_settled(choice.runs, choice.decided(), loaded)
    return loaded.selected(choice.why, choice.brief)


def create(backend: str, model: str | None, precision: str = DEFAULT, *, scale: float | None = None,
           **opts) -> Backend:
    """The shortcut load(choose(...)), with the request given as keywords.

    Args:
        backend: a backend name, or 'auto' for the fastest available here.
        model: a registered model name; None when `onnx` or `engine` names a file (the model comes from it).
        precision: a precision, or 'auto' for the fastest within its quality budget (timed and measured at `scale`).
        scale: the run's scale (default: the model's).
        **opts: the backend's options as keywords (onnx, engine, weights, threads, ...), or `options=` one
            backend's typed options; log/progress/chatter hooks for the slow steps.

    Returns:
        The loaded Backend; `selection_reason` says why it was chosen.

    Raises:
        PipelineError: one line, for an unknown name or precision, an option the backend does not take, a scale
            that is not a positive number, 'auto' with an engine (check_auto_engine), or a backend that cannot run.
    """
    hooks = {k: opts.pop(k) for k in HOOKS if k in opts}
    opts = {**_typed(backend, opts.pop("options", None), opts), **opts}
    return load(_choose(backend, model, precision, scale, opts, hooks, here=True), **hooks)


class _Handover:
    """The backend choose() loaded to decide, handed to the next load() of the same Choice in this process, so a
    local run, Triton's model or preview does not load (or export, or calibrate) twice. One slot: a Choice that is
    not loaded here (the Ray driver's) keeps one backend until the next choose()."""

    def __init__(self):
        self._lock = threading.Lock()
        self._slot: tuple[Choice, Backend] | None = None

    def keep(self, choice: Choice, loaded: Backend) -> None:
        with self._lock:
            self._slot = (choice, loaded)

    def take(self, choice: Choice) -> Backend | None:
        with self._lock:
            if self._slot is None or self._slot[0] != choice:
                return None
            loaded, self._slot = self._slot[1], None
            return loaded


_JUST_LOADED = _Handover()


def _choose(backend: str, model: str | None, precision: str, scale: float | None, opts: dict, hooks: dict,
            here: bool = False) -> Choice:
    """The Choice for a request given as keywords (choose's and create's one path); `here`: it is loaded in this
    process (create), so a GPU backend on a machine without one is refused now, not chosen for elsewhere."""
    if not here and backend != AUTO and precision != AUTO and _elsewhere(backend):
        return _unloaded(backend, precision, model, scale, {**opts, **hooks})
    if (reused := stored_pick(backend, model, precision, scale, opts)) is not None:
        return _of_pick(reused, opts)  # from the stores: nothing loaded; load(choice) loads it
    if backend != AUTO and precision != AUTO and (planned := _planned(backend, precision, model, scale, opts)):
        return planned  # every file cached: nothing loaded either
    loaded = pick(backend, model, precision, scale=scale, **opts, **hooks)  # measures: loads to make the facts
    choice = given(loaded, scale, opts)
    choice = replace(choice, **{"provider": None, "float_parts": None,
                                **settled(choice.backend, choice.precision, opts)})
    _check_settled(choice.runs, choice.decided(), loaded)
    _JUST_LOADED.keep(choice, loaded)
    return choice


def _check_settled(runs: str, planned: dict[str, str], loaded: Backend) -> None:
    """The loaded backend settled what its Choice says (decided from availability before loading), or one line."""
    got = loaded.decided()
    if got != planned:
        raise PipelineError(f"{runs} settled {got or 'nothing'} when loaded, where its choice says "
                            f"{planned or 'nothing'} (this machine's availability changed while choosing?)")


def given(loaded: Backend, scale: float | None = None, opts: dict | None = None) -> Choice:
    """The Choice a backend loaded by the caller itself is (`sr.upscale(backend=...)`): its name, precision, files
    at `scale`, why it runs. It chooses nothing: the caller did."""
    scale = quality.run_scale(loaded, scale)
    runs = loaded.files(scale)
    opts = _weights_named(type(loaded), loaded.spec, {k: v for k, v in (opts or {}).items()
                                                      if k not in HOOKS and v is not None}, runs)
    takes = loaded.DESCRIPTOR.option_names() if opts else ()  # a caller's own Backend class may declare none
    kept, given_files = _kept(opts, takes)
    files = _files([*runs, *given_files])
    why, brief = (loaded.selection_reason, loaded.selection_brief) if loaded.selection_reason \
        else requested(loaded.name)
    settled = loaded.decided()  # {} from a caller's own Backend class, which may declare no options
    settled = {k: v for k, v in settled.items() if k in loaded.DESCRIPTOR.option_names()} if settled else {}
    return Choice(loaded.name, loaded.precision, loaded.model_name, scale, kept, files, why, brief or why,
                  quality.stored(loaded, scale), **settled)


def _of_pick(reused: Reused, opts: dict) -> Choice:
    """The Choice a stored `--precision auto` pick names, built from its record (select._reuse checked its files)."""
    p = reused.pick
    cls = backend_class(p["backend"])
    kept, given_files = _kept(_weights_named(cls, resolve(p["model"], opts.get("onnx")), opts, p["files"]),
                              cls.DESCRIPTOR.option_names())
    return Choice(p["backend"], p["precision"], p["model"], float(p["scale"]), kept,
                  _files([*p["files"], *given_files]), reused.why, reused.brief, reused.quality,
                  **settled(p["backend"], p["precision"], opts))


def _planned(backend: str, precision: str, model: str | None, scale: float | None, opts: dict) -> Choice | None:
    """The Choice of a named backend at a fixed precision from its files named without loading
    (Backend.planned_files); None where one is to be made, it cannot run here (loading says why), or the request
    gives its own ONNX file or engine: sr opened that file once and hands the opened object on, so loading it now
    (handed to the next load) parses it once, where a Choice of plain paths would parse it three times more."""
    if opts.get("onnx") is not None or opts.get("engine") is not None:
        return None
    cls = backend_class(backend)
    try:
        checked_options(backend, precision, opts)
        spec = resolve(model, opts.get("onnx"), opts.get("engine"))
        if not cls.status(spec, precision, onnx=opts.get("onnx"), engine=opts.get("engine"),
                          weights=opts.get("weights")).available:
            return None
    except PipelineError:
        return None
    scale = float(spec.default_scale if scale is None else scale)
    files = cls.planned_files(spec.name, precision, scale, opts)
    if files is None:
        return None
    record = quality.stored_for(spec.name, backend, precision, scale, content_sha256(files[-1])) \
        if precision in BUDGET_DB and files else None
    kept, given_files = _kept(_weights_named(cls, spec, opts, files), cls.DESCRIPTOR.option_names())
    return Choice(backend, precision, spec.name, scale, kept, _files([*files, *given_files]), *requested(backend),
                  record, **settled(backend, precision, opts))


def _weights_named(cls: type[Backend], spec, opts: dict, files) -> dict:
    """`opts` with the weights file a backend that runs the model's own weights (torch) runs named as `weights`, so
    a Ray node loads the copy it is sent rather than its own (a node without `make weights` has none). Not for a
    user's model: its checkpoint or factory brings its weights, and --weights does not apply to it."""
    if cls not in CLASSES.values():  # a caller's own Backend class (it may declare no DESCRIPTOR)
        return opts
    desc = cls.DESCRIPTOR
    if not desc.runs_weights or "weights" not in desc.option_names() or not files \
            or opts.get("weights") is not None or spec.external is not None:
        return opts
    return {**opts, "weights": Path(os.fspath(files[0]))}


def _kept(opts: dict, takes) -> tuple[tuple[tuple[str, object], ...], list]:
    """(the constructor's keywords a Choice keeps: the options set, that the backend takes (`takes`; None: all), no
    hooks, files as paths; the given files among them)."""
    set_ = {k: v for k, v in opts.items() if k not in HOOKS and v is not None and (takes is None or k in takes)}
    kept = tuple(sorted((k, os.fspath(v) if k in FILE_OPTIONS else v) for k, v in set_.items()))
    return kept, [v for k, v in set_.items() if k in FILE_OPTIONS]


def _elsewhere(backend: str) -> bool:
    """A GPU-only backend asked for on a machine without a GPU: chosen by name, loaded where it runs."""
    return backend_class(backend).DESCRIPTOR.gpu_only and not gpu_visible()[0]


def _unloaded(backend: str, precision: str, model: str | None, scale: float | None, opts: dict) -> Choice:
    """A GPU backend's choice made here: the graph its engine is built from (the precision's source graph)."""
    spec = resolve(model, opts.get("onnx"), opts.get("engine"))
    scale = float(spec.default_scale if scale is None else scale)
    kept, paths = _kept(opts, None)
    if opts.get("onnx") is None and opts.get("engine") is None:
        paths.append(onnx_for(spec.name, BY_NAME[precision].source, "custom", weights=opts.get("weights"),
                              log=opts.get("log")))
    return Choice(backend, precision, spec.name, scale, kept, _files(paths), *elsewhere(backend))


def _files(paths) -> tuple[ArtifactFile, ...]:
    """Each file, the files travelling beside it (an ONNX file's external data, folded siblings and reference
    outputs, a stamp, an engine's sidecar), each once, with where a Ray node puts it."""
    out: dict[str, ArtifactFile] = {}
    for given in paths:
        if os.fspath(given) in out:
            continue
        folder = Path(os.fspath(given)).absolute().parent
        for p in _with_companions(given):
            key = os.fspath(p)
            if key not in out:
                out[key] = ArtifactFile(key, _rel(p, folder), file_sha256(p))
    return tuple(out.values())


def _with_companions(given) -> list[Path]:
    """`given` (a path, or an opened ONNX file: its metadata is not parsed again) and what travels beside it."""
    path = Path(os.fspath(given))
    beside = [stamp_path(path)]
    if path.suffix == ".onnx":
        meta = onnx_metadata(given)
        beside += [path.parent / rel for rel in data_files(given)]  # its weights, when kept beside it
        beside += [*folded_variants(path, meta).values(), reference_file(path, meta)]
    else:

        beside.append(sidecar_path(path))
    return [path, *(p for p in beside if p is not None and p.is_file())]


def _rel(path: Path, folder: Path) -> str:
    """Under the artifact cache: the same place on every node; any other file: a folder of its own for the given
    file's folder, the file where it lies under it (its siblings stay beside it, keeping the names its metadata
    refers to: external data in a sub-folder too)."""
    root = cache_dir().resolve()
    if path.resolve().is_relative_to(root):
        return path.resolve().relative_to(root).as_posix()
    if not path.absolute().is_relative_to(folder):
        folder = path.absolute().parent
    tag = hashlib.sha256(os.fspath(folder).encode()).hexdigest()[:16]
    return f"{SHARED}/{tag}/{path.absolute().relative_to(folder).as_posix()}"
