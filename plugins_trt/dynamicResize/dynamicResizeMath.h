// sr::DynamicResize per-element math (torch F.interpolate bicubic, align_corners=False), host and device.
//   src = (dst + 0.5) * (in / out) - 0.5        half-pixel centres, src itself is NOT clamped
//   floor(src) and its fraction come from integer math (sourcePosition): the fraction is the correctly
//   rounded float of a rational that depends only on in/out and dst's phase, so a crop whose size ratio is
//   the image's gets bit-identical taps and weights (tiled == whole, pipeline/sr/tiling.py). ATen computes
//   src in float, which differs by an ulp or so where in/out is not a power of two (x3, x2.5).
//   taps floor(src) - 1 .. floor(src) + 2       each tap index clamped to [0, in - 1] (replicate border)
//   weights: Keys cubic convolution, A = -0.75  (PyTorch's coefficient; ONNX Resize cubic_coeff_a=-0.75)
#pragma once

#include "../common/srCommon.h"

#include <cmath>

namespace sr
{

constexpr float kCubicA = -0.75f;

// |x| <= 1
SR_HD inline float cubicConvolution1(float x, float a)
{
    return ((a + 2.0f) * x - (a + 3.0f)) * x * x + 1.0f;
}

// 1 < |x| < 2
SR_HD inline float cubicConvolution2(float x, float a)
{
    return ((a * x - 5.0f * a) * x + 8.0f * a) * x - 4.0f * a;
}

// Weights of the 4 taps floor(src)-1 .. floor(src)+2 for fractional part t in [0, 1). Same expressions
// (and evaluation order) as ATen's get_cubic_upsample_coefficients so results match to the last ulp or two.
SR_HD inline void cubicWeights(float t, float w[4])
{
    w[0] = cubicConvolution2(t + 1.0f, kCubicA);
    w[1] = cubicConvolution1(t, kCubicA);
    w[2] = cubicConvolution1(1.0f - t, kCubicA);
    w[3] = cubicConvolution2(2.0f - t, kCubicA);
}

// floor(src) and src - floor(src) for src = ((2 dst + 1) in - out) / (2 out), exactly: no float rounding
// depends on dst's magnitude. The fraction is exact-rational rem / den, rounded once (rem, den < 2^24 for
// any output side below 8M pixels, so both convert exactly).
struct SourcePosition
{
    int floor;
    float frac;
};

SR_HD inline SourcePosition sourcePosition(int inSize, int outSize, int dst)
{
    int64_t const den = 2 * static_cast<int64_t>(outSize);
    int64_t const num = (2 * static_cast<int64_t>(dst) + 1) * inSize - outSize;
    int64_t rem = num % den; // C++ truncates towards zero: make it the floor remainder
    if (rem < 0)
    {
        rem += den;
    }
    return {static_cast<int>((num - rem) / den), static_cast<float>(rem) / static_cast<float>(den)};
}

SR_HD inline int clampIndex(int i, int size)
{
    return i < 0 ? 0 : (i >= size ? size - 1 : i);
}

// Taps and weights along one axis for output index dst.
struct CubicTaps
{
    int idx[4];
    float w[4];
};

SR_HD inline CubicTaps cubicTaps(int inSize, int outSize, int dst)
{
    CubicTaps taps;
    SourcePosition const src = sourcePosition(inSize, outSize, dst);
    cubicWeights(src.frac, taps.w);
    SR_UNROLL
    for (int k = 0; k < 4; ++k)
    {
        taps.idx[k] = clampIndex(src.floor - 1 + k, inSize);
    }
    return taps;
}

// One output value of one channel plane (hIn x wIn, row-major). Accumulates in float: rows first, then
// columns, as ATen does.
template <typename T>
SR_HD inline float dynamicResizeElement(T const* plane, int hIn, int wIn, CubicTaps const& ty, CubicTaps const& tx)
{
    float rows[4];
    SR_UNROLL
    for (int r = 0; r < 4; ++r)
    {
        T const* row = plane + static_cast<int64_t>(ty.idx[r]) * wIn;
        rows[r] = toFloat(row[tx.idx[0]]) * tx.w[0] + toFloat(row[tx.idx[1]]) * tx.w[1]
            + toFloat(row[tx.idx[2]]) * tx.w[2] + toFloat(row[tx.idx[3]]) * tx.w[3];
    }
    (void) hIn;
    return rows[0] * ty.w[0] + rows[1] * ty.w[1] + rows[2] * ty.w[2] + rows[3] * ty.w[3];
}

// A resize to the input's own size is the identity: its taps are (0, 1, 0, 0) exactly, so every implementation
// copies instead (16 multiply-adds a value saved, and inf/NaN kept where 0 * inf would make NaN).
SR_HD inline bool dynamicResizeIsCopy(int hIn, int wIn, int hOut, int wOut)
{
    return hIn == hOut && wIn == wOut;
}

// Convenience: output (oy, ox) of a plane, computing both axes' taps.
template <typename T>
SR_HD inline float dynamicResizeAt(T const* plane, int hIn, int wIn, int hOut, int wOut, int oy, int ox)
{
    CubicTaps const ty = cubicTaps(hIn, hOut, oy);
    CubicTaps const tx = cubicTaps(wIn, wOut, ox);
    return dynamicResizeElement(plane, hIn, wIn, ty, tx);
}

} // namespace sr
