// The PNG library's last-error record (sr_png_last_error). Internal: not part of the C API. Named as in the CPU
// kernel library, whose errors the codec reported before it became a library of its own.
#pragma once

#include <string>

namespace sr
{

// Records `msg` as this thread's last error and returns `code`.
int cpuFail(int code, std::string const& msg);
// Clears this thread's last error and returns SR_OK.
int cpuOk();

} // namespace sr
