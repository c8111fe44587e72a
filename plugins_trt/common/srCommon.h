// Shared helpers for the sr kernels: compiled by g++ (CPU loops, plugin host code) and nvcc (CUDA kernels).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

// Per-element math is written once and compiled for host and device.
#if defined(__CUDACC__)
#define SR_HD __host__ __device__
#else
#define SR_HD
#endif
// Unroll hint for the device pass only (the host compiler would warn about an unknown pragma).
#if defined(__CUDA_ARCH__)
#define SR_UNROLL _Pragma("unroll")
#else
#define SR_UNROLL
#endif

// __half helpers exist whenever cuda_fp16.h is reachable (nvcc, or g++ with the CUDA include path).
// The CPU-only library defines SR_NO_CUDA_HEADERS so it never depends on the CUDA toolkit.
#if !defined(SR_NO_CUDA_HEADERS) && (defined(__CUDACC__) || __has_include(<cuda_fp16.h>))
#include <cuda_fp16.h>
#define SR_HAVE_HALF 1
#else
#define SR_HAVE_HALF 0
#endif

namespace sr
{

// Workspace pointers handed to our launchers are aligned up to this (TensorRT gives 256-byte aligned memory,
// but we never rely on it).
constexpr size_t kWorkspaceAlignment = 256;

SR_HD inline size_t alignUp(size_t v, size_t a)
{
    return (v + a - 1) / a * a;
}

// Storage type <-> float (all arithmetic happens in float).
SR_HD inline float toFloat(float v)
{
    return v;
}
template <typename T>
SR_HD inline T fromFloat(float v);
template <>
SR_HD inline float fromFloat<float>(float v)
{
    return v;
}

#if SR_HAVE_HALF
SR_HD inline float toFloat(__half v)
{
    return __half2float(v);
}
template <>
SR_HD inline __half fromFloat<__half>(float v)
{
    return __float2half_rn(v);
}
#endif

// Host-side emulation of FP32 -> FP16 -> FP32 rounding (round to nearest even, IEEE binary16 with
// subnormals, overflow to inf). Lets the CPU build reproduce what FP16 I/O does to values.
inline float roundToHalf(float v)
{
    uint32_t x;
    std::memcpy(&x, &v, sizeof x);
    uint32_t const sign = x & 0x80000000u;
    uint32_t const absx = x & 0x7fffffffu;
    uint32_t out;
    if (absx >= 0x7f800000u) // inf / nan stay as they are (nan keeps a quiet payload)
    {
        out = x | (absx > 0x7f800000u ? 0x00400000u : 0u);
    }
    else if (absx >= 0x477ff000u) // >= 65520 rounds to inf in binary16
    {
        out = sign | 0x7f800000u;
    }
    else if (absx < 0x33000000u) // < 2^-25: rounds to (signed) zero
    {
        out = sign;
    }
    else
    {
        int const exp = static_cast<int>(absx >> 23) - 127;
        // binary16 keeps 10 mantissa bits for normals (exp >= -14); subnormals keep fewer.
        int const keep = exp >= -14 ? 10 : 10 - (-14 - exp);
        int const drop = 23 - keep;
        uint32_t mant = (absx & 0x007fffffu) | 0x00800000u; // explicit leading one
        uint32_t const half = 1u << (drop - 1);
        uint32_t const rem = mant & ((1u << drop) - 1u);
        mant >>= drop;
        if (rem > half || (rem == half && (mant & 1u)))
        {
            ++mant;
        }
        // mant has keep+1 significant bits (or carried into the next power of two): value = mant * 2^(exp-keep).
        float const r = std::ldexp(static_cast<float>(mant), exp - keep);
        std::memcpy(&out, &r, sizeof out);
        out |= sign;
    }
    float res;
    std::memcpy(&res, &out, sizeof res);
    return res;
}

} // namespace sr
