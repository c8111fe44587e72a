"""The one exception type the CLI turns into a single clear line (no traceback)."""


class PipelineError(RuntimeError):
    """A user-facing failure: bad input, missing dependency, stale artifact. Message is one line."""
