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


# int8 dot products in hardware: AVX512-VNNI, AVX-VNNI (Alder Lake, Zen 5) or AMX-INT8 add u8 x s8 products in int32.
VNNI_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")
# Set to 0 to act as a CPU without VNNI (so a VNNI machine can make and check the narrowed int8 file).
VNNI_ENV = "SRDEPLOY_CPU_VNNI"


def int8_weight_bits() -> int:
    """How many bits an int8 file's weights may use here: 8 with VNNI; 7 ([-64, 63]) without, where oneDNN's int8
    kernels (AVX2's vpmaddubsw, AVX-512 without VNNI) add two u8 x s8 products into a saturating int16: 255 x 127 x 2
    overflows it, 255 x 64 x 2 does not (OpenVINO/NNCF's "overflow fix")."""
    if os.environ.get(VNNI_ENV) == "0" or not _cpu_flags() & set(VNNI_FLAGS):
        return 7
    return 8
