/* C API of libsr_png.so, the sr stage's PNG codec for 8-bit images (loaded by pipeline.native.png_codec through
 * ctypes). Functions return SR_OK or an error code; sr_png_last_error() says why. */
#ifndef SR_PNG_H
#define SR_PNG_H

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
#define SR_PNG_ABI 2
    SR_API int sr_png_abi_version(void);
    /* Message of the last failure in this thread ("" when none). */
    SR_API const char* sr_png_last_error(void);

    /* The instructions the codec's kernels use: 0 SSE2 (x86-64's baseline), 1 also SSSE3, 2 also AVX2 (the default:
     * the most the CPU has); capped at what the CPU has. Every level writes the same bytes. Returns the level now
     * used. Not for use while another thread encodes or decodes. */
    SR_API int sr_png_set_simd(int level);

    /* PNG image data of an 8-bit image: the zlib stream an IDAT chunk holds (per row the Average or Up filter; each
     * band of rows one deflate block under its own Huffman code, or stored blocks where those are smaller).
     * pixels: h rows of w * channels samples (1-4 channels), contiguous; swap_red_blue != 0 writes 3/4-channel BGR(A)
     * pixels as PNG's RGB(A). out must hold sr_png_idat_bound(h, w, channels) bytes; *written receives the length. */
    SR_API size_t sr_png_idat_bound(int h, int w, int channels);
    SR_API int sr_png_idat_u8(const uint8_t* pixels, int h, int w, int channels, int swap_red_blue, uint8_t* out,
        size_t capacity, size_t* written);

    /* A PNG's inflated image data (h rows of a filter type byte and w * channels samples, 8-bit, not interlaced) ->
     * pixels (h x w x channels, contiguous); swap_red_blue != 0 writes 3/4-channel RGB(A) as BGR(A). Fails for a filter
     * type PNG does not have (0-4). */
    SR_API int sr_png_unfilter_u8(
        const uint8_t* filtered, int h, int w, int channels, int swap_red_blue, uint8_t* pixels);

#ifdef __cplusplus
}
#endif

#endif /* SR_PNG_H */
