"""The one exception type the CLI turns into a single clear line (no traceback), and how to shorten others."""


class PipelineError(RuntimeError):
    """A user-facing failure: bad input, missing dependency, stale artifact. Message is one line."""


def first_line(e: BaseException) -> str:
    """The first line of an exception's message, or its type name when it has none."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
