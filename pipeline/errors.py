"""The one exception type the CLI turns into a single clear line (no traceback), how to shorten others, how to
tell a user to install what is missing, and how text from users' files is made safe to print (printable)."""
import re
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


# C0 and C1 controls (ESC starts colour, cursor and OSC 52 clipboard sequences, CR overwrites a line), DEL, line and
# paragraph separators, the bidirectional overrides that reorder what a terminal shows, and lone surrogates (a file
# name's bytes that are not UTF-8, as Python holds them: no UTF-8 writer takes them)
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\x1b": "\\x1b"}


def _escape(ch: str) -> str:
    if 0xDC80 <= ord(ch) <= 0xDCFF:  # the byte a file name held (surrogateescape), as \xNN
        return f"\\x{ord(ch) - 0xDC00:02x}"
    return _NAMED.get(ch) or (f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")


def printable(text: str, keep: str = "") -> str:
    """`text` with every control character written as an escape (ESC as \\x1b, CR as \\r, a newline as \\n), so a
    model name or a file name from a user's file prints as what it is and cannot drive the terminal; characters in
    `keep` (a stream's own newlines) are left as they are."""
    return _CONTROL.sub(lambda m: m.group() if m.group() in keep else _escape(m.group()), str(text))


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
        if in_checkout():  # the Makefile swaps the builds in .venv (and docs/gpu.md says the same)
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
