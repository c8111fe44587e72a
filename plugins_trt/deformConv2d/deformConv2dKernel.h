// CUDA launcher for sr::DeformConv2d, two implementations (DeformConvImpl in deformConv2dMath.h):
//   kDeformConvFused (default): one kernel, samples straight into shared-memory GEMM tiles, no workspace
//                               (deformConv2dFused.cu);
//   kDeformConvIm2col:          deformable im2col into the workspace + cuBLAS GEMM per chunk (deformConv2dKernel.cu).
// DeformConvShape, the chunk rule, the workspace rule and the per-element math live in deformConv2dMath.h.
#pragma once

#include "deformConv2dMath.h"

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

namespace sr
{

// Bytes of device workspace launchDeformConv2d needs for this shape and implementation: deformConv2dWorkspaceBytes
// (deformConv2dMath.h): 0 for kDeformConvFused; for kDeformConvIm2col the im2col columns of one chunk plus the cuBLAS
// workspace slice, both aligned. 0 when n == 0 or the shape or impl is invalid.
size_t deformConv2dWorkspaceSize(DeformConvShape const& s, size_t elemSize, int32_t impl);

// How the layer runs. impl: kDeformConvFused or kDeformConvIm2col. allowTf32 (kDeformConvIm2col only): FP32 GEMMs may
// use TF32 tensor-op math (faster, ~1e-3 relative error); off, FP32 GEMMs are plain FP32. The fused kernel always
// multiplies FP32 data in FP32 on CUDA cores. FP16 data always multiplies in FP16 with FP32 accumulation.
struct DeformConvGemmOptions
{
    bool allowTf32 {false};
    int32_t impl {kDeformConvFused};
};

// Y = deform_conv2d(X, W, offset, bias, mask) as torchvision. T = float or __half (FP16 in/out, FP32 accumulate:
// samples are computed in FP32 and rounded to T before the multiply). mask / bias may be null (s.hasMask / s.hasBias
// must agree). kDeformConvFused: `workspace` and `cublas` are not used (may be null). kDeformConvIm2col: `workspace`
// holds at least deformConv2dWorkspaceSize(s, sizeof(T), impl) bytes, its tail handed to cuBLAS
// (cublasSetWorkspace, after setting the handle's stream to `stream`), and `cublas` is required. Either way nothing
// allocates or synchronises, everything is enqueued on `stream`, and the launch can be captured in a CUDA graph.
// Returns cudaErrorInvalidValue for a bad shape / missing pointer, cudaErrorUnknown when cuBLAS fails (its status in
// *cublasStatus when given), else the first launch error of our kernels.
template <typename T>
cudaError_t launchDeformConv2d(DeformConvShape const& s, T const* input, T const* weight, T const* offset,
    T const* mask, T const* bias, T* output, void* workspace, cublasHandle_t cublas, cudaStream_t stream,
    DeformConvGemmOptions const& options = DeformConvGemmOptions {}, cublasStatus_t* cublasStatus = nullptr);

extern template cudaError_t launchDeformConv2d<float>(DeformConvShape const&, float const*, float const*, float const*,
    float const*, float const*, float*, void*, cublasHandle_t, cudaStream_t, DeformConvGemmOptions const&,
    cublasStatus_t*);
extern template cudaError_t launchDeformConv2d<__half>(DeformConvShape const&, __half const*, __half const*,
    __half const*, __half const*, __half const*, __half*, void*, cublasHandle_t, cudaStream_t,
    DeformConvGemmOptions const&, cublasStatus_t*);

// The fused kernel alone (deformConv2dFused.cu); launchDeformConv2d calls it for kDeformConvFused after the checks.
template <typename T>
cudaError_t launchDeformConv2dFused(DeformConvShape const& s, T const* input, T const* weight, T const* offset,
    T const* mask, T const* bias, T* output, cudaStream_t stream);

extern template cudaError_t launchDeformConv2dFused<float>(
    DeformConvShape const&, float const*, float const*, float const*, float const*, float const*, float*, cudaStream_t);
extern template cudaError_t launchDeformConv2dFused<__half>(DeformConvShape const&, __half const*, __half const*,
    __half const*, __half const*, __half const*, __half*, cudaStream_t);

} // namespace sr
