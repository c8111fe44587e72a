// Host emulation of the fused DeformConv2d kernel (deformConv2dFused.cu), for checking its tiling and indexing on a
// machine without a GPU: the kernel's own source runs with 128 std::threads per block, __syncthreads as a barrier,
// __shared__ as function statics (blocks run one after another) and WMMA emulated per warp (fragment pointers must be
// 32-byte aligned and ldm a multiple of 16 bytes, as on the device). Each case is compared with a naive reference
// built from deformConv2dMath.h's deformIm2colElement (samples rounded to T, as the kernel's tiles hold them).
// Not built by CMake (no CI cost); run by hand from the repository root after changing the fused kernel (two
// commands, each written on one line):
//   sed -e 's/#include <mma.h>//' -e 's/cudaGetLastError()/cudaSuccess/'
//       -e 's/deformConvFusedKernel<T><<<\(.*\), kThreads, 0, stream>>>(/emuLaunch(\1, deformConvFusedKernel<T>, /'
//       plugins_trt/deformConv2d/deformConv2dFused.cu > /tmp/fused_emu.inc
//   g++ -std=c++20 -O2 -pthread -I/tmp -Iplugins_trt -Iplugins_trt/deformConv2d -I/usr/local/cuda/include
//       -I"$(dirname "$(find .venv -name cublas_v2.h | head -1)")" plugins_trt/tests/fusedKernelHostEmulation.cpp
//       -o /tmp/fused_emu && /tmp/fused_emu
// Exit status: the number of failing cases. It checks results, not races: compute-sanitizer's racecheck does that.
#include <barrier>
#include <cassert>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

// CUDA's host-side definitions of these make device code uncompilable for g++: replaced for the emulation.
#undef __global__
#undef __device__
#undef __launch_bounds__
#undef __shared__
#undef __align__
#define __global__
#define __device__
#define __launch_bounds__(x)
#define __shared__ static
#define __align__(x) __attribute__((aligned(x)))

thread_local dim3 threadIdx;
thread_local dim3 blockIdx;
static std::barrier<>* gBarrier = nullptr;
inline void __syncthreads()
{
    gBarrier->arrive_and_wait();
}

static bool gAlignFail = false;
namespace nvcuda
{
namespace wmma
{
struct matrix_a
{
};
struct matrix_b
{
};
struct accumulator
{
};
struct row_major
{
};
enum layout_t
{
    mem_row_major
};
template <typename Use, int M, int N, int K, typename T, typename L = void>
struct fragment
{
    float x[256];
};
template <typename U, int M, int N, int K, typename T, typename L>
void fill_fragment(fragment<U, M, N, K, T, L>& f, float v)
{
    for (float& e : f.x)
        e = v;
}
template <typename U, typename T, typename L>
void load_matrix_sync(fragment<U, 16, 16, 16, T, L>& f, T const* p, unsigned ldm)
{
    if (reinterpret_cast<uintptr_t>(p) % 32 != 0 || ldm % 8 != 0)
        gAlignFail = true;
    for (int r = 0; r < 16; ++r)
        for (int c = 0; c < 16; ++c)
            f.x[r * 16 + c] = __half2float(p[r * ldm + c]);
}
inline void mma_sync(fragment<accumulator, 16, 16, 16, float>& d,
    fragment<matrix_a, 16, 16, 16, __half, row_major> const& a,
    fragment<matrix_b, 16, 16, 16, __half, row_major> const& b, fragment<accumulator, 16, 16, 16, float> const& c)
{
    float out[256];
    for (int m = 0; m < 16; ++m)
        for (int n = 0; n < 16; ++n)
        {
            float s = c.x[m * 16 + n];
            for (int k = 0; k < 16; ++k)
                s += a.x[m * 16 + k] * b.x[k * 16 + n];
            out[m * 16 + n] = s;
        }
    for (int i = 0; i < 256; ++i)
        d.x[i] = out[i];
}
inline void store_matrix_sync(float* p, fragment<accumulator, 16, 16, 16, float> const& f, unsigned ldm, layout_t)
{
    if (reinterpret_cast<uintptr_t>(p) % 32 != 0 || ldm % 4 != 0)
        gAlignFail = true;
    if (threadIdx.x % 32 != 0)
        return; // one lane writes the warp's tile
    for (int r = 0; r < 16; ++r)
        for (int c = 0; c < 16; ++c)
            p[r * ldm + c] = f.x[r * 16 + c];
}
} // namespace wmma
} // namespace nvcuda

template <typename Kernel, typename... Args>
void emuLaunch(dim3 grid, Kernel kernel, Args... args)
{
    constexpr int kT = 128;
    std::barrier<> bar(kT);
    gBarrier = &bar;
    std::vector<std::thread> threads;
    for (int t = 0; t < kT; ++t)
    {
        threads.emplace_back(
            [&, t]
            {
                threadIdx = dim3(t, 0, 0);
                for (unsigned y = 0; y < grid.y; ++y)
                    for (unsigned x = 0; x < grid.x; ++x)
                    {
                        blockIdx = dim3(x, y, 0);
                        kernel(args...);
                        bar.arrive_and_wait(); // block done before the next reuses shared memory
                    }
            });
    }
    for (auto& th : threads)
        th.join();
}

#include "fused_emu.inc" // deformConv2dFused.cu with the launch rewritten (see the top)

using sr::DeformConvShape;

template <typename T>
double runCase(DeformConvShape s, float offRange, uint32_t seed)
{
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.f, 1.f), u01(0.f, 1.f);
    int const taps = s.kH * s.kW;
    size_t const nIn = size_t(s.n) * s.cIn * s.hIn * s.wIn;
    size_t const nW = size_t(s.cOut) * (s.cIn / s.group) * taps;
    size_t const plane = size_t(s.hOut) * s.wOut;
    size_t const nOff = size_t(s.n) * s.offsetGroup * 2 * taps * plane;
    size_t const nMask = size_t(s.n) * s.offsetGroup * taps * plane;
    auto fill = [&](size_t count, float lo, float hi)
    {
        std::vector<T> v(count);
        for (auto& e : v)
            e = sr::fromFloat<T>(lo + (hi - lo) * u01(rng));
        return v;
    };
    auto in = fill(nIn, -1, 1);
    auto w = fill(nW, -0.2f, 0.2f);
    auto off = fill(nOff, -offRange, offRange);
    auto mask = fill(nMask, 0, 1);
    auto bias = fill(s.cOut, -0.5f, 0.5f);
    std::vector<T> out(size_t(s.n) * s.cOut * plane, sr::fromFloat<T>(12345.f));
    cudaError_t e = sr::launchDeformConv2dFused<T>(s, in.data(), w.data(), off.data(),
        s.hasMask ? mask.data() : nullptr, s.hasBias ? bias.data() : nullptr, out.data(), nullptr);
    assert(e == cudaSuccess);
    // reference
    int const cInG = s.cIn / s.group, cOutG = s.cOut / s.group;
    double worst = 0;
    for (int b = 0; b < s.n; ++b)
        for (int co = 0; co < s.cOut; ++co)
            for (int oy = 0; oy < s.hOut; ++oy)
                for (int ox = 0; ox < s.wOut; ++ox)
                {
                    int const g = co / cOutG;
                    double acc = s.hasBias ? sr::toFloat(bias[co]) : 0.0;
                    for (int cl = 0; cl < cInG; ++cl)
                        for (int i = 0; i < s.kH; ++i)
                            for (int j = 0; j < s.kW; ++j)
                            {
                                int const c = g * cInG + cl;
                                float v = sr::deformIm2colElement(s, in.data() + size_t(b) * s.cIn * s.hIn * s.wIn,
                                    off.data() + size_t(b) * s.offsetGroup * 2 * taps * plane,
                                    s.hasMask ? mask.data() + size_t(b) * s.offsetGroup * taps * plane : nullptr, c, i,
                                    j, oy, ox);
                                v = sr::toFloat(sr::fromFloat<T>(v));
                                acc += double(v) * sr::toFloat(w[(size_t(co) * cInG + cl) * taps + i * s.kW + j]);
                            }
                    double const got = sr::toFloat(out[((size_t(b) * s.cOut + co) * s.hOut + oy) * s.wOut + ox]);
                    double const err = std::abs(got - acc) / (1.0 + std::abs(acc));
                    if (!(err <= worst))
                        worst = std::isnan(err) ? 1e9 : std::max(worst, err);
                }
    return worst;
}

int main()
{
    struct C
    {
        DeformConvShape s;
        float off;
    };
    auto mk = [](int n, int c, int h, int w, int co, int k, int st, int pad, int dil, int g, int og, bool b, bool m)
    {
        int const ho = (h + 2 * pad - dil * (k - 1) - 1) / st + 1;
        int const wo = (w + 2 * pad - dil * (k - 1) - 1) / st + 1;
        return DeformConvShape {n, c, h, w, co, k, k, ho, wo, st, st, pad, pad, dil, dil, g, og, b, m};
    };
    std::vector<C> cases {{mk(2, 64, 20, 23, 32, 3, 1, 1, 1, 1, 2, true, true), 2.f},
        {mk(3, 40, 13, 17, 40, 3, 1, 1, 1, 1, 5, true, true), 2.f},
        {mk(2, 33, 15, 11, 70, 5, 2, 2, 1, 1, 3, false, false), 2.f},
        {mk(2, 12, 11, 7, 10, 3, 2, 2, 2, 2, 3, true, false), 2.f},
        {mk(2, 16, 5, 9, 16, 1, 1, 0, 1, 8, 4, true, true), 2.f},
        {mk(1, 3, 1, 1, 1, 3, 1, 1, 1, 1, 1, true, true), 2.f},
        {mk(2, 8, 9, 10, 8, 3, 1, 1, 1, 1, 2, true, true), 12.f},
        {mk(1, 4, 9, 9, 4, 3, 2, 0, 2, 1, 1, false, false), 3.f}};
    int fails = 0;
    for (size_t i = 0; i < cases.size(); ++i)
    {
        double const ef = runCase<float>(cases[i].s, cases[i].off, 7 + i);
        double const eh = runCase<__half>(cases[i].s, cases[i].off, 70 + i);
        bool const ok = ef < 2e-5 && eh < 4e-3 && !gAlignFail;
        fails += !ok;
        std::printf("%s case %zu: fp32 rel err %.3g, fp16 rel err %.3g, align %s\n", ok ? "ok  " : "FAIL", i, ef, eh,
            gAlignFail ? "FAIL" : "ok");
    }
    return fails;
}
