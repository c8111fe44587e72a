// int8 DeformConv2d on the CPU (sr_deform_conv2d_int8): the input is quantized to uint8 (ONNX QuantizeLinear) into
// an NHWC copy, so one sample point serves a contiguous run of channels; per output row, the modulated bilinear
// samples are computed in FP32 from those steps (deformConv2dMath.h's sample points, deformSampleAt's order) and
// requantized to uint8 columns at the same step; then an integer GEMM with the int8 weights accumulates in int32 (AVX512-VNNI where the CPU has it,
// plain loops elsewhere: the same integers) and the epilogue scales back to FP32 and adds the bias.
// This file is compiled with -ffp-contract=off (CMakeLists.txt): no clone fuses a multiply-add, so the columns are the
// same bytes on every x86 CPU whichever clone runs.
#include "cpu/srKernelsCpu.h"
#include "cpu/srKernelsCpuErrors.h"

#include "deformConv2d/deformConv2dMath.h"

#include <immintrin.h>

// GCC 12 reports the AVX512 intrinsics' own _mm512_undefined_* operands as maybe-uninitialized when they are inlined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <exception>
#include <string>
#include <thread>
#include <vector>

namespace
{

constexpr int kPixelBlock = 8; // pixels per GEMM micro-tile (the VNNI kernel keeps 8 x 2 accumulators in registers)
constexpr int kOutBlock = 16;  // output channels per int32 vector

struct Int8Problem
{
    sr::DeformConvShape s;
    int cInG, cOutG, taps, kLen, kPad, oPad, wPad;
    float step;
    int zero;
};

Int8Problem makeProblem(sr::DeformConvShape const& s, float step, int zero)
{
    Int8Problem p {};
    p.s = s;
    p.cInG = s.cIn / s.group;
    p.cOutG = s.cOut / s.group;
    p.taps = s.kH * s.kW;
    p.kLen = p.taps * p.cInG;
    p.kPad = (p.kLen + 3) / 4 * 4;
    p.oPad = (p.cOutG + kOutBlock - 1) / kOutBlock * kOutBlock;
    p.wPad = (s.wOut + kPixelBlock - 1) / kPixelBlock * kPixelBlock;
    p.step = step;
    p.zero = zero;
    return p;
}

// Weights per group as [kPad / 4][oPad][4] int8 with column index j = tap * cInG + c (the columns' order): four
// consecutive j of one output channel form the 32-bit lane a VNNI multiply-add consumes. Padding is 0.
std::vector<int8_t> packWeights(int8_t const* w, Int8Problem const& p)
{
    size_t const perGroup = static_cast<size_t>(p.kPad) * p.oPad;
    std::vector<int8_t> packed(perGroup * p.s.group, 0);
    for (int g = 0; g < p.s.group; ++g)
        for (int o = 0; o < p.cOutG; ++o)
            for (int c = 0; c < p.cInG; ++c)
                for (int tap = 0; tap < p.taps; ++tap)
                {
                    int const j = tap * p.cInG + c;
                    packed[perGroup * g + (static_cast<size_t>(j / 4) * p.oPad + o) * 4 + j % 4]
                        = w[((static_cast<int64_t>(g) * p.cOutG + o) * p.cInG + c) * p.taps + tap];
                }
    return packed;
}

// x_zero * sum_j w[o][j]: what a nonzero zero point adds to every accumulator of output channel o.
std::vector<int32_t> zeroTerms(int8_t const* w, Int8Problem const& p)
{
    std::vector<int32_t> terms(p.s.cOut, 0);
    for (int o = 0; o < p.s.cOut; ++o)
    {
        int32_t sum = 0;
        for (int j = 0; j < p.kLen; ++j)
            sum += w[static_cast<int64_t>(o) * p.kLen + j];
        terms[o] = sum * p.zero;
    }
    return terms;
}

// count values quantized to uint8 (step, zero: ONNX QuantizeLinear); cloned per ISA, the same bytes from each.
__attribute__((target_clones("avx512f", "avx2", "default"))) void quantizeU8(
    float const* src, uint8_t* dst, int64_t count, float step, int zero)
{
    for (int64_t i = 0; i < count; ++i)
        dst[i] = sr::deformQuantizeU8(src[i], step, zero);
}

// Rows [y0, y1) of one image's [C, H, W] planes quantized to uint8 as [H, W, C]: each row's planes are quantized
// contiguously into `rowBuffer` (C * W bytes), then transposed.
void toNhwcU8(float const* src, uint8_t* dst, Int8Problem const& p, int y0, int y1, uint8_t* rowBuffer)
{
    int const c = p.s.cIn, w = p.s.wIn;
    int64_t const plane = static_cast<int64_t>(p.s.hIn) * w;
    for (int y = y0; y < y1; ++y)
    {
        for (int ch = 0; ch < c; ++ch)
            quantizeU8(src + ch * plane + static_cast<int64_t>(y) * w, rowBuffer + static_cast<int64_t>(ch) * w, w,
                p.step, p.zero);
        uint8_t* d = dst + static_cast<int64_t>(y) * w * c;
        for (int x = 0; x < w; ++x)
            for (int ch = 0; ch < c; ++ch)
                d[static_cast<int64_t>(x) * c + ch] = rowBuffer[static_cast<int64_t>(ch) * w + x];
    }
}

// One (output pixel, offset group, tap): its 4 corner rows of uint8 channels (a row of zero points for a corner
// outside the image, which then adds 0), their bilinear weights and the mask.
struct TapCorners
{
    uint8_t const* r[4];
    float w[4];
    float mask;
};

inline TapCorners tapCorners(Int8Problem const& p, uint8_t const* xq, float const* offset, float const* mask, int og,
    int i, int j, int oy, int ox, uint8_t const* zeroRow)
{
    sr::DeformTapSample const t = sr::deformTapSample(p.s, offset, mask, og, i, j, oy, ox);
    TapCorners tc;
    for (int k = 0; k < 4; ++k)
    {
        tc.r[k] = t.at.idx[k] >= 0 ? xq + static_cast<int64_t>(t.at.idx[k]) * p.s.cIn : zeroRow;
        tc.w[k] = t.at.w[k];
    }
    tc.mask = t.mask;
    return tc;
}

// Column bytes of channels [c, stop): mask * bilinear sample in steps (deformSampleAt's order), requantized at the
// same step (step 1 in these units). Scalar; the AVX512 span below computes the same bytes 16 channels at a time.
inline void spanPortable(TapCorners const& t, float zero, int zp, int c, int stop, uint8_t* dst)
{
    for (; c < stop; ++c)
    {
        float const v = (t.w[0] * (static_cast<float>(t.r[0][c]) - zero) + t.w[1] * (static_cast<float>(t.r[1][c]) - zero)
                            + t.w[2] * (static_cast<float>(t.r[2][c]) - zero)
                            + t.w[3] * (static_cast<float>(t.r[3][c]) - zero))
            * t.mask;
        dst[c] = sr::deformQuantizeU8(v, 1.0f, zp);
    }
}

__attribute__((target("avx512f,avx512bw"))) inline __m512 cornerSteps(uint8_t const* row, int c, __m512 zero)
{
    __m128i const bytes = _mm_loadu_si128(reinterpret_cast<__m128i const*>(row + c));
    return _mm512_sub_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(bytes)), zero);
}

__attribute__((target("avx512f,avx512bw"))) inline void spanAvx512(
    TapCorners const& t, float zero, int zp, int c, int stop, uint8_t* dst)
{
    __m512 const z = _mm512_set1_ps(zero), m = _mm512_set1_ps(t.mask), zpf = _mm512_set1_ps(static_cast<float>(zp));
    __m512 const w0 = _mm512_set1_ps(t.w[0]), w1 = _mm512_set1_ps(t.w[1]), w2 = _mm512_set1_ps(t.w[2]),
                 w3 = _mm512_set1_ps(t.w[3]);
    __m512 const lo = _mm512_setzero_ps(), hi = _mm512_set1_ps(255.0f);
    for (; c + 16 <= stop; c += 16)
    {
        __m512 v = _mm512_add_ps(_mm512_mul_ps(w0, cornerSteps(t.r[0], c, z)), _mm512_mul_ps(w1, cornerSteps(t.r[1], c, z)));
        v = _mm512_add_ps(v, _mm512_mul_ps(w2, cornerSteps(t.r[2], c, z)));
        v = _mm512_add_ps(v, _mm512_mul_ps(w3, cornerSteps(t.r[3], c, z)));
        __m512 q = _mm512_add_ps(_mm512_roundscale_ps(_mm512_mul_ps(v, m), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), zpf);
        q = _mm512_min_ps(_mm512_max_ps(q, lo), hi); // max(NaN, 0) is 0 here, as deformQuantizeU8 gives
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + c), _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(q)));
    }
    spanPortable(t, zero, zp, c, stop, dst);
}

// The uint8 columns of output row `oy`: cols[ox][group][kPad], j = tap * cInG + c. `xq` is the image as uint8 NHWC.
template <bool Wide>
inline __attribute__((always_inline)) void sampleRowT(
    Int8Problem const& p, uint8_t const* xq, float const* offset, float const* mask, int oy, uint8_t* cols, uint8_t const* zeroRow)
{
    sr::DeformConvShape const& s = p.s;
    int const cPerOg = s.cIn / s.offsetGroup;
    int64_t const pixelBytes = static_cast<int64_t>(s.group) * p.kPad;
    float const zero = static_cast<float>(p.zero);
    for (int ox = 0; ox < s.wOut; ++ox)
        for (int og = 0; og < s.offsetGroup; ++og)
            for (int i = 0; i < s.kH; ++i)
                for (int j = 0; j < s.kW; ++j)
                {
                    TapCorners const t = tapCorners(p, xq, offset, mask, og, i, j, oy, ox, zeroRow);
                    int const tap = i * s.kW + j;
                    for (int c = og * cPerOg, cEnd = (og + 1) * cPerOg; c < cEnd;)
                    {
                        int const g = c / p.cInG;
                        int const stop = std::min(cEnd, (g + 1) * p.cInG);
                        uint8_t* dst = cols + ox * pixelBytes + g * p.kPad + tap * p.cInG - g * p.cInG; // dst[c]
                        if constexpr (Wide)
                            spanAvx512(t, zero, p.zero, c, stop, dst);
                        else
                            spanPortable(t, zero, p.zero, c, stop, dst);
                        c = stop;
                    }
                }
}

__attribute__((target("avx512f,avx512bw"))) void sampleRowAvx512(
    Int8Problem const& p, uint8_t const* xq, float const* offset, float const* mask, int oy, uint8_t* cols, uint8_t const* zeroRow)
{
    sampleRowT<true>(p, xq, offset, mask, oy, cols, zeroRow);
}

void sampleRowPortable(
    Int8Problem const& p, uint8_t const* xq, float const* offset, float const* mask, int oy, uint8_t* cols, uint8_t const* zeroRow)
{
    sampleRowT<false>(p, xq, offset, mask, oy, cols, zeroRow);
}

// acc[px][o] = sum_j cols[px][j] * w[j][o] for `pixels` (a multiple of kPixelBlock) pixels `ld` bytes apart.
void gemmPortable(uint8_t const* cols, int64_t ld, int8_t const* wp, Int8Problem const& p, int pixels, int32_t* acc)
{
    for (int px = 0; px < pixels; ++px)
    {
        int32_t* a = acc + static_cast<int64_t>(px) * p.oPad;
        std::fill(a, a + p.oPad, 0);
        uint8_t const* col = cols + px * ld;
        for (int j4 = 0; j4 < p.kPad / 4; ++j4)
            for (int l = 0; l < 4; ++l)
            {
                int32_t const v = col[j4 * 4 + l];
                int8_t const* w = wp + static_cast<int64_t>(j4) * p.oPad * 4 + l;
                for (int o = 0; o < p.oPad; ++o)
                    a[o] += v * w[o * 4];
            }
    }
}

template <int NB>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void gemmVnniBlock(
    uint8_t const* cols, int64_t ld, int8_t const* wp, Int8Problem const& p, int ob, int32_t* acc)
{
    __m512i sum[kPixelBlock][NB];
    for (int q = 0; q < kPixelBlock; ++q)
        for (int b = 0; b < NB; ++b)
            sum[q][b] = _mm512_setzero_si512();
    for (int j4 = 0; j4 < p.kPad / 4; ++j4)
    {
        int8_t const* w = wp + (static_cast<int64_t>(j4) * p.oPad + ob * kOutBlock) * 4;
        __m512i wv[NB];
        for (int b = 0; b < NB; ++b)
            wv[b] = _mm512_loadu_si512(w + b * kOutBlock * 4);
        for (int q = 0; q < kPixelBlock; ++q)
        {
            int32_t four;
            std::memcpy(&four, cols + q * ld + j4 * 4, 4);
            __m512i const a = _mm512_set1_epi32(four);
            for (int b = 0; b < NB; ++b)
                sum[q][b] = _mm512_dpbusd_epi32(sum[q][b], a, wv[b]);
        }
    }
    for (int q = 0; q < kPixelBlock; ++q)
        for (int b = 0; b < NB; ++b)
            _mm512_storeu_si512(acc + static_cast<int64_t>(q) * p.oPad + (ob + b) * kOutBlock, sum[q][b]);
}

__attribute__((target("avx512f,avx512bw,avx512vnni"))) void gemmVnni(
    uint8_t const* cols, int64_t ld, int8_t const* wp, Int8Problem const& p, int pixels, int32_t* acc)
{
    int const blocks = p.oPad / kOutBlock;
    for (int px = 0; px < pixels; px += kPixelBlock)
    {
        uint8_t const* c = cols + px * ld;
        int32_t* a = acc + static_cast<int64_t>(px) * p.oPad;
        int ob = 0;
        for (; ob + 2 <= blocks; ob += 2)
            gemmVnniBlock<2>(c, ld, wp, p, ob, a);
        if (ob < blocks)
            gemmVnniBlock<1>(c, ld, wp, p, ob, a);
    }
}

bool haveVnni()
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")
        && __builtin_cpu_supports("avx512vnni");
}

struct Int8Args
{
    Int8Problem p;
    std::vector<int8_t> packed;
    std::vector<int32_t> zeroTerm;
    std::vector<float> scale; // x_step * w_step[o]
    float const* bias;
    bool vnni;
};

// Output rows [y0, y1) of one image: columns of a row, GEMM per group, epilogue into the NCHW output.
void rowsInt8(Int8Args const& a, uint8_t const* xq, float const* offset, float const* mask, float* out, int y0, int y1)
{
    Int8Problem const& p = a.p;
    int64_t const pixelBytes = static_cast<int64_t>(p.s.group) * p.kPad;
    int64_t const plane = static_cast<int64_t>(p.s.hOut) * p.s.wOut;
    std::vector<uint8_t> cols(static_cast<size_t>(p.wPad) * pixelBytes, 0);
    std::vector<int32_t> acc(static_cast<size_t>(p.wPad) * p.oPad);
    std::vector<uint8_t> const zeroRow(p.s.cIn, static_cast<uint8_t>(p.zero));
    size_t const groupWeights = static_cast<size_t>(p.kPad) * p.oPad;
    for (int oy = y0; oy < y1; ++oy)
    {
        if (a.vnni)
            sampleRowAvx512(p, xq, offset, mask, oy, cols.data(), zeroRow.data());
        else
            sampleRowPortable(p, xq, offset, mask, oy, cols.data(), zeroRow.data());
        for (int g = 0; g < p.s.group; ++g)
        {
            int8_t const* wp = a.packed.data() + groupWeights * g;
            if (a.vnni)
                gemmVnni(cols.data() + g * p.kPad, pixelBytes, wp, p, p.wPad, acc.data());
            else
                gemmPortable(cols.data() + g * p.kPad, pixelBytes, wp, p, p.wPad, acc.data());
            for (int o = 0; o < p.cOutG; ++o)
            {
                int const co = g * p.cOutG + o;
                float const b = a.bias != nullptr ? a.bias[co] : 0.0f;
                float* dst = out + co * plane + static_cast<int64_t>(oy) * p.s.wOut;
                for (int ox = 0; ox < p.s.wOut; ++ox)
                    dst[ox] = static_cast<float>(acc[static_cast<size_t>(ox) * p.oPad + o] - a.zeroTerm[co])
                            * a.scale[co]
                        + b;
            }
        }
    }
}

// fn(lo, hi) over [0, count) split into `threads` contiguous ranges (the calling thread runs the first).
template <typename Fn>
void parallelRanges(int count, int threads, Fn fn)
{
    int const t = std::max(1, std::min(threads, count));
    std::vector<std::thread> pool;
    for (int k = 1; k < t; ++k)
        pool.emplace_back([&, k] { fn(static_cast<int>(int64_t(count) * k / t), static_cast<int>(int64_t(count) * (k + 1) / t)); });
    fn(0, static_cast<int>(int64_t(count) / t));
    for (std::thread& th : pool)
        th.join();
}

char const* checkInt8(float xStep, int xZero, float const* wStep, int cOut)
{
    if (!(xStep > 0.0f) || !std::isfinite(xStep))
        return "x_step must be positive and finite";
    if (xZero < 0 || xZero > 255)
        return "x_zero must be a uint8 value";
    for (int o = 0; o < cOut; ++o)
        if (!std::isfinite(wStep[o]))
            return "w_step must be finite";
    return nullptr;
}

} // namespace

extern "C"
{
    int sr_deform_conv2d_int8_vnni(void)
    {
        return haveVnni() ? 1 : 0;
    }

    int sr_deform_conv2d_int8(float const* input, float xStep, int xZero, int8_t const* weight, float const* wStep,
        float const* offset, float const* mask, float const* bias, float* output, int n, int cIn, int hIn, int wIn,
        int cOut, int kH, int kW, int hOut, int wOut, int strideH, int strideW, int padH, int padW, int dilH,
        int dilW, int group, int offsetGroup, int threads, int portable)
    {
        sr::DeformConvShape const s {n, cIn, hIn, wIn, cOut, kH, kW, hOut, wOut, strideH, strideW, padH, padW, dilH,
            dilW, group, offsetGroup, bias != nullptr, mask != nullptr};
        if (char const* why = sr::deformConv2dCheckShape(s))
            return sr::cpuFail(SR_ERR_INVALID_ARGUMENT, std::string("deform_conv2d_int8: ") + why);
        if (n == 0)
            return sr::cpuOk();
        if (input == nullptr || weight == nullptr || wStep == nullptr || offset == nullptr || output == nullptr)
            return sr::cpuFail(SR_ERR_NULL_POINTER, "deform_conv2d_int8: null buffer");
        if (char const* why = checkInt8(xStep, xZero, wStep, cOut))
            return sr::cpuFail(SR_ERR_INVALID_ARGUMENT, std::string("deform_conv2d_int8: ") + why);
        try
        {
            Int8Args a {makeProblem(s, xStep, xZero), {}, {}, {}, bias, portable == 0 && haveVnni()};
            a.packed = packWeights(weight, a.p);
            a.zeroTerm = zeroTerms(weight, a.p);
            for (int o = 0; o < cOut; ++o)
                a.scale.push_back(xStep * wStep[o]);
            int const workers = threads > 0 ? threads : std::max(1u, std::thread::hardware_concurrency());
            int64_t const inPlane = static_cast<int64_t>(hIn) * wIn;
            int64_t const outPlane = static_cast<int64_t>(hOut) * wOut;
            std::vector<uint8_t> xq(static_cast<size_t>(cIn) * inPlane);
            for (int img = 0; img < n; ++img)
            {
                float const* x = input + img * cIn * inPlane;
                parallelRanges(hIn, workers, [&](int y0, int y1) {
                    std::vector<uint8_t> rowBuffer(static_cast<size_t>(cIn) * wIn);
                    toNhwcU8(x, xq.data(), a.p, y0, y1, rowBuffer.data());
                });
                float const* off = offset + img * offsetGroup * 2 * kH * kW * outPlane;
                float const* mk = mask != nullptr ? mask + img * offsetGroup * kH * kW * outPlane : nullptr;
                float* out = output + img * cOut * outPlane;
                parallelRanges(hOut, workers, [&](int y0, int y1) { rowsInt8(a, xq.data(), off, mk, out, y0, y1); });
            }
        }
        catch (std::exception const& e)
        {
            return sr::cpuFail(SR_ERR_INTERNAL, std::string("deform_conv2d_int8: ") + e.what());
        }
        return sr::cpuOk();
    }

} // extern "C"
