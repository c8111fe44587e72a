/* C API of libsr_jpeg.so, the sr stage's JPEG reader (loaded by pipeline.native.jpeg_codec through ctypes): libjpeg
 * with an error manager of its own, so a damaged file's warning ("Corrupt JPEG data: ...") comes back to the caller
 * with the pixels instead of being printed on the process's stderr, as OpenCV's libjpeg prints it. */
#ifndef SR_JPEG_H
#define SR_JPEG_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C"
{
#endif

#define SR_JPEG_OK 0
#define SR_JPEG_FAILED 1 /* libjpeg refused the data: message holds its reason */
#define SR_JPEG_OTHER 2  /* not an 8-bit gray or colour (YCbCr/RGB) JPEG: OpenCV's to read */

#if defined(__GNUC__)
#define SR_JPEG_API __attribute__((visibility("default")))
#else
#define SR_JPEG_API
#endif

/* Bumped whenever a signature below changes or a function is added (the ctypes wrapper checks it). */
#define SR_JPEG_ABI 1
    SR_JPEG_API int sr_jpeg_abi_version(void);

    /* The size and channels (1 gray, 3 BGR) the image decodes to; message (capacity bytes) receives libjpeg's reason
     * when it fails. */
    SR_JPEG_API int sr_jpeg_info(
        const uint8_t* data, size_t size, int* height, int* width, int* channels, char* message, size_t capacity);

    /* The pixels (height x width x channels, as sr_jpeg_info said), as OpenCV's IMREAD_UNCHANGED gives them: gray, or
     * BGR. message receives libjpeg's first warning ("" when none) or, on failure, its reason. */
    SR_JPEG_API int sr_jpeg_decode(const uint8_t* data, size_t size, uint8_t* pixels, int height, int width,
        int channels, char* message, size_t capacity);

#ifdef __cplusplus
}
#endif

#endif /* SR_JPEG_H */
