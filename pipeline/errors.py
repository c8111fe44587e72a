"""The one exception type the CLI turns into a single clear line (no traceback), and how to shorten others."""


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
