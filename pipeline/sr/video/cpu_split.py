"""Where a clip's CPU time goes: decoding, inference, encoding (the done line's split).

A clip's reader and encoder threads name themselves (Linux: the kernel's thread name, which the threads FFmpeg's
decoder and x264/x265 start from them inherit), so every thread's CPU time (/proc/self/task) falls into a stage by
its name; the rest of the process (inference's thread pools, this thread) is inference. Threads end before the
clip does (the codecs' pools close with their files), so each stage samples before it closes them and the largest
reading per thread counts. Elsewhere (no /proc) the split falls back to the stages' busy wall time.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from pathlib import Path

DECODE, ENCODE = "sr-decode", "sr-encode"  # thread names (the kernel keeps 15 bytes)
_TASKS = Path("/proc/self/task")
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def name_thread(name: str) -> None:
    """Give this OS thread `name` (threads it starts inherit it); a no-op where the kernel has no such call."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None)
        libc.prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME


def _threads() -> dict[int, tuple[str, float]]:
    """Every live thread of this process: id -> (name, CPU seconds)."""
    out = {}
    for task in _TASKS.iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = (task / "stat").read_text()
            name = stat[stat.index("(") + 1:stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2:].split()
            out[int(task.name)] = (name, (int(fields[11]) + int(fields[12])) / _TICK)
    return out


class CpuMeter:
    """One clip's CPU seconds per stage, from its start to its last sample."""

    def __init__(self):
        self.works = _TASKS.is_dir()
        self._lock = threading.Lock()
        self._start = _threads() if self.works else {}
        self._seen: dict[int, tuple[str, float]] = dict(self._start)

    def sample(self) -> None:
        """Every live thread's CPU time now (called by each stage before its threads end)."""
        if not self.works:
            return
        now = _threads()
        with self._lock:
            for tid, (name, cpu) in now.items():
                if tid not in self._seen or cpu >= self._seen[tid][1]:
                    self._seen[tid] = (name, cpu)

    def stages(self) -> dict[str, float] | None:
        """CPU seconds of decode, inference and encode since the start; None without /proc."""
        if not self.works:
            return None
        self.sample()
        split = {"decode": 0.0, "inference": 0.0, "encode": 0.0}
        for tid, (name, cpu) in self._seen.items():
            base = self._start.get(tid)
            used = max(0.0, cpu - (base[1] if base and base[0] == name else 0.0))  # a reused id: a new thread
            stage = "decode" if name.startswith(DECODE) else "encode" if name.startswith(ENCODE) else "inference"
            split[stage] += used
        return split
