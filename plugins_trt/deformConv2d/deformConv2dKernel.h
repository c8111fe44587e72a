// CUDA launcher for sr::DeformConv2d: deformable im2col into the workspace + cuBLAS GEMM per chunk.
// DeformConvShape, the chunk rule and the per-element math live in deformConv2dMath.h.
#pragma once

#include "deformConv2dMath.h"

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

namespace sr
{

// Bytes of device workspace launchDeformConv2d needs for this shape: deformConv2dWorkspaceBytes (deformConv2dMath.h),
// i.e. the im2col columns of one chunk plus the cuBLAS workspace slice, both aligned. 0 when n == 0.
size_t deformConv2dWorkspaceSize(DeformConvShape const& s, size_t elemSize);

// How the GEMMs run. allowTf32: FP32 data may use TF32 tensor-op math (faster, ~1e-3 relative error); off, FP32
// GEMMs are plain FP32. FP16 data always multiplies in FP16 with FP32 accumulation.
struct DeformConvGemmOptions
{
    bool allowTf32 {false};
};

// Y = deform_conv2d(X, W, offset, bias, mask) as torchvision. T = float or __half (FP16 in/out, FP32 accumulate:
// im2col samples in FP32 and stores T; cublasGemmStridedBatchedEx with CUBLAS_COMPUTE_32F). mask / bias may be null
// (s.hasMask / s.hasBias must agree). `workspace` holds at least deformConv2dWorkspaceSize(s, sizeof(T)) bytes; its
// tail is handed to cuBLAS (cublasSetWorkspace), so nothing allocates and the launch can be captured in a CUDA graph.
// Everything is enqueued on `stream` (the cuBLAS handle's stream is set to it); no allocation, no sync.
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

} // namespace sr
