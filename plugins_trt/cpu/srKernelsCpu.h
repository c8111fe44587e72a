/* C API of libsr_kernels_cpu.so: the sr ops on the CPU, same per-element math as the CUDA kernels.
 * All tensors are contiguous NCHW float32. Functions return SR_OK or an error code; sr_last_error() says why.
 * emulate_fp16 != 0 rounds what FP16 I/O would round on the GPU: inputs, im2col columns, outputs
 * (arithmetic stays FP32, as the CUDA kernels accumulate in FP32). */
#ifndef SR_KERNELS_CPU_H
#define SR_KERNELS_CPU_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C"
{
#endif

#define SR_OK 0
#define SR_ERR_INVALID_ARGUMENT 1
#define SR_ERR_NULL_POINTER 2
#define SR_ERR_INTERNAL 3

#if defined(__GNUC__)
#define SR_API __attribute__((visibility("default")))
#else
#define SR_API
#endif

/* Bumped whenever a signature below changes or a function is added (the ctypes wrapper checks it). */
#define SR_KERNELS_CPU_ABI 7
    SR_API int sr_kernels_abi_version(void);
    /* Message of the last failure in this thread ("" when none). */
    SR_API const char* sr_last_error(void);

    /* out[n, c, h_out, w_out] = bicubic resize of in[n, c, h_in, w_in] (torch F.interpolate, align_corners=False). */
    SR_API int sr_dynamic_resize_f32(
        const float* in, float* out, int n, int c, int h_in, int w_in, int h_out, int w_out, int emulate_fp16);

    /* torchvision deform_conv2d. mask / bias may be NULL. pad_h / pad_w are the begin pads (h_out / w_out carry the end
     * pads). column_budget: bytes per im2col chunk (0 = the CUDA launcher's default), so tests can force the chunking
     * the GPU uses for big inputs; elem size for the chunk rule is 2 with emulate_fp16 else 4. */
    SR_API int sr_deform_conv2d_f32(const float* input, const float* weight, const float* offset, const float* mask,
        const float* bias, float* output, int n, int c_in, int h_in, int w_in, int c_out, int k_h, int k_w, int h_out,
        int w_out, int stride_h, int stride_w, int pad_h, int pad_w, int dil_h, int dil_w, int group, int offset_group,
        int emulate_fp16, size_t column_budget);

    /* bf16 deform_conv2d: input, weight and each im2col element (mask * bilinear sample of the bf16 input) rounded to
     * bf16 (round to nearest even, subnormals to zero, as vcvtneps2bf16), products summed in FP32 (as vdpbf16ps:
     * AVX512-BF16 where the CPU has it, the same arithmetic in plain loops elsewhere), plus the FP32 bias.
     * mask / bias may be NULL. threads: worker threads (0 = one per core). portable != 0 runs the plain loops even
     * where AVX512-BF16 is present (the same bytes: for tests). bf16_io != 0: input, offset, mask and output are bf16
     * bit patterns (uint16, NCHW; the output rounded to bf16), else float32; weight and bias are float32 either way.
     * mask_logits != 0: mask holds logits, the mask is their sigmoid (a graph's Sigmoid fused in). */
    SR_API int sr_deform_conv2d_bf16(const void* input, const float* weight, const void* offset, const void* mask,
        const float* bias, void* output, int n, int c_in, int h_in, int w_in, int c_out, int k_h, int k_w, int h_out,
        int w_out, int stride_h, int stride_w, int pad_h, int pad_w, int dil_h, int dil_w, int group, int offset_group,
        int threads, int portable, int bf16_io, int mask_logits);

    /* 1 when sr_deform_conv2d_bf16 runs on AVX512-BF16 on this CPU, else 0 (plain loops). */
    SR_API int sr_deform_conv2d_bf16_native(void);

    /* The chunk rule (deformConv2dChunk) for a shape: images per chunk and output rows per chunk. */
    SR_API int sr_deform_conv2d_chunk(int n, int c_in, int k_h, int k_w, int h_out, int w_out, size_t elem_size,
        size_t column_budget, int* images, int* rows);

    /* Least workspace (bytes) the DeformConv2d plugin asks TensorRT for, for a profile whose largest problem has these
     * extents (batch, input channels, kernel, output height/width at the profile maxima); fixed_shape != 0 when the
     * profile has one shape; impl: 0 = fused (needs none: 0), 1 = im2col + cuBLAS. Same rule as the plugin's
     * getWorkspaceSize (deformConv2dProfileWorkspaceBytes), so the engine stage can refuse a smaller --workspace before
     * building. 0 for an empty problem or an unknown impl. */
    SR_API size_t sr_deform_conv2d_min_workspace_impl(int n_max, int c_in, int k_h, int k_w, int h_out_max,
        int w_out_max, size_t elem_size, int fixed_shape, int impl);

    /* As sr_deform_conv2d_min_workspace_impl for the implementation a plugin created now would use: the one
     * SR_DEFORM_CONV2D_IMPL names ("fused" or unset: 0 bytes; "im2col"; anything else counts as "im2col"). */
    SR_API size_t sr_deform_conv2d_min_workspace(
        int n_max, int c_in, int k_h, int k_w, int h_out_max, int w_out_max, size_t elem_size, int fixed_shape);

    /* Rounds values in place to the nearest FP16 value (round to nearest even), as __float2half_rn would. */
    SR_API void sr_round_to_half(float* values, size_t count);

    /* Model output -> 8-bit samples, the sr stage's rule (pipeline.backends.pixels): y is NCHW float RGB (3 channels),
     * out NHWC uint8 BGR; each value v becomes rint(v * 255) (float32 product, round half to even) clipped to
     * [0, 255]. nonfinite[i] receives the pixels of sample i with a NaN or infinite channel (their samples are
     * meaningless: the caller does not use them). One pass, one thread. */
    SR_API int sr_to_samples_u8(const float* y, uint8_t* out, int n, int h, int w, int64_t* nonfinite);

#ifdef __cplusplus
}
#endif

#endif /* SR_KERNELS_CPU_H */
