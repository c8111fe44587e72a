// The CPU library's last-error record (sr_last_error), shared by its source files. Internal: not part of the C API.
#pragma once

#include <string>

namespace sr
{

// Records `msg` as this thread's last error and returns `code`.
int cpuFail(int code, std::string const& msg);
// Clears this thread's last error and returns SR_OK.
int cpuOk();

} // namespace sr
