// sr::DeformConv2d per-element math (torchvision.ops.deform_conv2d semantics), host and device.
//
// Layouts (NCHW, contiguous):
//   input  [N, C, H, W]            weight [Cout, C/group, kH, kW]
//   offset [N, offsetGroup * kH * kW * 2, Ho, Wo]   pairs (dy, dx) per tap, tap = i * kW + j
//   mask   [N, offsetGroup * kH * kW, Ho, Wo]       (optional, multiplies the sample)
//   bias   [Cout]                                   (optional)
// Algorithm: deformable im2col into "columns", then per-group GEMM  out[co, p] = sum_k W[co, k] * col[k, p].
// Columns layout for one chunk: [image in chunk][C * kH * kW][rows * Wo] (row k = c * kH * kW + tap).
#pragma once

#include "../common/srCommon.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace sr
{

struct DeformConvShape
{
    int n, cIn, hIn, wIn, cOut, kH, kW, hOut, wOut, strideH, strideW, padH, padW, dilH, dilW, group, offsetGroup;
    bool hasBias, hasMask;
};

// Output extent of a convolution axis (pads begin/end; symmetric in practice).
SR_HD inline int convOutputSize(int in, int padBegin, int padEnd, int k, int dil, int stride)
{
    return (in + padBegin + padEnd - dil * (k - 1) - 1) / stride + 1;
}

// Where one bilinear sample of a channel plane reads: the plane indices of its 4 corners (-1 = corner outside the
// image, contributes 0) and their weights. Computed once per (position, tap, offset group) and applied to every
// channel plane of that offset group (the fused kernel reuses it across channels; the CPU reference and the im2col
// kernel apply it once). Plane indices are int32: the CUDA launchers refuse H * W >= 2^31.
struct DeformSample
{
    int idx[4];
    float w[4];
};

// torchvision's out-of-range rule: the whole sample is 0 when y <= -1, y >= H, x <= -1 or x >= W (all corners -1);
// otherwise each of the 4 corners outside the image contributes 0.
SR_HD inline DeformSample deformSamplePoint(int h, int w, float y, float x)
{
    DeformSample sp {{-1, -1, -1, -1}, {0.0f, 0.0f, 0.0f, 0.0f}};
    if (y <= -1.0f || static_cast<float>(h) <= y || x <= -1.0f || static_cast<float>(w) <= x)
    {
        return sp;
    }
    int const yLow = static_cast<int>(floorf(y));
    int const xLow = static_cast<int>(floorf(x));
    int const yHigh = yLow + 1;
    int const xHigh = xLow + 1;
    float const ly = y - static_cast<float>(yLow);
    float const lx = x - static_cast<float>(xLow);
    float const hy = 1.0f - ly;
    float const hx = 1.0f - lx;
    sp.w[0] = hy * hx;
    sp.w[1] = hy * lx;
    sp.w[2] = ly * hx;
    sp.w[3] = ly * lx;
    if (yLow >= 0 && xLow >= 0)
        sp.idx[0] = yLow * w + xLow;
    if (yLow >= 0 && xHigh <= w - 1)
        sp.idx[1] = yLow * w + xHigh;
    if (yHigh <= h - 1 && xLow >= 0)
        sp.idx[2] = yHigh * w + xLow;
    if (yHigh <= h - 1 && xHigh <= w - 1)
        sp.idx[3] = yHigh * w + xHigh;
    return sp;
}

// The sample of one channel plane: w0*v0 + w1*v1 + w2*v2 + w3*v3 in that order, corners outside the image as 0.
template <typename T>
SR_HD inline float deformSampleAt(T const* plane, DeformSample const& sp)
{
    float const v1 = sp.idx[0] >= 0 ? toFloat(plane[sp.idx[0]]) : 0.0f;
    float const v2 = sp.idx[1] >= 0 ? toFloat(plane[sp.idx[1]]) : 0.0f;
    float const v3 = sp.idx[2] >= 0 ? toFloat(plane[sp.idx[2]]) : 0.0f;
    float const v4 = sp.idx[3] >= 0 ? toFloat(plane[sp.idx[3]]) : 0.0f;
    return sp.w[0] * v1 + sp.w[1] * v2 + sp.w[2] * v3 + sp.w[3] * v4;
}

// Bilinear sample of one channel plane at (y, x) with torchvision's out-of-range rule (deformSamplePoint).
template <typename T>
SR_HD inline float deformBilinear(T const* plane, int h, int w, float y, float x)
{
    return deformSampleAt(plane, deformSamplePoint(h, w, y, x));
}

// Sampling point and mask of kernel tap (i, j) at output position (oy, ox) for offset group `offGroup`: what every
// channel of that offset group shares. `offset` / `mask` point at one image's tensors (mask may be null = 1).
struct DeformTapSample
{
    DeformSample at;
    float mask;
};

// Where kernel tap (i, j) of output position (oy, ox) samples, moved by its offset (dy, dx).
SR_HD inline DeformSample deformTapPoint(DeformConvShape const& s, int i, int j, int oy, int ox, float dy, float dx)
{
    float const y = static_cast<float>(oy * s.strideH - s.padH + i * s.dilH) + dy;
    float const x = static_cast<float>(ox * s.strideW - s.padW + j * s.dilW) + dx;
    return deformSamplePoint(s.hIn, s.wIn, y, x);
}

template <typename T>
SR_HD inline DeformTapSample deformTapSample(
    DeformConvShape const& s, T const* offset, T const* mask, int offGroup, int i, int j, int oy, int ox)
{
    int64_t const plane = static_cast<int64_t>(s.hOut) * s.wOut;
    int64_t const pos = static_cast<int64_t>(oy) * s.wOut + ox;
    int const taps = s.kH * s.kW;
    int const tap = i * s.kW + j;
    T const* off = offset + static_cast<int64_t>(offGroup) * 2 * taps * plane;
    float const dy = toFloat(off[(2 * tap) * plane + pos]);
    float const dx = toFloat(off[(2 * tap + 1) * plane + pos]);
    DeformTapSample t;
    t.at = deformTapPoint(s, i, j, oy, ox, dy, dx);
    t.mask = mask != nullptr ? toFloat(mask[(static_cast<int64_t>(offGroup) * taps + tap) * plane + pos]) : 1.0f;
    return t;
}

// One modulated sample of channel plane `plane` (the mask multiplies the bilinear value, as torchvision does).
template <typename T>
SR_HD inline float deformModulated(T const* plane, DeformTapSample const& t)
{
    return deformSampleAt(plane, t.at) * t.mask;
}

// One im2col element: channel c, kernel tap (i, j), output position (oy, ox) of one image.
// `image` points at that image's [C, H, W], `offset` / `mask` at that image's offset / mask tensors
// (mask may be null = all ones). Returns mask * bilinear sample, in float.
template <typename T>
SR_HD inline float deformIm2colElement(
    DeformConvShape const& s, T const* image, T const* offset, T const* mask, int c, int i, int j, int oy, int ox)
{
    int const offGroup = c / (s.cIn / s.offsetGroup);
    DeformTapSample const t = deformTapSample(s, offset, mask, offGroup, i, j, oy, ox);
    return deformModulated(image + static_cast<int64_t>(c) * s.hIn * s.wIn, t);
}

// bf16 of a float, round to nearest even, as AVX512-BF16's vcvtneps2bf16 does it: a NaN stays a quiet NaN and a
// subnormal becomes a signed zero. The bf16 path's inputs, weights and columns (the CPU kernel sr_deform_conv2d_bf16).
SR_HD inline uint16_t deformToBf16(float v)
{
    uint32_t x;
    std::memcpy(&x, &v, sizeof x);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return static_cast<uint16_t>((x >> 16) | 0x0040u);
    if ((x & 0x7f800000u) == 0)
        return static_cast<uint16_t>((x >> 16) & 0x8000u);
    return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

SR_HD inline float deformFromBf16(uint16_t v)
{
    uint32_t const x = static_cast<uint32_t>(v) << 16;
    float f;
    std::memcpy(&f, &x, sizeof f);
    return f;
}

// The mask from its logit (torchvision models predict mask logits and apply a sigmoid): the bf16 CPU kernel takes
// the logits where the graph's Sigmoid is fused into it.
SR_HD inline float deformMaskFromLogit(float v)
{
    return 1.0f / (1.0f + expf(-v));
}

// ---- Chunking: keeps the im2col workspace bounded -----------------------------------------------------------
// Default budget for the columns buffer of one chunk.
constexpr size_t kDeformConvColumnBudget = size_t(64) << 20; // 64 MiB

// A chunk is either `images` whole images (rows == hOut), or a band of `rows` output rows of ONE image.
// Rule: rowBytes = C*kH*kW*Wo*elemSize (columns of one output row).
//   if one whole image fits the budget: images = min(N, budget / imageBytes), rows = Ho
//   else: images = 1, rows = max(1, budget / rowBytes)   (a single row may exceed the budget: then rows = 1)
struct DeformConvChunk
{
    int images;
    int rows;
};

SR_HD inline DeformConvChunk deformConv2dChunk(
    DeformConvShape const& s, size_t elemSize, size_t budget = kDeformConvColumnBudget)
{
    DeformConvChunk ch {1, 1};
    size_t const rowBytes = static_cast<size_t>(s.cIn) * s.kH * s.kW * s.wOut * elemSize;
    size_t const imageBytes = rowBytes * s.hOut;
    if (rowBytes == 0 || s.n <= 0 || s.hOut <= 0)
    {
        return ch;
    }
    if (imageBytes <= budget)
    {
        size_t const fit = budget / imageBytes;
        ch.images = static_cast<int>(fit < static_cast<size_t>(s.n) ? fit : static_cast<size_t>(s.n));
        ch.rows = s.hOut;
    }
    else
    {
        size_t const fit = budget / rowBytes;
        ch.images = 1;
        ch.rows = fit < 1 ? 1 : static_cast<int>(fit); // fit < hOut here
    }
    return ch;
}

// Elements of the columns buffer for one chunk.
SR_HD inline size_t deformConv2dColumnElements(DeformConvShape const& s, DeformConvChunk const& ch)
{
    return static_cast<size_t>(ch.images) * s.cIn * s.kH * s.kW * static_cast<size_t>(ch.rows) * s.wOut;
}

// ---- Implementations ------------------------------------------------------------------------------------------
// kFused (default): one kernel samples the deformed, mask-modulated patches straight into shared-memory tiles of an
// implicit GEMM (tensor cores for FP16); no workspace at all. kIm2col: the earlier, proven path (deformable im2col
// into the workspace + cuBLAS GEMM), kept selectable for comparison and as a fallback. The choice is made when the
// engine is built (plugin field `impl`, default from SR_DEFORM_CONV2D_IMPL) and serialized with it, so the
// workspace TensorRT reserves is always the chosen path's.
enum DeformConvImpl : int32_t
{
    kDeformConvFused = 0,
    kDeformConvIm2col = 1,
};

constexpr char const* kDeformConvImplEnv = "SR_DEFORM_CONV2D_IMPL";

// The implementation SR_DEFORM_CONV2D_IMPL names: unset or empty or "fused" -> kFused, "im2col" -> kIm2col;
// anything else -> -1 (callers report it). Host only.
inline int32_t deformConv2dImplFromEnv()
{
    char const* v = std::getenv(kDeformConvImplEnv);
    if (v == nullptr || v[0] == '\0' || std::strcmp(v, "fused") == 0)
        return kDeformConvFused;
    if (std::strcmp(v, "im2col") == 0)
        return kDeformConvIm2col;
    return -1;
}

// ---- Workspace layout of kIm2col: [align pad][im2col columns of one chunk][align pad][cuBLAS workspace] ---------
// cuBLAS gets its workspace from ours (cublasSetWorkspace) so that it never allocates inside enqueue or while a CUDA
// graph is being captured. 4 MiB is cuBLAS's recommended size before Hopper; Hopper kernels want 32 MiB.
// kFused needs no workspace.
constexpr size_t kDeformConvCublasWorkspace = size_t(32) << 20;

// Bytes of workspace for one launch of this exact shape with `impl`: 0 for kFused; for kIm2col the chunk's columns,
// both parts aligned, plus cuBLAS's. 0 when the batch is empty.
inline size_t deformConv2dWorkspaceBytes(DeformConvShape const& s, size_t elemSize, int32_t impl = kDeformConvIm2col)
{
    if (s.n <= 0 || impl == kDeformConvFused)
    {
        return 0;
    }
    size_t const columns = deformConv2dColumnElements(s, deformConv2dChunk(s, elemSize)) * elemSize;
    return kWorkspaceAlignment + alignUp(columns, kWorkspaceAlignment) + kDeformConvCublasWorkspace;
}

// Bytes that serve every shape of a dynamic profile whose largest shape is `sMax` (every extent at its maximum).
// kFused: 0. kIm2col: a smaller problem can pack its chunk closer to the column budget than the largest one does; any
// chunk holds at most max(budget, one output row of columns) and never more than the whole problem's columns, both
// largest at the maxima. `fixed`: the profile has one shape, so the exact size is enough. This is also the least
// workspace a TensorRT build must allow for the layer (pipeline's engine stage refuses a smaller --workspace).
inline size_t deformConv2dProfileWorkspaceBytes(
    DeformConvShape const& sMax, size_t elemSize, bool fixed, int32_t impl = kDeformConvIm2col)
{
    size_t const exact = deformConv2dWorkspaceBytes(sMax, elemSize, impl);
    if (fixed || exact == 0)
    {
        return exact;
    }
    size_t const rowBytes = static_cast<size_t>(sMax.cIn) * sMax.kH * sMax.kW * sMax.wOut * elemSize;
    size_t const allBytes = rowBytes * sMax.hOut * sMax.n;
    size_t const chunkMax = kDeformConvColumnBudget > rowBytes ? kDeformConvColumnBudget : rowBytes;
    size_t const bound = allBytes < chunkMax ? allBytes : chunkMax;
    size_t const dynamic = kWorkspaceAlignment + alignUp(bound, kWorkspaceAlignment) + kDeformConvCublasWorkspace;
    return dynamic > exact ? dynamic : exact;
}

// Validation shared by every implementation. Returns nullptr when the shape is usable, else a reason.
inline char const* deformConv2dCheckShape(DeformConvShape const& s)
{
    if (s.n < 0 || s.cIn <= 0 || s.hIn <= 0 || s.wIn <= 0 || s.cOut <= 0 || s.hOut <= 0 || s.wOut <= 0)
        return "sizes must be positive (batch may be 0)";
    if (s.kH <= 0 || s.kW <= 0)
        return "kernel_shape must be positive";
    if (s.strideH <= 0 || s.strideW <= 0 || s.dilH <= 0 || s.dilW <= 0)
        return "strides and dilations must be positive";
    if (s.padH < 0 || s.padW < 0)
        return "pads must be non-negative";
    if (s.group <= 0 || s.cIn % s.group != 0 || s.cOut % s.group != 0)
        return "group must divide input and output channels";
    if (s.offsetGroup <= 0 || s.cIn % s.offsetGroup != 0)
        return "offset_group must divide input channels";
    if (static_cast<int64_t>(s.hIn) * s.wIn > INT32_MAX)
        return "H * W of the input must be below 2^31";
    return nullptr;
}

} // namespace sr
