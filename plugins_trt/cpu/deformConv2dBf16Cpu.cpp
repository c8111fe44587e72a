// bf16 DeformConv2d on the CPU (sr_deform_conv2d_bf16): the input is rounded to bf16 into an NHWC copy, so one sample
// point serves a contiguous run of channels; per output row, the modulated bilinear samples are computed in FP32 from
// those values (deformConv2dMath.h's sample points, deformSampleAt's order) and rounded to bf16 columns; then a GEMM
// with the bf16 weights accumulates in FP32 (AVX512-BF16's vdpbf16ps where the CPU has it, its arithmetic in plain
// loops elsewhere) and the bias is added.
// This file is compiled with -ffp-contract=off (CMakeLists.txt): no path fuses a multiply-add, so the portable loops
// compute the same bytes as the AVX512 path (vdpbf16ps adds each exact bf16 product in turn, the odd one first).
#include "cpu/srKernelsCpu.h"
#include "cpu/srKernelsCpuErrors.h"

#include "deformConv2d/deformConv2dMath.h"

#include <immintrin.h>

#include <algorithm>
#include <exception>
#include <string>
#include <thread>
#include <vector>

// GCC 12 reports the AVX512 intrinsics' own _mm512_undefined_* operands as maybe-uninitialized when they are inlined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace
{

constexpr int kPixelBlock = 8; // pixels per GEMM micro-tile (8 x 2 accumulators stay in registers)
constexpr int kOutBlock = 16;  // output channels per FP32 vector

struct Bf16Problem
{
    sr::DeformConvShape s;
    int cInG, cOutG, taps, kLen, kPad, oPad, wPad;
    bool maskLogits; // the mask tensor holds logits: the mask is their sigmoid
};

Bf16Problem makeProblem(sr::DeformConvShape const& s, bool maskLogits)
{
    Bf16Problem p {};
    p.s = s;
    p.maskLogits = maskLogits;
    p.cInG = s.cIn / s.group;
    p.cOutG = s.cOut / s.group;
    p.taps = s.kH * s.kW;
    p.kLen = p.taps * p.cInG;
    p.kPad = (p.kLen + 1) / 2 * 2;
    p.oPad = (p.cOutG + kOutBlock - 1) / kOutBlock * kOutBlock;
    p.wPad = (s.wOut + kPixelBlock - 1) / kPixelBlock * kPixelBlock;
    return p;
}

// Weights per group as [kPad / 2][oPad][2] bf16 with column index j = tap * cInG + c (the columns' order): two
// consecutive j of one output channel form the 32-bit lane vdpbf16ps consumes. Padding is 0.
std::vector<uint16_t> packWeights(float const* w, Bf16Problem const& p)
{
    size_t const perGroup = static_cast<size_t>(p.kPad) * p.oPad;
    std::vector<uint16_t> packed(perGroup * p.s.group, 0);
    for (int g = 0; g < p.s.group; ++g)
        for (int o = 0; o < p.cOutG; ++o)
            for (int c = 0; c < p.cInG; ++c)
                for (int tap = 0; tap < p.taps; ++tap)
                {
                    int const j = tap * p.cInG + c;
                    packed[perGroup * g + (static_cast<size_t>(j / 2) * p.oPad + o) * 2 + j % 2]
                        = sr::deformToBf16(w[((static_cast<int64_t>(g) * p.cOutG + o) * p.cInG + c) * p.taps + tap]);
                }
    return packed;
}

// count values rounded to bf16; cloned per ISA (integer arithmetic: the same bytes from each clone).
__attribute__((target_clones("avx512f", "avx2", "default"))) void toBf16(float const* src, uint16_t* dst, int64_t count)
{
    for (int64_t i = 0; i < count; ++i)
        dst[i] = sr::deformToBf16(src[i]);
}

// The kernel's I/O element types: float32, or bf16 as its bit pattern (uint16_t; bf16_io).
inline float loadValue(float v)
{
    return v;
}

inline float loadValue(uint16_t v)
{
    return sr::deformFromBf16(v);
}

inline void storeValue(float* dst, float v)
{
    *dst = v;
}

inline void storeValue(uint16_t* dst, float v)
{
    *dst = sr::deformToBf16(v);
}

// One row of C planes (W values each) as bf16 into `rowBuffer`: rounded from float32, copied from bf16.
inline void rowToBf16(float const* src, int64_t plane, int c, int w, uint16_t* rowBuffer)
{
    for (int ch = 0; ch < c; ++ch)
        toBf16(src + ch * plane, rowBuffer + static_cast<int64_t>(ch) * w, w);
}

inline void rowToBf16(uint16_t const* src, int64_t plane, int c, int w, uint16_t* rowBuffer)
{
    for (int ch = 0; ch < c; ++ch)
        std::copy(src + ch * plane, src + ch * plane + w, rowBuffer + static_cast<int64_t>(ch) * w);
}

// Rows [y0, y1) of one image's [C, H, W] planes as bf16 [H, W, C]: each row's planes go contiguously into
// `rowBuffer` (C * W values), then are transposed.
template <typename T>
void toNhwcBf16(T const* src, uint16_t* dst, Bf16Problem const& p, int y0, int y1, uint16_t* rowBuffer)
{
    int const c = p.s.cIn, w = p.s.wIn;
    int64_t const plane = static_cast<int64_t>(p.s.hIn) * w;
    for (int y = y0; y < y1; ++y)
    {
        rowToBf16(src + static_cast<int64_t>(y) * w, plane, c, w, rowBuffer);
        uint16_t* d = dst + static_cast<int64_t>(y) * w * c;
        for (int x = 0; x < w; ++x)
            for (int ch = 0; ch < c; ++ch)
                d[static_cast<int64_t>(x) * c + ch] = rowBuffer[static_cast<int64_t>(ch) * w + x];
    }
}

// One (output pixel, offset group, tap): its 4 corner rows of bf16 channels (a row of zeros for a corner outside the
// image), their bilinear weights and the mask.
struct TapCorners
{
    uint16_t const* r[4];
    float w[4];
    float mask;
};

constexpr int kTapBlock = 64; // output pixels whose sample points are computed together, per (offset group, tap)

// The sample points of one (offset group, tap) for up to kTapBlock pixels of a row: deformSamplePoint's plane
// indices (-1: corner outside) and weights, and the masks.
struct TapBlock
{
    int32_t idx[4][kTapBlock];
    float w[4][kTapBlock];
    float mask[kTapBlock];
};

// deformTapPoint / deformSamplePoint for pixels [ox0, ox0 + count) of row oy, tap (i, j), without branches so the
// wide path's compiler vectorizes it (the same float operations in the same order: the same values).
// `dy`, `dx`, `m` are the row's staged planes of this (offset group, tap).
inline __attribute__((always_inline)) void tapPoints(Bf16Problem const& p, float const* dy, float const* dx,
    float const* m, int i, int j, int oy, int ox0, int count, TapBlock& tb)
{
    sr::DeformConvShape const& s = p.s;
    float const h = static_cast<float>(s.hIn), w = static_cast<float>(s.wIn);
    float const baseY = static_cast<float>(oy * s.strideH - s.padH + i * s.dilH);
    for (int q = 0; q < count; ++q)
    {
        int const ox = ox0 + q;
        float const y0 = baseY + dy[ox];
        float const x0 = static_cast<float>(ox * s.strideW - s.padW + j * s.dilW) + dx[ox];
        bool const inside = !(y0 <= -1.0f || h <= y0 || x0 <= -1.0f || w <= x0);
        float const y = inside ? y0 : 0.0f, x = inside ? x0 : 0.0f; // keeps the int conversions below defined
        float const fy = floorf(y), fx = floorf(x);
        int const yLow = static_cast<int>(fy), xLow = static_cast<int>(fx);
        float const ly = y - fy, lx = x - fx;
        float const hy = 1.0f - ly, hx = 1.0f - lx;
        bool const top = inside && yLow >= 0, bottom = inside && yLow + 1 <= s.hIn - 1;
        bool const left = xLow >= 0, right = xLow + 1 <= s.wIn - 1;
        int const at = yLow * s.wIn + xLow;
        tb.idx[0][q] = top && left ? at : -1;
        tb.idx[1][q] = top && right ? at + 1 : -1;
        tb.idx[2][q] = bottom && left ? at + s.wIn : -1;
        tb.idx[3][q] = bottom && right ? at + s.wIn + 1 : -1;
        tb.w[0][q] = inside ? hy * hx : 0.0f;
        tb.w[1][q] = inside ? hy * lx : 0.0f;
        tb.w[2][q] = inside ? ly * hx : 0.0f;
        tb.w[3][q] = inside ? ly * lx : 0.0f;
        tb.mask[q] = m[ox];
    }
}

inline TapCorners tapCorners(
    Bf16Problem const& p, uint16_t const* xb, TapBlock const& tb, int q, uint16_t const* zeroRow)
{
    TapCorners tc;
    for (int k = 0; k < 4; ++k)
    {
        tc.r[k] = tb.idx[k][q] >= 0 ? xb + static_cast<int64_t>(tb.idx[k][q]) * p.s.cIn : zeroRow;
        tc.w[k] = tb.w[k][q];
    }
    tc.mask = tb.mask[q];
    return tc;
}

// Output row oy's offsets and mask as planes [offset group][tap][dy, dx, mask][ox] (mask 1 without one), read plane
// by plane from NCHW.
template <typename T>
void stageRow(Bf16Problem const& p, T const* offset, T const* mask, int oy, float* staged)
{
    sr::DeformConvShape const& s = p.s;
    int64_t const plane = static_cast<int64_t>(s.hOut) * s.wOut;
    for (int og = 0; og < s.offsetGroup; ++og)
        for (int tap = 0; tap < p.taps; ++tap)
        {
            int64_t const row = static_cast<int64_t>(oy) * s.wOut;
            T const* dy = offset + (static_cast<int64_t>(og) * 2 * p.taps + 2 * tap) * plane + row;
            T const* dx = dy + plane;
            T const* m = mask != nullptr ? mask + (static_cast<int64_t>(og) * p.taps + tap) * plane + row : nullptr;
            float* dst = staged + static_cast<int64_t>(og * p.taps + tap) * 3 * s.wOut;
            for (int ox = 0; ox < s.wOut; ++ox)
            {
                dst[ox] = loadValue(dy[ox]);
                dst[s.wOut + ox] = loadValue(dx[ox]);
                float const mv = m != nullptr ? loadValue(m[ox]) : 1.0f;
                dst[2 * s.wOut + ox] = p.maskLogits && m != nullptr ? sr::deformMaskFromLogit(mv) : mv;
            }
        }
}

// Column values of channels [c, stop): mask * bilinear sample (deformSampleAt's order) rounded to bf16. Scalar; the
// AVX512 span below computes the same bytes 16 channels at a time.
inline void spanPortable(TapCorners const& t, int c, int stop, uint16_t* dst)
{
    for (; c < stop; ++c)
    {
        float const v = (t.w[0] * sr::deformFromBf16(t.r[0][c]) + t.w[1] * sr::deformFromBf16(t.r[1][c])
                            + t.w[2] * sr::deformFromBf16(t.r[2][c]) + t.w[3] * sr::deformFromBf16(t.r[3][c]))
            * t.mask;
        dst[c] = sr::deformToBf16(v);
    }
}

__attribute__((target("avx512f,avx512bw,avx512bf16"))) inline __m512 cornerValues(uint16_t const* row, int c)
{
    __m256i const halves = _mm256_loadu_si256(reinterpret_cast<__m256i const*>(row + c));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(halves), 16));
}

__attribute__((target("avx512f,avx512bw,avx512bf16"))) inline void spanAvx512(
    TapCorners const& t, int c, int stop, uint16_t* dst)
{
    __m512 const m = _mm512_set1_ps(t.mask);
    __m512 const w0 = _mm512_set1_ps(t.w[0]), w1 = _mm512_set1_ps(t.w[1]), w2 = _mm512_set1_ps(t.w[2]),
                 w3 = _mm512_set1_ps(t.w[3]);
    for (; c + 16 <= stop; c += 16)
    {
        __m512 v
            = _mm512_add_ps(_mm512_mul_ps(w0, cornerValues(t.r[0], c)), _mm512_mul_ps(w1, cornerValues(t.r[1], c)));
        v = _mm512_add_ps(v, _mm512_mul_ps(w2, cornerValues(t.r[2], c)));
        v = _mm512_add_ps(v, _mm512_mul_ps(w3, cornerValues(t.r[3], c)));
        __m256bh const b = _mm512_cvtneps_pbh(_mm512_mul_ps(v, m));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + c), reinterpret_cast<__m256i const&>(b));
    }
    spanPortable(t, c, stop, dst);
}

// The bf16 columns of output row `oy`: cols[ox][group][kPad], j = tap * cInG + c. `xb` is the image as bf16 NHWC,
// `staged` the row's offsets and mask (stageRow), `blocks` room for offsetGroup * taps TapBlocks.
template <bool Wide>
inline __attribute__((always_inline)) void sampleRowT(Bf16Problem const& p, uint16_t const* xb, float const* staged,
    int oy, uint16_t* cols, uint16_t const* zeroRow, TapBlock* blocks)
{
    sr::DeformConvShape const& s = p.s;
    int const cPerOg = s.cIn / s.offsetGroup;
    int64_t const pixelValues = static_cast<int64_t>(s.group) * p.kPad;
    for (int ox0 = 0; ox0 < s.wOut; ox0 += kTapBlock)
    {
        int const count = std::min(kTapBlock, s.wOut - ox0);
        for (int og = 0; og < s.offsetGroup; ++og)
            for (int tap = 0; tap < p.taps; ++tap)
            {
                float const* st = staged + static_cast<int64_t>(og * p.taps + tap) * 3 * s.wOut;
                tapPoints(p, st, st + s.wOut, st + 2 * s.wOut, tap / s.kW, tap % s.kW, oy, ox0, count,
                    blocks[og * p.taps + tap]);
            }
        for (int q = 0; q < count; ++q)
            for (int og = 0; og < s.offsetGroup; ++og)
                for (int tap = 0; tap < p.taps; ++tap)
                {
                    TapCorners const t = tapCorners(p, xb, blocks[og * p.taps + tap], q, zeroRow);
                    for (int c = og * cPerOg, cEnd = (og + 1) * cPerOg; c < cEnd;)
                    {
                        int const g = c / p.cInG;
                        int const stop = std::min(cEnd, (g + 1) * p.cInG);
                        uint16_t* dst = cols + (ox0 + q) * pixelValues + g * p.kPad + tap * p.cInG - g * p.cInG;
                        if constexpr (Wide)
                            spanAvx512(t, c, stop, dst);
                        else
                            spanPortable(t, c, stop, dst);
                        c = stop;
                    }
                }
    }
}

__attribute__((target("avx512f,avx512bw,avx512bf16"))) void sampleRowAvx512(Bf16Problem const& p, uint16_t const* xb,
    float const* staged, int oy, uint16_t* cols, uint16_t const* zeroRow, TapBlock* blocks)
{
    sampleRowT<true>(p, xb, staged, oy, cols, zeroRow, blocks);
}

void sampleRowPortable(Bf16Problem const& p, uint16_t const* xb, float const* staged, int oy, uint16_t* cols,
    uint16_t const* zeroRow, TapBlock* blocks)
{
    sampleRowT<false>(p, xb, staged, oy, cols, zeroRow, blocks);
}

// acc[px][o] = sum_j cols[px][j] * w[j][o] in FP32 for `pixels` pixels `ld` values apart, as vdpbf16ps sums: per
// pair of columns, the odd product is added first, then the even one (each product of two bf16 values is exact).
void gemmPortable(uint16_t const* cols, int64_t ld, uint16_t const* wp, Bf16Problem const& p, int pixels, float* acc)
{
    for (int px = 0; px < pixels; ++px)
    {
        float* a = acc + static_cast<int64_t>(px) * p.oPad;
        std::fill(a, a + p.oPad, 0.0f);
        uint16_t const* col = cols + px * ld;
        for (int j2 = 0; j2 < p.kPad / 2; ++j2)
        {
            float const even = sr::deformFromBf16(col[2 * j2]), odd = sr::deformFromBf16(col[2 * j2 + 1]);
            uint16_t const* w = wp + static_cast<int64_t>(j2) * p.oPad * 2;
            for (int o = 0; o < p.oPad; ++o)
            {
                float t = a[o] + odd * sr::deformFromBf16(w[2 * o + 1]);
                a[o] = t + even * sr::deformFromBf16(w[2 * o]);
            }
        }
    }
}

template <int NB>
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void gemmAvx512Block(
    uint16_t const* cols, int64_t ld, uint16_t const* wp, Bf16Problem const& p, int ob, float* acc)
{
    __m512 sum[kPixelBlock][NB];
    for (int q = 0; q < kPixelBlock; ++q)
        for (int b = 0; b < NB; ++b)
            sum[q][b] = _mm512_setzero_ps();
    for (int j2 = 0; j2 < p.kPad / 2; ++j2)
    {
        uint16_t const* w = wp + (static_cast<int64_t>(j2) * p.oPad + ob * kOutBlock) * 2;
        __m512bh wv[NB];
        for (int b = 0; b < NB; ++b)
            wv[b] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(w + b * kOutBlock * 2));
        for (int q = 0; q < kPixelBlock; ++q)
        {
            int32_t two;
            std::memcpy(&two, cols + q * ld + j2 * 2, 4);
            __m512bh const a = reinterpret_cast<__m512bh>(_mm512_set1_epi32(two));
            for (int b = 0; b < NB; ++b)
                sum[q][b] = _mm512_dpbf16_ps(sum[q][b], a, wv[b]);
        }
    }
    for (int q = 0; q < kPixelBlock; ++q)
        for (int b = 0; b < NB; ++b)
            _mm512_storeu_ps(acc + static_cast<int64_t>(q) * p.oPad + (ob + b) * kOutBlock, sum[q][b]);
}

__attribute__((target("avx512f,avx512bw,avx512bf16"))) void gemmAvx512(
    uint16_t const* cols, int64_t ld, uint16_t const* wp, Bf16Problem const& p, int pixels, float* acc)
{
    int const blocks = p.oPad / kOutBlock;
    for (int px = 0; px < pixels; px += kPixelBlock)
    {
        uint16_t const* c = cols + px * ld;
        float* a = acc + static_cast<int64_t>(px) * p.oPad;
        int ob = 0;
        for (; ob + 2 <= blocks; ob += 2)
            gemmAvx512Block<2>(c, ld, wp, p, ob, a);
        if (ob < blocks)
            gemmAvx512Block<1>(c, ld, wp, p, ob, a);
    }
}

bool haveAvx512Bf16()
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")
        && __builtin_cpu_supports("avx512bf16");
}

struct Bf16Args
{
    Bf16Problem p;
    std::vector<uint16_t> packed;
    float const* bias;
    bool wide;
};

// Output rows [y0, y1) of one image: columns of a row, GEMM per group, bias, into the NCHW output.
template <typename T>
void rowsBf16(Bf16Args const& a, uint16_t const* xb, T const* offset, T const* mask, T* out, int y0, int y1)
{
    Bf16Problem const& p = a.p;
    int64_t const pixelValues = static_cast<int64_t>(p.s.group) * p.kPad;
    int64_t const plane = static_cast<int64_t>(p.s.hOut) * p.s.wOut;
    std::vector<uint16_t> cols(static_cast<size_t>(p.wPad) * pixelValues, 0);
    std::vector<float> acc(static_cast<size_t>(p.wPad) * p.oPad);
    std::vector<uint16_t> const zeroRow(p.s.cIn, 0);
    std::vector<float> staged(static_cast<size_t>(p.s.wOut) * p.s.offsetGroup * p.taps * 3);
    std::vector<TapBlock> blocks(static_cast<size_t>(p.s.offsetGroup) * p.taps);
    size_t const groupWeights = static_cast<size_t>(p.kPad) * p.oPad;
    for (int oy = y0; oy < y1; ++oy)
    {
        stageRow(p, offset, mask, oy, staged.data());
        if (a.wide)
            sampleRowAvx512(p, xb, staged.data(), oy, cols.data(), zeroRow.data(), blocks.data());
        else
            sampleRowPortable(p, xb, staged.data(), oy, cols.data(), zeroRow.data(), blocks.data());
        for (int g = 0; g < p.s.group; ++g)
        {
            uint16_t const* wp = a.packed.data() + groupWeights * g;
            if (a.wide)
                gemmAvx512(cols.data() + g * p.kPad, pixelValues, wp, p, p.wPad, acc.data());
            else
                gemmPortable(cols.data() + g * p.kPad, pixelValues, wp, p, p.wPad, acc.data());
            for (int o = 0; o < p.cOutG; ++o)
            {
                int const co = g * p.cOutG + o;
                float const b = a.bias != nullptr ? a.bias[co] : 0.0f;
                T* dst = out + co * plane + static_cast<int64_t>(oy) * p.s.wOut;
                for (int ox = 0; ox < p.s.wOut; ++ox)
                    storeValue(dst + ox, acc[static_cast<size_t>(ox) * p.oPad + o] + b);
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
        pool.emplace_back(
            [&, k] { fn(static_cast<int>(int64_t(count) * k / t), static_cast<int>(int64_t(count) * (k + 1) / t)); });
    fn(0, static_cast<int>(int64_t(count) / t));
    for (std::thread& th : pool)
        th.join();
}

template <typename T>
void runBf16(Bf16Args const& a, T const* input, T const* offset, T const* mask, T* output, int threads)
{
    sr::DeformConvShape const& s = a.p.s;
    int64_t const inPlane = static_cast<int64_t>(s.hIn) * s.wIn;
    int64_t const outPlane = static_cast<int64_t>(s.hOut) * s.wOut;
    int const taps = s.kH * s.kW;
    // The bf16 copy of the input is kept per calling thread: a model calls again with the same shape, and a new
    // buffer of that size (75 MB at 768x768x64) costs its page faults on every call.
    // (The workers get its address: inside their lambdas the name would be their own thread's empty buffer.)
    thread_local std::vector<uint16_t> kept;
    kept.resize(static_cast<size_t>(s.cIn) * inPlane);
    uint16_t* const xb = kept.data();
    for (int img = 0; img < s.n; ++img)
    {
        T const* x = input + img * s.cIn * inPlane;
        parallelRanges(s.hIn, threads,
            [&](int y0, int y1)
            {
                std::vector<uint16_t> rowBuffer(static_cast<size_t>(s.cIn) * s.wIn);
                toNhwcBf16(x, xb, a.p, y0, y1, rowBuffer.data());
            });
        T const* off = offset + img * s.offsetGroup * 2 * taps * outPlane;
        T const* mk = mask != nullptr ? mask + img * s.offsetGroup * taps * outPlane : nullptr;
        T* out = output + img * s.cOut * outPlane;
        parallelRanges(s.hOut, threads, [&](int y0, int y1) { rowsBf16(a, xb, off, mk, out, y0, y1); });
    }
}

} // namespace

extern "C"
{
    int sr_deform_conv2d_bf16_native(void)
    {
        return haveAvx512Bf16() ? 1 : 0;
    }

    int sr_deform_conv2d_bf16(void const* input, float const* weight, void const* offset, void const* mask,
        float const* bias, void* output, int n, int cIn, int hIn, int wIn, int cOut, int kH, int kW, int hOut, int wOut,
        int strideH, int strideW, int padH, int padW, int dilH, int dilW, int group, int offsetGroup, int threads,
        int portable, int bf16Io, int maskLogits)
    {
        sr::DeformConvShape const s {n, cIn, hIn, wIn, cOut, kH, kW, hOut, wOut, strideH, strideW, padH, padW, dilH,
            dilW, group, offsetGroup, bias != nullptr, mask != nullptr};
        if (char const* why = sr::deformConv2dCheckShape(s))
            return sr::cpuFail(SR_ERR_INVALID_ARGUMENT, std::string("deform_conv2d_bf16: ") + why);
        if (n == 0)
            return sr::cpuOk();
        if (input == nullptr || weight == nullptr || offset == nullptr || output == nullptr)
            return sr::cpuFail(SR_ERR_NULL_POINTER, "deform_conv2d_bf16: null buffer");
        try
        {
            Bf16Args a {makeProblem(s, maskLogits != 0), {}, bias, portable == 0 && haveAvx512Bf16()};
            a.packed = packWeights(weight, a.p);
            int const workers
                = threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
            if (bf16Io != 0)
                runBf16(a, static_cast<uint16_t const*>(input), static_cast<uint16_t const*>(offset),
                    static_cast<uint16_t const*>(mask), static_cast<uint16_t*>(output), workers);
            else
                runBf16(a, static_cast<float const*>(input), static_cast<float const*>(offset),
                    static_cast<float const*>(mask), static_cast<float*>(output), workers);
        }
        catch (std::exception const& e)
        {
            return sr::cpuFail(SR_ERR_INTERNAL, std::string("deform_conv2d_bf16: ") + e.what());
        }
        return sr::cpuOk();
    }

} // extern "C"
