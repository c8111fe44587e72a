// CPU build of the sr kernels: the per-element functions of the *Math.h headers in plain loops (FP32),
// following the CUDA launchers' structure (same im2col layout and chunk rule) so tests exercise that logic too.
#include "cpu/srKernelsCpu.h"
#include "cpu/srKernelsCpuErrors.h"

#include "deformConv2d/deformConv2dMath.h"
#include "dynamicResize/dynamicResizeMath.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <exception>
#include <string>
#include <vector>

namespace sr
{

thread_local std::string gLastError;

int cpuFail(int code, std::string const& msg)
{
    gLastError = msg;
    return code;
}

int cpuOk()
{
    gLastError.clear();
    return SR_OK;
}

} // namespace sr

namespace
{

using sr::gLastError;
int fail(int code, std::string const& msg)
{
    return sr::cpuFail(code, msg);
}

int ok()
{
    return sr::cpuOk();
}

// One 8-bit sample: rint(v * 255) clipped to [0, 255], as numpy's multiply, rint, clip (pipeline.backends.pixels).
// Clipping before rounding gives the same integer; a NaN becomes 0. Adding and subtracting 2^23 rounds a value in
// [0, 2^23) to the nearest integer, ties to even, in float32 itself (no libm call, no rounding-mode dependence
// beyond the default); the clamp between the product and the add keeps them from fusing into one FMA.
constexpr float kRound = 8388608.0f;

inline uint8_t toSample8(float v)
{
    float s = v * 255.0f;
    s = s >= 0.0f ? s : 0.0f;
    s = s > 255.0f ? 255.0f : s;
    return static_cast<uint8_t>(static_cast<int>((s + kRound) - kRound));
}

// toSample8 on n values, 16 at a time with SSE2 (every x86-64 CPU; GCC does not vectorise the selects itself):
// maxps(s, 0) gives 0 for a NaN as toSample8 does, the rest is the same float32 arithmetic.
void toSamples8(float const* src, uint8_t* dst, size_t n)
{
    size_t j = 0;
#if defined(__SSE2__)
    __m128 const scale = _mm_set1_ps(255.0f), zero = _mm_setzero_ps(), top = _mm_set1_ps(255.0f);
    __m128 const round = _mm_set1_ps(kRound);
    auto four = [&](float const* p)
    {
        __m128 s = _mm_min_ps(_mm_max_ps(_mm_mul_ps(_mm_loadu_ps(p), scale), zero), top);
        return _mm_cvttps_epi32(_mm_sub_ps(_mm_add_ps(s, round), round));
    };
    for (; j + 16 <= n; j += 16)
    {
        __m128i const lo = _mm_packs_epi32(four(src + j), four(src + j + 4));
        __m128i const hi = _mm_packs_epi32(four(src + j + 8), four(src + j + 12));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + j), _mm_packus_epi16(lo, hi));
    }
#endif
    for (; j < n; ++j)
        dst[j] = toSample8(src[j]);
}

// 1 when a float's exponent bits are all set (NaN or an infinity), as integer arithmetic that vectorises.
inline int nonFinite(float v)
{
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    return (bits & 0x7f800000u) == 0x7f800000u;
}

// One sample's NCHW float RGB planes -> its NHWC uint8 BGR pixels, a chunk of pixels at a time: each plane converted
// in a loop of its own (vectorised), then interleaved; returns the pixels with a non-finite channel.
int64_t toSamplesU8(float const* rgb, uint8_t* out, size_t plane)
{
    constexpr size_t kChunk = 1024;
    uint8_t q[3][kChunk];
    int64_t bad = 0;
    for (size_t p0 = 0; p0 < plane; p0 += kChunk)
    {
        size_t const m = std::min(kChunk, plane - p0);
        for (int c = 0; c < 3; ++c)
            toSamples8(rgb + c * plane + p0, q[c], m);
        float const* r = rgb + p0;
        for (size_t j = 0; j < m; ++j)
            bad += nonFinite(r[j]) | nonFinite(r[plane + j]) | nonFinite(r[2 * plane + j]);
        uint8_t* o = out + 3 * p0;
        for (size_t j = 0; j < m; ++j)
        {
            o[3 * j] = q[2][j];
            o[3 * j + 1] = q[1][j];
            o[3 * j + 2] = q[0][j];
        }
    }
    return bad;
}

// The sizes the column-chunking rules read (the rest of the shape does not change them).
sr::DeformConvShape columnShape(int n, int cIn, int kH, int kW, int hOut, int wOut)
{
    sr::DeformConvShape s {};
    s.n = n;
    s.cIn = cIn;
    s.kH = kH;
    s.kW = kW;
    s.hOut = hOut;
    s.wOut = wOut;
    return s;
}

// Copy of `count` values, FP16-rounded when emulating (the caller's buffers are never modified).
std::vector<float> maybeRounded(float const* src, size_t count, bool emulate)
{
    std::vector<float> v(src, src + count);
    if (emulate)
    {
        for (float& x : v)
            x = sr::roundToHalf(x);
    }
    return v;
}

constexpr int kCoBlock = 4;
constexpr int64_t kPBlock = 512;

// acc[r][p] = sum_k w[r][k] * col[k][p] for r < rows (<= kCoBlock), p < pn; col rows are `ld` apart, w rows kLen.
void gemmBlock(float const* w, int64_t kLen, int rows, float const* col, int64_t ld, int64_t pn, float* acc)
{
    for (int r = 0; r < rows; ++r)
        for (int64_t p = 0; p < pn; ++p)
            acc[r * kPBlock + p] = 0.0f;
    if (rows == kCoBlock)
    {
        float* a0 = acc;
        float* a1 = acc + kPBlock;
        float* a2 = acc + 2 * kPBlock;
        float* a3 = acc + 3 * kPBlock;
        for (int64_t k = 0; k < kLen; ++k)
        {
            float const w0 = w[k], w1 = w[kLen + k], w2 = w[2 * kLen + k], w3 = w[3 * kLen + k];
            float const* c = col + k * ld;
            for (int64_t p = 0; p < pn; ++p)
            {
                float const v = c[p];
                a0[p] += w0 * v;
                a1[p] += w1 * v;
                a2[p] += w2 * v;
                a3[p] += w3 * v;
            }
        }
        return;
    }
    for (int r = 0; r < rows; ++r)
        for (int64_t k = 0; k < kLen; ++k)
        {
            float const wk = w[r * kLen + k];
            float const* c = col + k * ld;
            for (int64_t p = 0; p < pn; ++p)
                acc[r * kPBlock + p] += wk * c[p];
        }
}

} // namespace

extern "C"
{
    int sr_kernels_abi_version(void)
    {
        return SR_KERNELS_CPU_ABI;
    }

    char const* sr_last_error(void)
    {
        return gLastError.c_str();
    }

    void sr_round_to_half(float* values, size_t count)
    {
        for (size_t i = 0; i < count; ++i)
            values[i] = sr::roundToHalf(values[i]);
    }

    int sr_to_samples_u8(float const* y, uint8_t* out, int n, int h, int w, int64_t* nonfinite)
    {
        if (n < 0 || h < 0 || w < 0)
            return fail(SR_ERR_INVALID_ARGUMENT, "to_samples_u8: sizes must be non-negative");
        size_t const plane = static_cast<size_t>(h) * static_cast<size_t>(w);
        if (n == 0 || plane == 0)
            return ok();
        if (y == nullptr || out == nullptr || nonfinite == nullptr)
            return fail(SR_ERR_NULL_POINTER, "to_samples_u8: null buffer");
        for (int i = 0; i < n; ++i)
            nonfinite[i]
                = toSamplesU8(y + static_cast<size_t>(i) * 3 * plane, out + static_cast<size_t>(i) * 3 * plane, plane);
        return ok();
    }

    int sr_dynamic_resize_f32(
        float const* in, float* out, int n, int c, int hIn, int wIn, int hOut, int wOut, int emulateFp16)
    {
        if (n < 0 || c < 0 || hIn < 0 || wIn < 0 || hOut < 0 || wOut < 0)
            return fail(SR_ERR_INVALID_ARGUMENT, "dynamic_resize: sizes must be non-negative");
        int64_t const planes = static_cast<int64_t>(n) * c;
        if (planes == 0 || hOut == 0 || wOut == 0)
            return ok();
        if (hIn == 0 || wIn == 0)
            return fail(SR_ERR_INVALID_ARGUMENT, "dynamic_resize: cannot resize an empty image to a non-empty size");
        if (in == nullptr || out == nullptr)
            return fail(SR_ERR_NULL_POINTER, "dynamic_resize: null buffer");
        try
        {
            bool const emulate = emulateFp16 != 0;
            size_t const planeIn = static_cast<size_t>(hIn) * wIn;
            size_t const planeOut = static_cast<size_t>(hOut) * wOut;
            if (sr::dynamicResizeIsCopy(hIn, wIn, hOut, wOut))
            {
                size_t const count = static_cast<size_t>(planes) * planeIn;
                std::copy(in, in + count, out); // the identity; fp16 emulation rounds the copy as it would the sum
                if (emulate)
                    for (size_t i = 0; i < count; ++i)
                        out[i] = sr::roundToHalf(out[i]);
                return ok();
            }
            std::vector<float> const src = maybeRounded(in, static_cast<size_t>(planes) * planeIn, emulate);
            std::vector<sr::CubicTaps> tx(wOut);
            for (int ox = 0; ox < wOut; ++ox)
                tx[ox] = sr::cubicTaps(wIn, wOut, ox);
            for (int64_t p = 0; p < planes; ++p)
            {
                float const* plane = src.data() + p * planeIn;
                float* dst = out + p * planeOut;
                for (int oy = 0; oy < hOut; ++oy)
                {
                    sr::CubicTaps const ty = sr::cubicTaps(hIn, hOut, oy);
                    for (int ox = 0; ox < wOut; ++ox)
                    {
                        float const v = sr::dynamicResizeElement(plane, hIn, wIn, ty, tx[ox]);
                        dst[static_cast<int64_t>(oy) * wOut + ox] = emulate ? sr::roundToHalf(v) : v;
                    }
                }
            }
        }
        catch (std::exception const& e)
        {
            return fail(SR_ERR_INTERNAL, std::string("dynamic_resize: ") + e.what());
        }
        return ok();
    }

    int sr_deform_conv2d_chunk(
        int n, int cIn, int kH, int kW, int hOut, int wOut, size_t elemSize, size_t budget, int* images, int* rows)
    {
        if (images == nullptr || rows == nullptr)
            return fail(SR_ERR_NULL_POINTER, "deform_conv2d_chunk: null output");
        sr::DeformConvShape const s = columnShape(n, cIn, kH, kW, hOut, wOut);
        sr::DeformConvChunk const ch
            = sr::deformConv2dChunk(s, elemSize, budget ? budget : sr::kDeformConvColumnBudget);
        *images = ch.images;
        *rows = ch.rows;
        return ok();
    }

    size_t sr_deform_conv2d_min_workspace_impl(
        int nMax, int cIn, int kH, int kW, int hOutMax, int wOutMax, size_t elemSize, int fixedShape, int impl)
    {
        sr::DeformConvShape const s = columnShape(nMax, cIn, kH, kW, hOutMax, wOutMax);
        if (nMax <= 0 || cIn <= 0 || kH <= 0 || kW <= 0 || hOutMax <= 0 || wOutMax <= 0 || elemSize == 0
            || (impl != sr::kDeformConvFused && impl != sr::kDeformConvIm2col))
            return 0;
        return sr::deformConv2dProfileWorkspaceBytes(s, elemSize, fixedShape != 0, impl);
    }

    size_t sr_deform_conv2d_min_workspace(
        int nMax, int cIn, int kH, int kW, int hOutMax, int wOutMax, size_t elemSize, int fixedShape)
    {
        // An unknown SR_DEFORM_CONV2D_IMPL counts as the larger im2col rule here; the plugin refuses it by name.
        int32_t const impl = sr::deformConv2dImplFromEnv();
        return sr_deform_conv2d_min_workspace_impl(nMax, cIn, kH, kW, hOutMax, wOutMax, elemSize, fixedShape,
            impl < 0 ? static_cast<int32_t>(sr::kDeformConvIm2col) : impl);
    }

    int sr_deform_conv2d_f32(float const* input, float const* weight, float const* offset, float const* mask,
        float const* bias, float* output, int n, int cIn, int hIn, int wIn, int cOut, int kH, int kW, int hOut,
        int wOut, int strideH, int strideW, int padH, int padW, int dilH, int dilW, int group, int offsetGroup,
        int emulateFp16, size_t columnBudget)
    {
        sr::DeformConvShape const s {n, cIn, hIn, wIn, cOut, kH, kW, hOut, wOut, strideH, strideW, padH, padW, dilH,
            dilW, group, offsetGroup, bias != nullptr, mask != nullptr};
        if (char const* why = sr::deformConv2dCheckShape(s))
            return fail(SR_ERR_INVALID_ARGUMENT, std::string("deform_conv2d: ") + why);
        if (n == 0)
            return ok();
        if (input == nullptr || weight == nullptr || offset == nullptr || output == nullptr)
            return fail(SR_ERR_NULL_POINTER, "deform_conv2d: null buffer");
        try
        {
            bool const emulate = emulateFp16 != 0;
            int const taps = kH * kW;
            int const cInG = cIn / group;
            int const cOutG = cOut / group;
            int64_t const outPlane = static_cast<int64_t>(hOut) * wOut;
            size_t const inCount = static_cast<size_t>(n) * cIn * hIn * wIn;
            size_t const offCount = static_cast<size_t>(n) * offsetGroup * 2 * taps * outPlane;
            size_t const maskCount = static_cast<size_t>(n) * offsetGroup * taps * outPlane;
            std::vector<float> const x = maybeRounded(input, inCount, emulate);
            std::vector<float> const w = maybeRounded(weight, static_cast<size_t>(cOut) * cInG * taps, emulate);
            std::vector<float> const off = maybeRounded(offset, offCount, emulate);
            std::vector<float> const mk = mask ? maybeRounded(mask, maskCount, emulate) : std::vector<float>();
            std::vector<float> const b = bias ? maybeRounded(bias, cOut, emulate) : std::vector<float>();

            sr::DeformConvChunk const ch
                = sr::deformConv2dChunk(s, emulate ? 2 : 4, columnBudget ? columnBudget : sr::kDeformConvColumnBudget);
            std::vector<float> columns(sr::deformConv2dColumnElements(s, ch));
            std::vector<float> acc(static_cast<size_t>(kCoBlock) * kPBlock);

            for (int img0 = 0; img0 < n; img0 += ch.images)
            {
                int const images = ch.images < n - img0 ? ch.images : n - img0;
                for (int row0 = 0; row0 < hOut; row0 += ch.rows)
                {
                    int const rows = ch.rows < hOut - row0 ? ch.rows : hOut - row0;
                    int64_t const cols = static_cast<int64_t>(rows) * wOut;
                    // Deformable im2col: columns [image][c * taps + tap][rows * Wo].
                    for (int bi = 0; bi < images; ++bi)
                    {
                        int64_t const img = img0 + bi;
                        float const* image = x.data() + img * cIn * hIn * wIn;
                        float const* offImg = off.data() + img * offsetGroup * 2 * taps * outPlane;
                        float const* mkImg = mask ? mk.data() + img * offsetGroup * taps * outPlane : nullptr;
                        for (int c = 0; c < cIn; ++c)
                            for (int i = 0; i < kH; ++i)
                                for (int j = 0; j < kW; ++j)
                                {
                                    float* col = columns.data()
                                        + ((bi * static_cast<int64_t>(cIn) + c) * taps + i * kW + j) * cols;
                                    for (int64_t p = 0; p < cols; ++p)
                                    {
                                        int const oy = row0 + static_cast<int>(p / wOut);
                                        int const ox = static_cast<int>(p % wOut);
                                        float const v
                                            = sr::deformIm2colElement(s, image, offImg, mkImg, c, i, j, oy, ox);
                                        col[p] = emulate ? sr::roundToHalf(v) : v;
                                    }
                                }
                    }
                    // GEMM per image and group: out[co, p] = bias[co] + sum_k W[co, k] * col[k, p] (FP32 accumulate,
                    // k in order). Blocked: kCoBlock output channels x kPBlock positions stay in L1 while k streams.
                    for (int bi = 0; bi < images; ++bi)
                    {
                        int64_t const img = img0 + bi;
                        for (int g = 0; g < group; ++g)
                        {
                            float const* colG
                                = columns.data() + (bi * static_cast<int64_t>(cIn) + g * cInG) * taps * cols;
                            int64_t const kLen = static_cast<int64_t>(cInG) * taps;
                            for (int64_t p0 = 0; p0 < cols; p0 += kPBlock)
                            {
                                int64_t const pn = cols - p0 < kPBlock ? cols - p0 : kPBlock;
                                for (int co0 = g * cOutG; co0 < (g + 1) * cOutG; co0 += kCoBlock)
                                {
                                    int const con = (g + 1) * cOutG - co0 < kCoBlock ? (g + 1) * cOutG - co0 : kCoBlock;
                                    gemmBlock(w.data() + static_cast<int64_t>(co0) * kLen, kLen, con, colG + p0, cols,
                                        pn, acc.data());
                                    for (int r = 0; r < con; ++r)
                                    {
                                        float const init = bias ? b[co0 + r] : 0.0f;
                                        float* dst = output + (img * cOut + co0 + r) * outPlane
                                            + static_cast<int64_t>(row0) * wOut + p0;
                                        float const* a = acc.data() + r * kPBlock;
                                        for (int64_t p = 0; p < pn; ++p)
                                        {
                                            float const v = a[p] + init;
                                            dst[p] = emulate ? sr::roundToHalf(v) : v;
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        catch (std::exception const& e)
        {
            return fail(SR_ERR_INTERNAL, std::string("deform_conv2d: ") + e.what());
        }
        return ok();
    }

} // extern "C"
