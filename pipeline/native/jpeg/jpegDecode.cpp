// The JPEG reader (srJpeg.h): libjpeg's decoder, its messages kept instead of printed.
#include "srJpeg.h"

#include <csetjmp>
#include <cstdio>
#include <cstring>

#include <jpeglib.h>

namespace
{

struct Errors
{
    jpeg_error_mgr pub;
    std::jmp_buf jump;
    char* message;
    size_t capacity;
    bool warned;
};

void keep(j_common_ptr cinfo)
{
    auto* e = reinterpret_cast<Errors*>(cinfo->err);
    char text[JMSG_LENGTH_MAX];
    cinfo->err->format_message(cinfo, text);
    if (e->capacity > 0)
    {
        std::snprintf(e->message, e->capacity, "%s", text);
    }
}

// A fatal error: its message kept, back to the caller (libjpeg's default prints it and exits).
[[noreturn]] void onError(j_common_ptr cinfo)
{
    keep(cinfo);
    std::longjmp(reinterpret_cast<Errors*>(cinfo->err)->jump, 1);
}

// A warning (level -1; trace messages above it are dropped): the first one kept, as libjpeg would print only it.
void onMessage(j_common_ptr cinfo, int level)
{
    auto* e = reinterpret_cast<Errors*>(cinfo->err);
    if (level < 0 && !e->warned)
    {
        keep(cinfo);
        e->warned = true;
    }
    if (level < 0)
    {
        cinfo->err->num_warnings++;
    }
}

// libjpeg's messages into `message` (its default error manager prints them and exits on an error).
void attach(jpeg_decompress_struct& cinfo, Errors& e, char* message, size_t capacity)
{
    e.message = message;
    e.capacity = capacity;
    cinfo.err = jpeg_std_error(&e.pub);
    e.pub.error_exit = onError;
    e.pub.emit_message = onMessage;
    if (capacity > 0)
    {
        message[0] = '\0';
    }
}

// The channels OpenCV gives a JPEG of this colour space (IMREAD_UNCHANGED), or 0: not one this reader decodes.
int channelsOf(jpeg_decompress_struct const& cinfo)
{
    if (cinfo.num_components == 1 && cinfo.jpeg_color_space == JCS_GRAYSCALE)
    {
        return 1;
    }
    if (cinfo.num_components == 3 && (cinfo.jpeg_color_space == JCS_YCbCr || cinfo.jpeg_color_space == JCS_RGB))
    {
        return 3;
    }
    return 0;
}

// Reads the header; channels 0 when the colour space is not one this reader decodes.
int start(jpeg_decompress_struct& cinfo, uint8_t const* data, size_t size, int* channels)
{
    jpeg_mem_src(&cinfo, const_cast<unsigned char*>(data), static_cast<unsigned long>(size));
    jpeg_read_header(&cinfo, TRUE);
    *channels = channelsOf(cinfo);
    if (*channels == 0 || cinfo.data_precision != 8)
    {
        return SR_JPEG_OTHER;
    }
    cinfo.out_color_space = *channels == 1 ? JCS_GRAYSCALE : JCS_EXT_BGR;
    return SR_JPEG_OK;
}

void rows(jpeg_decompress_struct& cinfo, uint8_t* pixels, int width, int channels)
{
    size_t const stride = static_cast<size_t>(width) * static_cast<size_t>(channels);
    while (cinfo.output_scanline < cinfo.output_height)
    {
        JSAMPROW row = pixels + static_cast<size_t>(cinfo.output_scanline) * stride;
        jpeg_read_scanlines(&cinfo, &row, 1);
    }
}

} // namespace

extern "C"
{
    int sr_jpeg_abi_version(void)
    {
        return SR_JPEG_ABI;
    }

    int sr_jpeg_info(
        const uint8_t* data, size_t size, int* height, int* width, int* channels, char* message, size_t capacity)
    {
        jpeg_decompress_struct cinfo;
        Errors e {};
        attach(cinfo, e, message, capacity);
        if (setjmp(e.jump))
        {
            jpeg_destroy_decompress(&cinfo);
            return SR_JPEG_FAILED;
        }
        jpeg_create_decompress(&cinfo);
        int status = start(cinfo, data, size, channels);
        *height = static_cast<int>(cinfo.image_height);
        *width = static_cast<int>(cinfo.image_width);
        jpeg_destroy_decompress(&cinfo);
        return status;
    }

    int sr_jpeg_decode(const uint8_t* data, size_t size, uint8_t* pixels, int height, int width, int channels,
        char* message, size_t capacity)
    {
        jpeg_decompress_struct cinfo;
        Errors e {};
        attach(cinfo, e, message, capacity);
        if (setjmp(e.jump))
        {
            jpeg_destroy_decompress(&cinfo);
            return SR_JPEG_FAILED;
        }
        jpeg_create_decompress(&cinfo);
        int got = 0;
        int status = start(cinfo, data, size, &got);
        if (status == SR_JPEG_OK)
        {
            jpeg_start_decompress(&cinfo);
            if (got != channels || static_cast<int>(cinfo.output_height) != height
                || static_cast<int>(cinfo.output_width) != width)
            {
                status = SR_JPEG_OTHER;
            }
            else
            {
                rows(cinfo, pixels, width, channels);
                jpeg_finish_decompress(&cinfo);
            }
        }
        jpeg_destroy_decompress(&cinfo);
        return status;
    }
}
