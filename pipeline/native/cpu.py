"""Which CPU this is: the model name from /proc/cpuinfo, read once per process (bench/compare reports and
`--backend auto`'s measurement key both name it), and which instructions it has for us: bf16 arithmetic, and the
kind it counts as (`cpu_kind`). oneDNN's instruction-set cap (ONEDNN_MAX_CPU_ISA, honoured by PyTorch's and
OpenVINO's CPU kernels) caps our own decisions too, so one machine can act as a lower kind (tests/test_cpu_kinds.py)."""
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


ISA_CAP_ENV = "ONEDNN_MAX_CPU_ISA"
# oneDNN's cap levels, lowest first, each with the flags it adds to the one below (the ones we decide by).
ISA_LEVELS = (("SSE41", ()), ("AVX", ("avx",)), ("AVX2", ("avx2", "fma")), ("AVX2_VNNI", ("avx_vnni",)),
              ("AVX512_CORE", ("avx512f", "avx512bw", "avx512vl", "avx512dq")),
              ("AVX512_CORE_VNNI", ("avx512_vnni",)), ("AVX512_CORE_BF16", ("avx512_bf16",)),
              ("AVX512_CORE_FP16", ("avx512_fp16",)), ("AVX512_CORE_AMX", ("amx_tile", "amx_int8", "amx_bf16")))
# The kinds of CPU this project runs on, lowest first: the name and the flags that make a machine that kind or above.
CPU_KINDS = (("avx2", ("avx2", "fma")), ("avx512", ("avx512f", "avx512bw", "avx512vl", "avx512dq")),
             ("avx512-vnni", ("avx512_vnni",)), ("avx512-bf16", ("avx512_bf16",)), ("amx", ("amx_tile", "amx_bf16")))


def _capped(flags: frozenset[str], cap: str | None) -> frozenset[str]:
    """`flags` less those above oneDNN's cap `cap` (a level name, any case; "ALL", unset or unknown: no cap)."""
    names = [name for name, _ in ISA_LEVELS]
    if not cap or cap.upper() not in names:
        return flags
    above = {f for _, added in ISA_LEVELS[names.index(cap.upper()) + 1:] for f in added}
    family = [prefix for prefix, level in (("avx512", "AVX512_CORE"), ("amx", "AVX512_CORE_AMX"))
              if names.index(cap.upper()) < names.index(level)]
    return frozenset(f for f in flags if f not in above and not f.startswith(tuple(family)))


@functools.cache
def _cpu_flags() -> frozenset[str]:
    """The CPU's flags as the libraries use them: /proc/cpuinfo's, less those above ONEDNN_MAX_CPU_ISA."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = frozenset(next((ln.split(":", 1)[1].split() for ln in f if ln.startswith("flags")), []))
    except OSError:
        return frozenset()
    return _capped(flags, os.environ.get(ISA_CAP_ENV))


def has(*flags: str) -> bool:
    """Whether this CPU (as capped) has every one of `flags` (/proc/cpuinfo's names, e.g. "avx2")."""
    return set(flags) <= _cpu_flags()


def cpu_kind() -> str | None:
    """The highest of CPU_KINDS this CPU (as capped) is, or None below AVX2."""
    flags, kind = _cpu_flags(), None
    for name, needs in CPU_KINDS:
        if not set(needs) <= flags:
            break
        kind = name
    return kind


def bf16_native() -> bool:
    """Whether this CPU (as capped) has bf16 arithmetic: AMX-BF16 or AVX512-BF16."""
    return bool(_cpu_flags() & set(BF16_FLAGS))


def bf16_problem() -> str | None:
    """Why bf16 arithmetic is not to be used on this CPU, or None (it has AMX-BF16 or AVX512-BF16)."""
    if os.environ.get(BF16_ENV) == "0":
        return f"bf16 is switched off ({BF16_ENV}=0)"
    if not bf16_native():
        return (f"this CPU has no bf16 arithmetic ({' or '.join(BF16_FLAGS)}): bf16 would be emulated, slower "
                "than fp32; run fp32")
    return None


# int8 dot products in hardware: AVX512-VNNI (Cascade Lake on), AVX-VNNI (Alder Lake, Zen 5) or AMX-INT8 add u8 x s8
# products in int32. Without them torch's int8 matrix product is a reference loop (1 GOP/s on a 2-core EPYC, against
# 87 GFLOP/s fp32: no peak to hold to) and oneDNN's int8 kernels saturate in int16 (int8_weight_bits).
VNNI_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")
# Set to 0 to act as a CPU without VNNI (so a VNNI machine can make and check the narrowed int8 file).
VNNI_ENV = "SRDEPLOY_CPU_VNNI"


def int8_problem() -> str | None:
    """Why this CPU has no int8 peak worth measuring, or None (it has AMX-INT8 or a VNNI dot product)."""
    if not _cpu_flags() & set(VNNI_FLAGS):
        return f"this CPU has no int8 dot-product instruction ({', '.join(VNNI_FLAGS)}): torch's int8 GEMM is emulated"
    return None


def int8_weight_bits() -> int:
    """How many bits an int8 file's weights may use here: 8 with VNNI; 7 ([-64, 63]) without, where oneDNN's int8
    kernels (AVX2's vpmaddubsw, AVX-512 without VNNI) add two u8 x s8 products into a saturating int16: 255 x 127 x 2
    overflows it, 255 x 64 x 2 does not (OpenVINO/NNCF's "overflow fix")."""
    if os.environ.get(VNNI_ENV) == "0" or not _cpu_flags() & set(VNNI_FLAGS):
        return 7
    return 8
