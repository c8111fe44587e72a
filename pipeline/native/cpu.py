"""Which CPU this is: the model name from /proc/cpuinfo, read once per process (bench/compare reports and
`--backend auto`'s measurement key both name it)."""
from __future__ import annotations

import functools
import platform


@functools.cache
def cpu_name() -> str:
    """'Intel(R) Xeon(R) ...' on Linux; elsewhere (or unreadable) platform.processor() or the machine type."""
    fallback = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), fallback)
    except OSError:
        return fallback
