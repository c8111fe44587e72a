"""What the sr stage prints: the header and failures always, progress and per-image lines unless quiet."""
from __future__ import annotations

import sys
import threading
from collections.abc import Callable

from tqdm import tqdm


class Console:
    def __init__(self, progress: bool = True, log: Callable[[str], object] | None = None):
        self.progress = progress
        self._log = log
        self._lock = threading.Lock()  # scheduler threads report too

    def _write(self, msg: str) -> None:
        with self._lock:
            if self._log is not None:
                self._log(msg)
            else:
                tqdm.write(msg, file=sys.stderr)

    def always(self, msg: str) -> None:
        """The header (model, scale, backend and why), failures, and anything the user must see."""
        self._write(msg)

    def info(self, msg: str) -> None:
        """Progress detail: per-image lines and totals; hidden when quiet."""
        if self.progress:
            self._write(msg)

    def bar(self, total: int | None, unit: str = "img", desc: str | None = None) -> tqdm:
        """A progress bar (count, rate, ETA when total is known; a video's frames may not be)."""
        return tqdm(total=total, unit=unit, desc=desc, disable=not self.progress or self._log is not None,
                    file=sys.stderr, dynamic_ncols=True)
