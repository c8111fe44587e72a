// The PNG library's version and last-error record (pngErrors.h, srPng.h).
#include "pngErrors.h"
#include "srPng.h"

namespace sr
{

namespace
{
thread_local std::string gLastError;
} // namespace

int cpuFail(int code, std::string const& msg)
{
    gLastError = msg;
    return code;
}

int cpuOk()
{
    gLastError.clear();
    return SR_OK;
}

} // namespace sr

extern "C"
{
    int sr_png_abi_version(void)
    {
        return SR_PNG_ABI;
    }

    const char* sr_png_last_error(void)
    {
        return sr::gLastError.c_str();
    }
}
