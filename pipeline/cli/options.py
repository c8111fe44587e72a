"""Argument groups and checks the stage commands share: one definition and one default each.

`add_*(parser)` registers a group of flags; the matching `*_from_args(args)` / `check_*` validates them
before any work is done, raising PipelineError (the CLI prints one line and exits 2). Commands call the
checks in `run(args)`, so a Namespace built in Python is checked the same way as a command line.

The one convention for defaults: a flag whose default depends on other flags defaults to None, meaning "not
given", and its `*_from_args` decides. `--model` (every command that has it) is None unless given: with an
--onnx/--engine file the model is the one the file holds (a --model naming another is an error), without one it
is DEFAULT_MODEL (or every registered model for `all`, where allowed). Which model a value names is always
pipeline.artifacts.identity.resolve's answer; choice lists are checked by pipeline.errors.check_choice.
"""
from __future__ import annotations

from pathlib import Path

from models.spec import DEFAULT_MODEL, MODELS, OWN_MODELS
from pipeline import backends as B
from pipeline import precisions as P
from pipeline.analysis.candidates import candidate_statuses
from pipeline.artifacts.atomic import folder_problem
from pipeline.artifacts.identity import resolve
from pipeline.artifacts.onnx_file import check_onnx_file
from pipeline.backends import BackendRequest
from pipeline.errors import PipelineError, check_choice


# -- model ---------------------------------------------------------------------------------------------
def add_model_args(parser, allow_all: bool = False, files: bool = True) -> None:
    """`files`: the command also takes an --onnx/--engine file, whose model is then the default."""
    what = "registered model name, checkpoint file or package.module:factory" + (", or 'all'" if allow_all else "")
    default = f"the model an --onnx file holds, else {DEFAULT_MODEL}" if files else DEFAULT_MODEL
    parser.add_argument("--model", default=None, help=f"{what} (default: {default})")


def scale_help(what: str = "upscale factor") -> str:
    """--scale's help, its default shown: the model's own factor, e.g. x3 for the default model."""
    return f"{what} (default: the model's own, x{MODELS[DEFAULT_MODEL].default_scale:g} for {DEFAULT_MODEL})"


def models_from_args(args, allow_all: bool = False) -> list[str]:
    """The models `--model` names: one (DEFAULT_MODEL when not given), or every one of ours (OWN_MODELS) for 'all' (when
    `allow_all`)."""
    if allow_all and args.model == "all":
        return list(OWN_MODELS)  # our trained models; a fetched one (Real-ESRGAN) runs when named
    return [resolve(DEFAULT_MODEL if args.model is None else args.model).name]


def model_from_args(args, onnx: Path | None = None, engine: Path | None = None) -> str:
    """The one model a command runs: the one its --onnx (or `onnx`/`engine`) file holds, checked against an
    explicit --model; else `--model`, else DEFAULT_MODEL."""
    onnx = onnx if onnx is not None else onnx_from_args(args)
    if onnx is not None or engine is not None:
        return resolve(args.model, onnx, engine).name
    return models_from_args(args)[0]


def check_scales(specs, scales, *, sweep: bool = False) -> None:
    """Explicit --scales, before any work: each in every model's range (ModelSpec.check_scale). A `sweep` (bench)
    leaves fixed-factor models out, as they have no scale sweep, but refuses a sweep that no model can run."""
    if not scales:
        return
    if sweep:
        if not any(s.dynamic_scale for s in specs):
            names = ", ".join(f"'{s.name}'" for s in specs)
            raise PipelineError(f"--scales: {names} has a fixed scale, so there is no scale sweep to run")
        specs = [s for s in specs if s.dynamic_scale]
    for spec in specs:
        for scale in scales:
            try:
                spec.check_scale(scale)
            except ValueError as e:
                raise PipelineError(f"--scales: {e}") from None


def add_onnx_arg(parser) -> None:
    parser.add_argument("--onnx", type=Path, metavar="FILE",
                        help="an exported ONNX file: the model and what the runtime needs come from its metadata "
                             "(runs without PyTorch)")


def onnx_from_args(args) -> Path | None:
    onnx = getattr(args, "onnx", None)
    if onnx is None:
        return None
    return check_onnx_file(onnx)


# -- weights -------------------------------------------------------------------------------------------
def add_weights_arg(parser) -> None:
    parser.add_argument("--weights", type=Path, metavar="FILE",
                        help="state-dict file to use instead of the model's shipped weights")


def weights_from_args(args) -> Path | None:
    w = getattr(args, "weights", None)
    if w is None:
        return None
    w = Path(w)
    if not w.is_file():
        raise PipelineError(f"weights file not found: {w}")
    return w


# -- precision -----------------------------------------------------------------------------------------
def add_precision_args(parser, multiple: bool = False, run: bool = False, auto: bool = False) -> None:
    """`--precision P` (default fp32), or with `multiple` `--precisions P...` (default: all of them). `run`: a
    command that runs a backend, which may also ask for bf16 and int8; `auto`: and for the fastest precision within
    its quality budget (pipeline.backends.select)."""
    if run:
        choices = P.NAMES + ((P.AUTO,) if auto else ())
        parser.add_argument("--precision", default=P.DEFAULT, choices=choices,
                            help=f"precision (default: {P.DEFAULT}; {_who_runs(P.DERIVED)}; bf16 and int8 are "
                                 "made from the fp32 file"
                                 + ("; auto: the fastest precision whose measured quality loss is within its budget"
                                    if auto else "") + ")")
    elif multiple:
        parser.add_argument("--precisions", nargs="+", default=list(P.GRAPH), choices=P.NAMES,
                            help=f"precisions to run (default: {' '.join(P.GRAPH)}; {_who_runs(P.DERIVED)}: judged "
                                 "by their measured held-out loss and its budget)")
    else:
        parser.add_argument("--precision", default=P.DEFAULT, choices=P.GRAPH,
                            help=f"graph precision (default: {P.DEFAULT})")


def _who_runs(precisions) -> str:
    """'bf16 runs on torch, trt, openvino; int8 on trt, openvino', from the backends' descriptors."""
    parts = [f"{p} {'runs on ' if i == 0 else 'on '}{', '.join(d.name for d in B.descriptors() if p in d.precisions)}"
             for i, p in enumerate(precisions)]
    return "; ".join(parts)


# -- backends ------------------------------------------------------------------------------------------
def add_backend_args(parser) -> None:
    """`--backend NAME` for commands that run one backend (default: auto, the fastest available here)."""
    parser.add_argument("--backend", default="auto", metavar="NAME",
                        help=f"auto (default: the fastest available here), or one of {', '.join(B.NAMES)} "
                             "(`python -m pipeline backends` says which run here, and what each runs)")


def backend_from_args(args) -> str:
    return check_choice("backend", args.backend, ("auto", *B.NAMES))


def add_backends_arg(parser, help: str = "only these backends (default: every available one)") -> None:
    parser.add_argument("--backends", nargs="+", metavar="NAME", help=f"{help}; names: {', '.join(B.NAMES)}")


def backends_from_args(args) -> list[str] | None:
    """The `--backends` list (None: every available one); a name that is not a backend is an error."""
    names = getattr(args, "backends", None)
    if not names:
        return None
    for name in names:
        check_choice("backend", name, B.NAMES)
    return list(dict.fromkeys(names))


def check_runnable(models: list[str], precisions, backends: list[str] | None, weights=None) -> None:
    """Error when none of the asked-for backends can run any of `models` here (one line, the reasons)."""
    reasons: dict[str, list[str]] = {}
    for model in models:
        for precision in precisions:
            for st in candidate_statuses(model, precision, backends, weights):
                if st.available:
                    return
                reasons.setdefault(st.reason, []).append(st.name)
    why = "; ".join(f"{'/'.join(dict.fromkeys(names))}: {reason}" for reason, names in reasons.items())
    asked = f"--backends {' '.join(backends)}" if backends else "the backends"
    raise PipelineError(f"none of {asked} can run here ({why or 'none registered'})")


# -- the backend fields, one group -----------------------------------------------------------------------
class BackendArgs:
    """The backend fields of a command as one argument group (Polygraphy's style: the group owns adding its flags
    and parsing them): which backend (`backend`: 'one' for --backend NAME or auto, 'many' for --backends), which
    precision (`precision`: 'graph', 'run', 'auto' or 'many', as add_precision_args), which model files (`files`:
    onnx, engine, weights) and --threads. `parse` turns them into one frozen BackendRequest; `check_files`: the
    files are checked here (a command whose run checks them itself, as sr's plan does, passes False); `exclusive`:
    --onnx and --engine may not be given together."""

    def __init__(self, backend: str | None = None, precision: str | None = None,
                 files: tuple[str, ...] = ("onnx", "weights"), threads: bool = False, check_files: bool = True,
                 exclusive: bool = False):
        self.backend, self.precision, self.files = backend, precision, files
        self.threads, self.check_files, self.exclusive = threads, check_files, exclusive

    def add_parser_arguments(self, parser) -> None:
        if self.backend == "one":
            add_backend_args(parser)
        elif self.backend == "many":
            add_backends_arg(parser)
        if self.precision is not None:
            add_precision_args(parser, multiple=self.precision == "many", run=self.precision in ("run", "auto"),
                               auto=self.precision == "auto")
        where = parser.add_mutually_exclusive_group() if self.exclusive else parser  # --onnx or --engine
        if "onnx" in self.files:
            add_onnx_arg(where)
        if "engine" in self.files:
            where.add_argument("--engine", type=Path, metavar="FILE",
                                help="a built TensorRT engine (its .json sidecar beside it) instead of the cached "
                                     "build")
        if "weights" in self.files:
            add_weights_arg(parser)
        if self.threads:
            parser.add_argument("--threads", type=int, default=None,
                                help="inference threads, >= 1 (default: the backend's choice)")

    def parse(self, args) -> BackendRequest:
        """The request the flags make (a name that is no backend, a missing file: one PipelineError line)."""
        backend = backend_from_args(args) if self.backend == "one" else P.AUTO
        onnx = onnx_from_args(args) if self.check_files else getattr(args, "onnx", None)
        weights = weights_from_args(args) if self.check_files else getattr(args, "weights", None)
        precision = getattr(args, "precision", P.DEFAULT) if self.precision != "many" else P.DEFAULT
        return BackendRequest(backend, precision, onnx=onnx, engine=getattr(args, "engine", None), weights=weights,
                              threads=getattr(args, "threads", None) if self.threads else None)

    def backends(self, args) -> list[str] | None:
        """--backends (None: every available one)."""
        return backends_from_args(args)


# -- output locations ----------------------------------------------------------------------------------
def add_output_dir_arg(parser, default: str | None, flag: str = "--output", what: str = "report folder") -> None:
    parser.add_argument(flag, type=Path, default=Path(default) if default else None, metavar="DIR",
                        help=f"{what} (default: {default})" if default else what)


# Names that are report files, not folders: `--output x/cmp.md` is refused instead of becoming a folder cmp.md.
FILE_SUFFIXES = frozenset({".md", ".json", ".png", ".jpg", ".html", ".txt", ".csv", ".pdf", ".svg", ".onnx",
                           ".engine", ".plan"})


def check_output_dir(path, flag: str = "--output") -> Path:
    """A folder that is or can be made writable here; checked before any work, so none is lost."""
    path = Path(path)
    problem = folder_problem(path)
    if not problem and path.suffix.lower() in FILE_SUFFIXES and not path.exists():
        raise PipelineError(f"{flag} {path} names a {path.suffix.lower()[1:]} file; give a folder (the reports are "
                            "written into it)")
    if problem:
        raise PipelineError(f"{flag} {path} {problem}; give a folder")
    return path


def check_output_file(path, flag: str) -> Path:
    """A file name that can be written here (not a folder, not inside a file), checked before any work."""
    path = Path(path)
    if path.is_dir():
        raise PipelineError(f"{flag} {path} is a folder; give a file name")
    problem = folder_problem(path.parent)
    if problem:
        raise PipelineError(f"{flag} {path}: its folder {problem}")
    return path
