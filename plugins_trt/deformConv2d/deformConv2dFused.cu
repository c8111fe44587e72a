// sr::DeformConv2d in one kernel (DeformConvImpl kDeformConvFused): an implicit GEMM per convolution group,
//   out[co, p] = bias[co] + sum_k W[co, k] * sample[k, p],
// whose B tiles (deformed, mask-modulated bilinear samples) are computed straight into shared memory; no column
// buffer, no workspace. The reduction runs tap-major (k = tap * C_in/group + c) so that one thread computes the
// sampling point of a (position, tap, offset group) once and applies it to every channel of its tile.
//
// Block tile: kBM output channels x kBN output positions (flattened over the batch: p = (img * Ho + oy) * Wo + ox),
// reduction in steps of kBK channels of one tap. Per step: every thread fills its share of the A (weights) and B
// (samples) tiles, including zeros past the edges, __syncthreads, multiply-accumulate, __syncthreads. FP16: WMMA
// 16x16x16 (tensor cores, FP32 accumulate). FP32: CUDA-core FMA in FP32 (never TF32). The accumulators go through
// shared memory to a coalesced epilogue that adds the bias and converts to T.
#include "deformConv2dKernel.h"

#include <mma.h>

namespace sr
{
namespace
{

constexpr int kBM = 32;       // output channels per block
constexpr int kBN = 64;       // output positions per block
constexpr int kBK = 32;       // channels of one tap per reduction step
constexpr int kThreads = 128; // 4 warps
constexpr int kLdA = kBK + 8; // shared row pitches (elements): multiples of 8 keep WMMA pointers 32-byte aligned
constexpr int kLdB = kBN + 8;
constexpr int kLdC = kBN + 4;
constexpr int kChannelsPerThread = kBK * kBN / kThreads; // B-tile elements each thread samples per step
constexpr int kMaxGridY = 65535;

static_assert(kBN * (kThreads / kBN) == kThreads, "each thread samples one position of the tile");
static_assert(kBK % 16 == 0 && kBM == 32 && kBN == 64 && kThreads == 128, "warp layout below assumes these");

// Shared-memory element type of the A/B tiles: FP16 data multiplies on tensor cores in FP16, FP32 stays FP32.
template <typename T>
struct TileType
{
    using type = float;
};
template <>
struct TileType<__half>
{
    using type = __half;
};

struct FusedParams
{
    DeformConvShape s;
    int64_t positions; // n * hOut * wOut
    int cInG, cOutG, mTiles, gyBase;
};

// A tile: A(m, kk) = W[g * cOutG + m0 + m][c0 + kk][tap], 0 past the output or input channels of the group; stored
// where the accumulator's layout wants it (Acc::putA).
template <typename Acc, typename T, typename ATile>
__device__ void fillWeights(
    FusedParams const& f, T const* __restrict__ weight, ATile sA, int g, int m0, int c0, int tap, int taps)
{
    for (int e = threadIdx.x; e < kBM * kBK; e += kThreads)
    {
        int const m = e / kBK;
        int const kk = e % kBK;
        float v = 0.0f;
        if (m0 + m < f.cOutG && c0 + kk < f.cInG)
        {
            int64_t const co = static_cast<int64_t>(g) * f.cOutG + m0 + m;
            v = toFloat(weight[(co * f.cInG + c0 + kk) * taps + tap]);
        }
        Acc::putA(sA, m, kk, v);
    }
}

// Accumulators of one block tile and the multiply step over one pair of shared tiles, per tile type.
template <typename S>
struct Accumulator;

// FP16 on tensor cores: warp (wm, wn) = (warp / 2, warp % 2) owns rows wm*16..+15 and columns wn*32..+31 of the
// tile (two 16x16 FP32 accumulator fragments).
template <>
struct Accumulator<__half>
{
    static constexpr int kARows = kBM; // A tile sA[m][kk], row-major for matrix_a
    static constexpr int kACols = kLdA;
    nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> acc[2];

    __device__ static void putA(__half (*sA)[kACols], int m, int kk, float v)
    {
        sA[m][kk] = __float2half_rn(v);
    }

    __device__ void zero()
    {
        nvcuda::wmma::fill_fragment(acc[0], 0.0f);
        nvcuda::wmma::fill_fragment(acc[1], 0.0f);
    }
    __device__ void step(__half (*sA)[kACols], __half (*sB)[kLdB])
    {
        using namespace nvcuda;
        int const warp = threadIdx.x / 32;
        int const wm = warp / 2;
        int const wn = warp % 2;
        SR_UNROLL
        for (int ks = 0; ks < kBK / 16; ++ks)
        {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
            wmma::load_matrix_sync(a, &sA[wm * 16][ks * 16], kLdA);
            SR_UNROLL
            for (int fi = 0; fi < 2; ++fi)
            {
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> b;
                wmma::load_matrix_sync(b, &sB[ks * 16][wn * 32 + fi * 16], kLdB);
                wmma::mma_sync(acc[fi], a, b, acc[fi]);
            }
        }
    }
    __device__ void store(float (*sC)[kLdC])
    {
        int const warp = threadIdx.x / 32;
        SR_UNROLL
        for (int fi = 0; fi < 2; ++fi)
        {
            nvcuda::wmma::store_matrix_sync(
                &sC[(warp / 2) * 16][(warp % 2) * 32 + fi * 16], acc[fi], kLdC, nvcuda::wmma::mem_row_major);
        }
    }
};

// FP32 on CUDA cores (plain FP32 FMA): thread (ty, tx) = (tid / 16, tid % 16) owns rows ty*4..+3 and columns
// tx*4..+3. A is stored transposed (sA[kk][m]) so that each k reads one float4 of A (2 distinct per warp: broadcast)
// and one float4 of B (16 distinct, consecutive): 2 shared loads per 16 FMAs.
template <>
struct Accumulator<float>
{
    static constexpr int kARows = kBK;
    static constexpr int kACols = kBM + 4; // 144-byte rows keep float4 reads aligned
    float acc[4][4];

    __device__ static void putA(float (*sA)[kACols], int m, int kk, float v)
    {
        sA[kk][m] = v;
    }
    __device__ void zero()
    {
        SR_UNROLL
        for (int r = 0; r < 4; ++r)
        {
            SR_UNROLL
            for (int q = 0; q < 4; ++q)
            {
                acc[r][q] = 0.0f;
            }
        }
    }
    __device__ void step(float (*sA)[kACols], float (*sB)[kLdB])
    {
        int const ty = threadIdx.x / 16;
        int const tx = threadIdx.x % 16;
        SR_UNROLL
        for (int k = 0; k < kBK; ++k)
        {
            float4 const a4 = *reinterpret_cast<float4 const*>(&sA[k][ty * 4]);
            float4 const b4 = *reinterpret_cast<float4 const*>(&sB[k][tx * 4]);
            float const a[4] = {a4.x, a4.y, a4.z, a4.w};
            float const b[4] = {b4.x, b4.y, b4.z, b4.w};
            SR_UNROLL
            for (int r = 0; r < 4; ++r)
            {
                SR_UNROLL
                for (int q = 0; q < 4; ++q)
                {
                    acc[r][q] = fmaf(a[r], b[q], acc[r][q]);
                }
            }
        }
    }
    __device__ void store(float (*sC)[kLdC])
    {
        int const ty = threadIdx.x / 16;
        int const tx = threadIdx.x % 16;
        SR_UNROLL
        for (int r = 0; r < 4; ++r)
        {
            SR_UNROLL
            for (int q = 0; q < 4; ++q)
            {
                sC[ty * 4 + r][tx * 4 + q] = acc[r][q];
            }
        }
    }
};

template <typename T>
__global__ void __launch_bounds__(kThreads)
    deformConvFusedKernel(FusedParams f, T const* __restrict__ input, T const* __restrict__ weight,
        T const* __restrict__ offset, T const* __restrict__ mask, T const* __restrict__ bias, T* __restrict__ output)
{
    using S = typename TileType<T>::type;
    using Acc = Accumulator<S>;
    __shared__ __align__(32) S sA[Acc::kARows][Acc::kACols];
    __shared__ __align__(32) S sB[kBK][kLdB];
    __shared__ __align__(32) float sC[kBM][kLdC];

    DeformConvShape const& s = f.s;
    int const gy = f.gyBase + static_cast<int>(blockIdx.y);
    int const g = gy / f.mTiles;
    int const m0 = (gy % f.mTiles) * kBM;
    int const taps = s.kH * s.kW;
    int const cPerOffsetGroup = s.cIn / s.offsetGroup;
    int64_t const plane = static_cast<int64_t>(s.hOut) * s.wOut;

    // This thread's position in the tile (the same for sampling and for the epilogue) and its channel slice.
    int const n = threadIdx.x % kBN;
    int const kSlice = (threadIdx.x / kBN) * kChannelsPerThread;
    int64_t const p = static_cast<int64_t>(blockIdx.x) * kBN + n;
    bool const valid = p < f.positions;
    int64_t const img = valid ? p / plane : 0;
    int64_t const rem = valid ? p - img * plane : 0;
    int const oy = static_cast<int>(rem / s.wOut);
    int const ox = static_cast<int>(rem % s.wOut);
    T const* const image = input + img * s.cIn * s.hIn * s.wIn;
    T const* const off = offset + img * s.offsetGroup * 2 * taps * plane;
    T const* const mk = mask != nullptr ? mask + img * s.offsetGroup * taps * plane : nullptr;
    int64_t const planeIn = static_cast<int64_t>(s.hIn) * s.wIn;

    Acc acc;
    acc.zero();

    for (int tap = 0; tap < taps; ++tap)
    {
        int const ti = tap / s.kW;
        int const tj = tap % s.kW;
        int cachedGroup = -1; // offset group whose sampling point `ts` holds
        DeformTapSample ts {};
        for (int c0 = 0; c0 < f.cInG; c0 += kBK)
        {
            fillWeights<Acc>(f, weight, sA, g, m0, c0, tap, taps);
            // Fast path: the thread's whole channel slice exists and shares one offset group (one sampling point),
            // so its loads are unrolled and independent. Otherwise channel by channel, with zeros past the edge.
            int const cFirst = g * f.cInG + c0 + kSlice;
            bool const uniform = valid && c0 + kSlice + kChannelsPerThread <= f.cInG
                && cFirst / cPerOffsetGroup == (cFirst + kChannelsPerThread - 1) / cPerOffsetGroup;
            if (uniform)
            {
                int const og = cFirst / cPerOffsetGroup;
                if (og != cachedGroup)
                {
                    ts = deformTapSample(s, off, mk, og, ti, tj, oy, ox);
                    cachedGroup = og;
                }
                T const* const first = image + cFirst * planeIn;
                SR_UNROLL
                for (int q = 0; q < kChannelsPerThread; ++q)
                {
                    sB[kSlice + q][n] = fromFloat<S>(deformModulated(first + q * planeIn, ts));
                }
            }
            for (int q = 0; !uniform && q < kChannelsPerThread; ++q)
            {
                int const kk = kSlice + q;
                int const cl = c0 + kk;
                float v = 0.0f;
                if (valid && cl < f.cInG)
                {
                    int const c = g * f.cInG + cl;
                    int const og = c / cPerOffsetGroup;
                    if (og != cachedGroup)
                    {
                        ts = deformTapSample(s, off, mk, og, ti, tj, oy, ox);
                        cachedGroup = og;
                    }
                    v = deformModulated(image + c * planeIn, ts);
                }
                sB[kk][n] = fromFloat<S>(v);
            }
            __syncthreads(); // tiles complete before anyone multiplies
            acc.step(sA, sB);
            __syncthreads(); // everyone done reading before the next fill overwrites
        }
    }

    acc.store(sC);
    __syncthreads();

    // Epilogue: thread writes rows m = tid / kBN + 2i of its position n; a warp writes 32 consecutive positions.
    if (!valid)
    {
        return;
    }
    for (int m = threadIdx.x / kBN; m < kBM; m += kThreads / kBN)
    {
        if (m0 + m >= f.cOutG)
        {
            break;
        }
        int64_t const co = static_cast<int64_t>(g) * f.cOutG + m0 + m;
        float const b = bias != nullptr ? toFloat(bias[co]) : 0.0f;
        output[(img * s.cOut + co) * plane + rem] = fromFloat<T>(sC[m][n] + b);
    }
}

} // namespace

template <typename T>
cudaError_t launchDeformConv2dFused(DeformConvShape const& s, T const* input, T const* weight, T const* offset,
    T const* mask, T const* bias, T* output, cudaStream_t stream)
{
    FusedParams f {};
    f.s = s;
    f.positions = static_cast<int64_t>(s.n) * s.hOut * s.wOut;
    f.cInG = s.cIn / s.group;
    f.cOutG = s.cOut / s.group;
    f.mTiles = (f.cOutG + kBM - 1) / kBM;
    int64_t const blocksX = (f.positions + kBN - 1) / kBN;
    if (blocksX > INT32_MAX)
    {
        return cudaErrorInvalidValue;
    }
    int64_t const rowsY = static_cast<int64_t>(s.group) * f.mTiles; // (group, output-channel tile) pairs
    for (int64_t y0 = 0; y0 < rowsY; y0 += kMaxGridY)
    {
        f.gyBase = static_cast<int>(y0);
        unsigned const gridY = static_cast<unsigned>(rowsY - y0 < kMaxGridY ? rowsY - y0 : kMaxGridY);
        deformConvFusedKernel<T><<<dim3(static_cast<unsigned>(blocksX), gridY), kThreads, 0, stream>>>(
            f, input, weight, offset, s.hasMask ? mask : nullptr, s.hasBias ? bias : nullptr, output);
        cudaError_t const launched = cudaGetLastError();
        if (launched != cudaSuccess)
        {
            return launched;
        }
    }
    return cudaSuccess;
}

template cudaError_t launchDeformConv2dFused<float>(
    DeformConvShape const&, float const*, float const*, float const*, float const*, float const*, float*, cudaStream_t);
template cudaError_t launchDeformConv2dFused<__half>(DeformConvShape const&, __half const*, __half const*,
    __half const*, __half const*, __half const*, __half*, cudaStream_t);

} // namespace sr
