// sr::DynamicResize CUDA kernel: one thread per output element, math from dynamicResizeMath.h.
#include "dynamicResizeKernel.h"

namespace sr
{
namespace
{

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = int64_t(1) << 16; // grid-stride loop covers the rest

template <typename T>
__global__ void __launch_bounds__(kThreads) dynamicResizeKernel(
    T const* __restrict__ in, T* __restrict__ out, int64_t total, int hIn, int wIn, int hOut, int wOut)
{
    int64_t const planeIn = static_cast<int64_t>(hIn) * wIn;
    for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
        idx += static_cast<int64_t>(blockDim.x) * gridDim.x)
    {
        int const ox = static_cast<int>(idx % wOut);
        int64_t const rest = idx / wOut;
        int const oy = static_cast<int>(rest % hOut);
        int64_t const plane = rest / hOut;
        CubicTaps const ty = cubicTaps(hIn, hOut, oy);
        CubicTaps const tx = cubicTaps(wIn, wOut, ox);
        out[idx] = fromFloat<T>(dynamicResizeElement(in + plane * planeIn, hIn, wIn, ty, tx));
    }
}

} // namespace

template <typename T>
cudaError_t launchDynamicResize(
    T const* in, T* out, int n, int c, int hIn, int wIn, int hOut, int wOut, cudaStream_t stream)
{
    if (n < 0 || c < 0 || hIn < 0 || wIn < 0 || hOut < 0 || wOut < 0)
    {
        return cudaErrorInvalidValue;
    }
    int64_t const total = static_cast<int64_t>(n) * c * hOut * wOut;
    if (total == 0)
    {
        return cudaSuccess;
    }
    if (hIn == 0 || wIn == 0 || in == nullptr || out == nullptr)
    {
        return cudaErrorInvalidValue;
    }
    if (dynamicResizeIsCopy(hIn, wIn, hOut, wOut))
    {
        return in == out
            ? cudaSuccess
            : cudaMemcpyAsync(out, in, static_cast<size_t>(total) * sizeof(T), cudaMemcpyDeviceToDevice, stream);
    }
    int64_t blocks = (total + kThreads - 1) / kThreads;
    blocks = blocks < kMaxBlocks ? blocks : kMaxBlocks;
    dynamicResizeKernel<T>
        <<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(in, out, total, hIn, wIn, hOut, wOut);
    return cudaGetLastError();
}

template cudaError_t launchDynamicResize<float>(float const*, float*, int, int, int, int, int, int, cudaStream_t);
template cudaError_t launchDynamicResize<__half>(__half const*, __half*, int, int, int, int, int, int, cudaStream_t);

} // namespace sr
