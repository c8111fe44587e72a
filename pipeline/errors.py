"""The one exception type the CLI turns into a single clear line (no traceback), how to shorten others, and how to
tell a user to install what is missing."""
from pathlib import Path

# Optional packages by import name, and the srdeploy extra (pyproject.toml) that brings each.
EXTRA_OF = {"torch": "export", "torchvision": "export", "onnxscript": "export", "spandrel": "export",
            "safetensors": "export", "onnxruntime_extensions": "export", "ray": "cluster", "tritonclient": "cluster",
            "tensorrt": "gpu", "cuda": "gpu"}


class PipelineError(RuntimeError):
    """A user-facing failure: bad input, missing dependency, stale artifact. Message is one line."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread by the CLI's handler: a run stops as it does on Ctrl-C (exit 143)."""


class ReportedInterrupt(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) after the stage already said what was kept and how to resume: the CLI exits with the
    signal's code (130, 143) without a second line."""

    def __init__(self, cause: KeyboardInterrupt):
        super().__init__()
        self.terminated = isinstance(cause, Terminated)


def first_line(e: BaseException) -> str:
    """The first line of an exception's message, or its type name when it has none."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def check_choice(what: str, value, allowed) -> str:
    """`value` when it is one of `allowed`, else the one-line error every choice list gives (precision, exporter,
    backend, ...): "unknown WHAT 'VALUE' (choose from: A, B)"."""
    allowed = tuple(allowed)
    if value not in allowed:
        raise PipelineError(f"unknown {what} '{value}' (choose from: {', '.join(map(str, allowed))})")
    return value


def in_checkout() -> bool:
    """Whether this runs from a source checkout (its Makefile beside the packages: `make` targets exist) rather than
    a pip install (site-packages), for advice that names commands."""
    return (Path(__file__).resolve().parents[1] / "Makefile").is_file()


def install_command(extra: str) -> str:
    """The command that installs an extra here: the editable install in a source checkout, else pip from the
    package index (a `pip install srdeploy` user has no checkout)."""
    if extra == "gpu":  # onnxruntime-gpu takes onnxruntime's place: the two cannot share an environment
        if in_checkout():  # the Makefile swaps the builds in .venv (and the README says the same)
            return "make setup ORT=gpu"
        return "pip uninstall -y onnxruntime && pip install 'srdeploy[gpu]'"
    if in_checkout():
        return f"pip install -e '.[{extra}]'"
    return f"pip install 'srdeploy[{extra}]'"


def missing_extra(e: ImportError) -> str | None:
    """`PACKAGE, which is not installed (the EXTRA extra: COMMAND)` when `e` is an optional package's absence, else
    None."""
    name = getattr(e, "name", None)  # a package itself, not a missing part of an installed one (`torch.x`)
    if not isinstance(e, ModuleNotFoundError) or name not in EXTRA_OF:
        return None
    return f"{name}, which is not installed (the {EXTRA_OF[name]} extra: {install_command(EXTRA_OF[name])})"
