"""Ray's own C++ log lines (`[2026-01-02 03:04:05,678 E 123 123] core_worker.cc:2465: ...`) kept off the driver's
terminal while it is connected: the driver's core worker writes them to stderr (fd 2), where a warning about
actor restarts reads like an error of ours; Ray keeps its logs in its session folder. Everything else written to
fd 2 (our lines, the progress bar, a fatal Ray line) passes through unchanged."""
from __future__ import annotations

import os
import re
import sys
import threading

RAY_LINE = re.compile(rb"^(\((raylet|gcs_server)[^)]*\) )?"  # a Ray process's own line, as the log monitor prefixes it
                      rb"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ [IWE] \d+ \d+\] \S+:\d+: ")


def keep(data: bytes) -> tuple[bytes, bytes]:
    """(what to pass on, what to hold back until more arrives) for `data` read from fd 2: complete lines that are
    Ray's dropped; a partial line passed on at once unless it may be the start of one of Ray's (`[`, `(raylet) [`)."""
    *lines, rest = data.split(b"\n")
    out = b"".join(line + b"\n" for line in lines if not RAY_LINE.match(line))
    if rest and not rest.startswith((b"[", b"(")):
        return out + rest, b""
    return out, rest


class StderrFilter:
    """fd 2 through a pipe and a thread that drops Ray's lines, until close()."""

    def __init__(self):
        sys.stderr.flush()
        self._terminal = os.dup(2)
        read_end, write_end = os.pipe()
        os.dup2(write_end, 2)
        os.close(write_end)
        self._thread = threading.Thread(target=self._pump, args=(read_end,), daemon=True)
        self._thread.start()

    def _pump(self, read_end: int) -> None:
        held = b""
        while chunk := os.read(read_end, 1 << 16):
            out, held = keep(held + chunk)
            if out:
                os.write(self._terminal, out)
        if held and not RAY_LINE.match(held):
            os.write(self._terminal, held)
        os.close(read_end)

    def close(self) -> None:
        sys.stderr.flush()
        os.dup2(self._terminal, 2)  # the pipe's last write end here: the thread reads to its end and stops
        self._thread.join(timeout=5)  # (a Ray process still alive may hold a copy: the daemon thread goes on)
