// sr::DeformConv2d on the GPU: the launcher, and the kDeformConvIm2col path: per chunk of the batch
// (deformConv2dChunk), deformable im2col into the workspace, optional bias broadcast into the output, then cuBLAS GEMM
// (FP32 accumulate) writing straight into the output. The fused path is in deformConv2dFused.cu.
#include "deformConv2dKernel.h"

namespace sr
{
namespace
{

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = int64_t(1) << 16;

unsigned gridFor(int64_t total)
{
    int64_t const blocks = (total + kThreads - 1) / kThreads;
    return static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

// columns [images][C * kH * kW][rows * Wo] for images img0.., output rows row0..row0+rows-1.
// One thread per (image, channel, output position); it writes that position's kH*kW taps.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    deformIm2colKernel(DeformConvShape s, T const* __restrict__ input, T const* __restrict__ offset,
        T const* __restrict__ mask, T* __restrict__ columns, int img0, int images, int row0, int rows)
{
    int64_t const cols = static_cast<int64_t>(rows) * s.wOut;
    int64_t const total = static_cast<int64_t>(images) * s.cIn * cols;
    int const taps = s.kH * s.kW;
    int64_t const outPlane = static_cast<int64_t>(s.hOut) * s.wOut;
    for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
        idx += static_cast<int64_t>(blockDim.x) * gridDim.x)
    {
        int64_t const p = idx % cols;
        int64_t const rest = idx / cols;
        int const c = static_cast<int>(rest % s.cIn);
        int const b = static_cast<int>(rest / s.cIn);
        int const img = img0 + b;
        int const oy = row0 + static_cast<int>(p / s.wOut);
        int const ox = static_cast<int>(p % s.wOut);
        T const* image = input + static_cast<int64_t>(img) * s.cIn * s.hIn * s.wIn;
        T const* off = offset + static_cast<int64_t>(img) * s.offsetGroup * 2 * taps * outPlane;
        T const* mk = mask != nullptr ? mask + static_cast<int64_t>(img) * s.offsetGroup * taps * outPlane : nullptr;
        T* col = columns + (static_cast<int64_t>(b) * s.cIn + c) * taps * cols + p;
        for (int i = 0; i < s.kH; ++i)
        {
            for (int j = 0; j < s.kW; ++j)
            {
                col[static_cast<int64_t>(i * s.kW + j) * cols]
                    = fromFloat<T>(deformIm2colElement(s, image, off, mk, c, i, j, oy, ox));
            }
        }
    }
}

// out[img][co][row0 * Wo + p] = bias[co] for the chunk; the GEMM then accumulates with beta = 1.
template <typename T>
__global__ void __launch_bounds__(kThreads) biasFillKernel(
    DeformConvShape s, T const* __restrict__ bias, T* __restrict__ output, int img0, int images, int row0, int rows)
{
    int64_t const cols = static_cast<int64_t>(rows) * s.wOut;
    int64_t const total = static_cast<int64_t>(images) * s.cOut * cols;
    int64_t const outPlane = static_cast<int64_t>(s.hOut) * s.wOut;
    for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
        idx += static_cast<int64_t>(blockDim.x) * gridDim.x)
    {
        int64_t const p = idx % cols;
        int64_t const rest = idx / cols;
        int const co = static_cast<int>(rest % s.cOut);
        int64_t const img = img0 + rest / s.cOut;
        output[(img * s.cOut + co) * outPlane + static_cast<int64_t>(row0) * s.wOut + p] = bias[co];
    }
}

template <typename T>
constexpr cudaDataType_t cudaTypeOf();
template <>
constexpr cudaDataType_t cudaTypeOf<float>()
{
    return CUDA_R_32F;
}
template <>
constexpr cudaDataType_t cudaTypeOf<__half>()
{
    return CUDA_R_16F;
}

} // namespace

size_t deformConv2dWorkspaceSize(DeformConvShape const& s, size_t elemSize, int32_t impl)
{
    if (s.n <= 0 || deformConv2dCheckShape(s) != nullptr || (impl != kDeformConvFused && impl != kDeformConvIm2col))
    {
        return 0;
    }
    return deformConv2dWorkspaceBytes(s, elemSize, impl);
}

template <typename T>
cudaError_t launchDeformConv2d(DeformConvShape const& s, T const* input, T const* weight, T const* offset,
    T const* mask, T const* bias, T* output, void* workspace, cublasHandle_t cublas, cudaStream_t stream,
    DeformConvGemmOptions const& options, cublasStatus_t* cublasStatus)
{
    auto cublasFailed = [cublasStatus](cublasStatus_t st)
    {
        if (cublasStatus != nullptr)
        {
            *cublasStatus = st;
        }
        return cudaErrorUnknown;
    };
    if (cublasStatus != nullptr)
    {
        *cublasStatus = CUBLAS_STATUS_SUCCESS;
    }
    if (deformConv2dCheckShape(s) != nullptr || (options.impl != kDeformConvFused && options.impl != kDeformConvIm2col))
    {
        return cudaErrorInvalidValue;
    }
    if (s.n == 0)
    {
        return cudaSuccess;
    }
    if (input == nullptr || weight == nullptr || offset == nullptr || output == nullptr
        || (s.hasMask && mask == nullptr) || (s.hasBias && bias == nullptr))
    {
        return cudaErrorInvalidValue;
    }
    if (options.impl == kDeformConvFused)
    {
        return launchDeformConv2dFused(s, input, weight, offset, mask, bias, output, stream);
    }
    if (workspace == nullptr || cublas == nullptr)
    {
        return cudaErrorInvalidValue;
    }
    T const* maskOrNull = s.hasMask ? mask : nullptr;
    T* columns = reinterpret_cast<T*>(alignUp(reinterpret_cast<uintptr_t>(workspace), kWorkspaceAlignment));
    size_t const columnBytes = deformConv2dColumnElements(s, deformConv2dChunk(s, sizeof(T))) * sizeof(T);
    void* cublasWorkspace = reinterpret_cast<char*>(columns) + alignUp(columnBytes, kWorkspaceAlignment);
    // cublasSetStream resets the workspace to cuBLAS's own pool, so the workspace is set after it, on every launch.
    // Math mode: TF32 tensor ops for FP32 only when allowed; plain FP32 otherwise (FP16 uses tensor cores anyway).
    cublasMath_t const math = options.allowTf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
    cublasStatus_t st = cublasSetStream(cublas, stream);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasSetWorkspace(cublas, cublasWorkspace, kDeformConvCublasWorkspace);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasSetPointerMode(cublas, CUBLAS_POINTER_MODE_HOST);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasSetMathMode(cublas, math);
    if (st != CUBLAS_STATUS_SUCCESS)
    {
        return cublasFailed(st);
    }
    cublasComputeType_t const compute
        = options.allowTf32 && cudaTypeOf<T>() == CUDA_R_32F ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;

    DeformConvChunk const ch = deformConv2dChunk(s, sizeof(T));
    int const taps = s.kH * s.kW;
    int const cInG = s.cIn / s.group;
    int const cOutG = s.cOut / s.group;
    long long const k = static_cast<long long>(cInG) * taps; // GEMM reduction length per group
    long long const outPlane = static_cast<long long>(s.hOut) * s.wOut;
    float const alpha = 1.0f;
    float const beta = s.hasBias ? 1.0f : 0.0f;
    cudaDataType_t const dt = cudaTypeOf<T>();

    for (int img0 = 0; img0 < s.n; img0 += ch.images)
    {
        int const images = ch.images < s.n - img0 ? ch.images : s.n - img0;
        for (int row0 = 0; row0 < s.hOut; row0 += ch.rows)
        {
            int const rows = ch.rows < s.hOut - row0 ? ch.rows : s.hOut - row0;
            long long const cols = static_cast<long long>(rows) * s.wOut; // GEMM N
            int64_t const colTotal = static_cast<int64_t>(images) * s.cIn * cols;
            deformIm2colKernel<T><<<gridFor(colTotal), kThreads, 0, stream>>>(
                s, input, offset, maskOrNull, columns, img0, images, row0, rows);
            if (s.hasBias)
            {
                biasFillKernel<T><<<gridFor(static_cast<int64_t>(images) * s.cOut * cols), kThreads, 0, stream>>>(
                    s, bias, output, img0, images, row0, rows);
            }
            cudaError_t const launched = cudaGetLastError();
            if (launched != cudaSuccess)
            {
                return launched;
            }
            // Row-major out_g[CoutG, N] = W_g[CoutG, K] x col_g[K, N]  <=>  column-major
            // out_g^T (N x CoutG, ld Ho*Wo) = col_g^T (N x K, ld N) x W_g^T (K x CoutG, ld K).
            T* out0 = output + static_cast<int64_t>(img0) * s.cOut * outPlane + static_cast<int64_t>(row0) * s.wOut;
            if (s.group == 1)
            {
                // One batched call over the chunk's images; the weight is shared (stride 0).
                st = cublasGemmStridedBatchedEx(cublas, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(cols), cOutG,
                    static_cast<int>(k), &alpha, columns, dt, static_cast<int>(cols), k * cols, weight, dt,
                    static_cast<int>(k), 0, &beta, out0, dt, static_cast<int>(outPlane), s.cOut * outPlane, images,
                    compute, CUBLAS_GEMM_DEFAULT);
            }
            else
            {
                // Per image, one batched call over the groups (uniform strides for columns, weight and output).
                for (int b = 0; b < images && st == CUBLAS_STATUS_SUCCESS; ++b)
                {
                    st = cublasGemmStridedBatchedEx(cublas, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(cols), cOutG,
                        static_cast<int>(k), &alpha, columns + static_cast<int64_t>(b) * s.cIn * taps * cols, dt,
                        static_cast<int>(cols), k * cols, weight, dt, static_cast<int>(k),
                        static_cast<long long>(cOutG) * k, &beta, out0 + static_cast<int64_t>(b) * s.cOut * outPlane,
                        dt, static_cast<int>(outPlane), cOutG * outPlane, s.group, compute, CUBLAS_GEMM_DEFAULT);
                }
            }
            if (st != CUBLAS_STATUS_SUCCESS)
            {
                return cublasFailed(st);
            }
        }
    }
    return cudaSuccess;
}

template cudaError_t launchDeformConv2d<float>(DeformConvShape const&, float const*, float const*, float const*,
    float const*, float const*, float*, void*, cublasHandle_t, cudaStream_t, DeformConvGemmOptions const&,
    cublasStatus_t*);
template cudaError_t launchDeformConv2d<__half>(DeformConvShape const&, __half const*, __half const*, __half const*,
    __half const*, __half const*, __half*, void*, cublasHandle_t, cudaStream_t, DeformConvGemmOptions const&,
    cublasStatus_t*);

} // namespace sr
