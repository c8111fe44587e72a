// CUDA launcher for sr::DynamicResize (bicubic, torch F.interpolate semantics; see dynamicResizeMath.h).
#pragma once

#include "dynamicResizeMath.h"

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

namespace sr
{

// in [n, c, hIn, wIn] -> out [n, c, hOut, wOut], both contiguous device buffers. T = float or __half
// (FP16 computes in FP32). Asynchronous on `stream`; no allocation, no synchronisation.
// Returns cudaErrorInvalidValue for negative sizes or an empty input with a non-empty output,
// cudaSuccess without launching anything when the output is empty, else the launch status.
template <typename T>
cudaError_t launchDynamicResize(
    T const* in, T* out, int n, int c, int hIn, int wIn, int hOut, int wOut, cudaStream_t stream);

extern template cudaError_t launchDynamicResize<float>(
    float const*, float*, int, int, int, int, int, int, cudaStream_t);
extern template cudaError_t launchDynamicResize<__half>(
    __half const*, __half*, int, int, int, int, int, int, cudaStream_t);

} // namespace sr
