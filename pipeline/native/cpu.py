"""Which CPU this is: the model name from /proc/cpuinfo, read once per process (bench/compare reports and
`--backend auto`'s measurement key both name it), and whether it has bf16 arithmetic."""
from __future__ import annotations

import functools
import os
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


BF16_FLAGS = ("amx_bf16", "avx512_bf16")  # AMX tiles (Sapphire Rapids on) or AVX-512 BF16 (Cooper Lake on)
# Set to 0 to act as a CPU without bf16 (tests, or to keep a run in fp32 whatever the CPU).
BF16_ENV = "SRDEPLOY_CPU_BF16"


@functools.cache
def _cpu_flags() -> frozenset[str]:
    try:
        with open("/proc/cpuinfo") as f:
            return frozenset(next((ln.split(":", 1)[1].split() for ln in f if ln.startswith("flags")), []))
    except OSError:
        return frozenset()


def bf16_problem() -> str | None:
    """Why bf16 arithmetic is not to be used on this CPU, or None (it has AMX-BF16 or AVX512-BF16)."""
    if os.environ.get(BF16_ENV) == "0":
        return f"bf16 is switched off ({BF16_ENV}=0)"
    if not _cpu_flags() & set(BF16_FLAGS):
        return (f"this CPU has no bf16 arithmetic ({' or '.join(BF16_FLAGS)}): bf16 would be emulated, slower "
                "than fp32; run fp32")
    return None


# int8 dot products: AMX tiles, AVX-512 VNNI (Cascade Lake on) or AVX-VNNI (Alder Lake, Zen 5). Without them torch's
# int8 matrix product is a reference loop (1 GOP/s on a 2-core EPYC, against 87 GFLOP/s fp32): no peak to hold to.
INT8_FLAGS = ("amx_int8", "avx512_vnni", "avx_vnni")


def int8_problem() -> str | None:
    """Why this CPU has no int8 peak worth measuring, or None (it has AMX-INT8 or a VNNI dot product)."""
    if not _cpu_flags() & set(INT8_FLAGS):
        return f"this CPU has no int8 dot-product instruction ({', '.join(INT8_FLAGS)}): torch's int8 GEMM is emulated"
    return None

