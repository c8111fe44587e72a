// sr::DynamicResize per-element math (torch F.interpolate bicubic, align_corners=False), host and device.
//   src = (dst + 0.5) * (in / out) - 0.5        half-pixel centres, src itself is NOT clamped
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

// Scale from output to input coordinates (PyTorch computes it in float as in / out when a size is given).
SR_HD inline float resizeScale(int inSize, int outSize)
{
    return static_cast<float>(inSize) / static_cast<float>(outSize);
}

// Half-pixel source coordinate of output index dst.
SR_HD inline float resizeSourceIndex(float scale, int dst)
{
    return scale * (static_cast<float>(dst) + 0.5f) - 0.5f;
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

SR_HD inline CubicTaps cubicTaps(float scale, int dst, int inSize)
{
    CubicTaps taps;
    float const src = resizeSourceIndex(scale, dst);
    float const fl = floorf(src);
    int const i0 = static_cast<int>(fl);
    cubicWeights(src - fl, taps.w);
    SR_UNROLL
    for (int k = 0; k < 4; ++k)
    {
        taps.idx[k] = clampIndex(i0 - 1 + k, inSize);
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

// Convenience: output (oy, ox) of a plane, computing both axes' taps.
template <typename T>
SR_HD inline float dynamicResizeAt(T const* plane, int hIn, int wIn, int hOut, int wOut, int oy, int ox)
{
    CubicTaps const ty = cubicTaps(resizeScale(hIn, hOut), oy, hIn);
    CubicTaps const tx = cubicTaps(resizeScale(wIn, wOut), ox, wIn);
    return dynamicResizeElement(plane, hIn, wIn, ty, tx);
}

} // namespace sr
