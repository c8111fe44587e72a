"""The CLI's terminal: while a command runs, stdout and stderr pass through pipeline.errors.printable, so a model
name or a file name from a user's file that reaches any printed line (ESC colour or OSC 52 clipboard sequences, a
CR that overwrites the line) is shown escaped. The streams keep their own newlines and tabs; stderr keeps CR too,
which the progress bar redraws with (the sr stage's own lines escape CR: pipeline.sr.runner.console)."""
from __future__ import annotations

import contextlib
import sys

from pipeline.errors import printable


class EscapingStream:
    """A text stream whose writes go out through printable(text, keep); everything else is the wrapped stream's."""

    def __init__(self, stream, keep: str):
        self._stream, self._keep = stream, keep

    def write(self, text: str) -> int:
        self._stream.write(printable(text, self._keep))
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


@contextlib.contextmanager
def escaped_output():
    """stdout and stderr escaped for the duration (restored after, whatever replaced them meanwhile)."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = EscapingStream(out, "\n\t"), EscapingStream(err, "\n\t\r")
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err
