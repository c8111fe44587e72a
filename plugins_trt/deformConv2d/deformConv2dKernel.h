// CUDA launcher for sr::DeformConv2d: deformable im2col into the workspace + cuBLAS GEMM per chunk.
// DeformConvShape, the chunk rule and the per-element math live in deformConv2dMath.h.
#pragma once

#include "deformConv2dMath.h"

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

namespace sr
{

// Bytes of device workspace launchDeformConv2d needs: the im2col columns of one chunk
// (deformConv2dChunk(s, elemSize)) plus kWorkspaceAlignment for aligning the pointer. 0 when n == 0.
size_t deformConv2dWorkspaceSize(DeformConvShape const& s, size_t elemSize);

// Y = deform_conv2d(X, W, offset, bias, mask) as torchvision. T = float or __half (FP16 in/out, FP32 accumulate:
// im2col samples in FP32 and stores T; cublasGemmEx with CUBLAS_COMPUTE_32F). mask / bias may be null
// (s.hasMask / s.hasBias must agree). `workspace` holds at least deformConv2dWorkspaceSize(s, sizeof(T)) bytes.
// Everything is enqueued on `stream` (the cuBLAS handle's stream is set to it); no allocation, no sync.
// Returns cudaErrorInvalidValue for a bad shape / missing pointer, cudaErrorUnknown when cuBLAS fails,
// else the first launch error.
template <typename T>
cudaError_t launchDeformConv2d(DeformConvShape const& s, T const* input, T const* weight, T const* offset,
    T const* mask, T const* bias, T* output, void* workspace, cublasHandle_t cublas, cudaStream_t stream);

extern template cudaError_t launchDeformConv2d<float>(DeformConvShape const&, float const*, float const*,
    float const*, float const*, float const*, float*, void*, cublasHandle_t, cudaStream_t);
extern template cudaError_t launchDeformConv2d<__half>(DeformConvShape const&, __half const*, __half const*,
    __half const*, __half const*, __half const*, __half*, void*, cublasHandle_t, cudaStream_t);

} // namespace sr
