// C API over the CUDA launchers (libsr_kernels_cuda.so) so GPU tests and benchmarks call them through ctypes on
// torch CUDA tensors. Pointers are device pointers; `stream` is a cudaStream_t (torch: stream.cuda_stream).
// dtype: 0 = float32, 1 = float16. Returns the cudaError_t of the launch (0 = success).
#include "deformConv2d/deformConv2dKernel.h"
#include "dynamicResize/dynamicResizeKernel.h"

#include <mutex>

#define SR_CUDA_API extern "C" __attribute__((visibility("default")))

namespace
{

// One cuBLAS handle per process for this test/bench API (plugins own theirs).
cublasHandle_t sharedCublas()
{
    static std::once_flag once;
    static cublasHandle_t handle = nullptr;
    std::call_once(once,
        []
        {
            if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS)
                handle = nullptr;
        });
    return handle;
}

} // namespace

SR_CUDA_API int sr_cuda_dynamic_resize(
    int dtype, void const* in, void* out, int n, int c, int hIn, int wIn, int hOut, int wOut, void* stream)
{
    auto const st = static_cast<cudaStream_t>(stream);
    cudaGetLastError(); // an error left by earlier work is not this launch's (the caller checked its own)
    if (dtype == 0)
        return sr::launchDynamicResize(
            static_cast<float const*>(in), static_cast<float*>(out), n, c, hIn, wIn, hOut, wOut, st);
    if (dtype == 1)
        return sr::launchDynamicResize(
            static_cast<__half const*>(in), static_cast<__half*>(out), n, c, hIn, wIn, hOut, wOut, st);
    return cudaErrorInvalidValue;
}

// impl: sr::DeformConvImpl (0 = fused, 1 = im2col + cuBLAS).
SR_CUDA_API size_t sr_cuda_deform_conv2d_workspace_size(
    int const* dims, int hasBias, int hasMask, size_t elemSize, int impl)
{
    sr::DeformConvShape s {dims[0], dims[1], dims[2], dims[3], dims[4], dims[5], dims[6], dims[7], dims[8], dims[9],
        dims[10], dims[11], dims[12], dims[13], dims[14], dims[15], dims[16], hasBias != 0, hasMask != 0};
    return sr::deformConv2dWorkspaceSize(s, elemSize, impl);
}

// dims: n, cIn, hIn, wIn, cOut, kH, kW, hOut, wOut, strideH, strideW, padH, padW, dilH, dilW, group, offsetGroup.
// impl as above; the shared cuBLAS handle is created only for the im2col path.
SR_CUDA_API int sr_cuda_deform_conv2d(int dtype, int const* dims, void const* input, void const* weight,
    void const* offset, void const* mask, void const* bias, void* output, void* workspace, void* stream, int impl)
{
    sr::DeformConvShape s {dims[0], dims[1], dims[2], dims[3], dims[4], dims[5], dims[6], dims[7], dims[8], dims[9],
        dims[10], dims[11], dims[12], dims[13], dims[14], dims[15], dims[16], bias != nullptr, mask != nullptr};
    cublasHandle_t handle = nullptr;
    if (impl == sr::kDeformConvIm2col)
    {
        handle = sharedCublas();
        if (handle == nullptr)
            return cudaErrorInitializationError;
    }
    sr::DeformConvGemmOptions options;
    options.impl = impl;
    auto const st = static_cast<cudaStream_t>(stream);
    cudaGetLastError(); // as above: report only what this launch causes
    if (dtype == 0)
        return sr::launchDeformConv2d(s, static_cast<float const*>(input), static_cast<float const*>(weight),
            static_cast<float const*>(offset), static_cast<float const*>(mask), static_cast<float const*>(bias),
            static_cast<float*>(output), workspace, handle, st, options);
    if (dtype == 1)
        return sr::launchDeformConv2d(s, static_cast<__half const*>(input), static_cast<__half const*>(weight),
            static_cast<__half const*>(offset), static_cast<__half const*>(mask), static_cast<__half const*>(bias),
            static_cast<__half*>(output), workspace, handle, st, options);
    return cudaErrorInvalidValue;
}

SR_CUDA_API char const* sr_cuda_error_string(int code)
{
    return cudaGetErrorString(static_cast<cudaError_t>(code));
}
