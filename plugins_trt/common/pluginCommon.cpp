#include "common/pluginCommon.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <sstream>

namespace sr
{
namespace plugin
{

namespace
{
// Set once by TensorRT (or a test) before creators are used; read from any thread afterwards.
std::atomic<nvinfer1::ILoggerFinder*> gLoggerFinder {nullptr};

char const* severityName(nvinfer1::ILogger::Severity severity) noexcept
{
    switch (severity)
    {
    case nvinfer1::ILogger::Severity::kINTERNAL_ERROR: return "INTERNAL_ERROR";
    case nvinfer1::ILogger::Severity::kERROR: return "ERROR";
    case nvinfer1::ILogger::Severity::kWARNING: return "WARNING";
    case nvinfer1::ILogger::Severity::kINFO: return "INFO";
    case nvinfer1::ILogger::Severity::kVERBOSE: return "VERBOSE";
    }
    return "UNKNOWN";
}
} // namespace

void setLoggerFinder(nvinfer1::ILoggerFinder* finder) noexcept
{
    gLoggerFinder.store(finder);
}

void log(nvinfer1::ILogger::Severity severity, std::string const& message) noexcept
{
    nvinfer1::ILoggerFinder* finder = gLoggerFinder.load();
    nvinfer1::ILogger* logger = nullptr;
    if (finder != nullptr)
    {
        try
        {
            logger = finder->findLogger();
        }
        catch (...)
        {
            logger = nullptr;
        }
    }
    try
    {
        std::string const text = std::string("[sr plugins] ") + message;
        if (logger != nullptr)
        {
            logger->log(severity, text.c_str());
        }
        else if (severity <= nvinfer1::ILogger::Severity::kWARNING)
        {
            std::fprintf(stderr, "%s: %s\n", severityName(severity), text.c_str());
        }
    }
    catch (...)
    {
        // Out of memory while formatting: drop the message rather than terminate inside a noexcept TensorRT call.
    }
}

void logError(std::string const& message) noexcept
{
    log(nvinfer1::ILogger::Severity::kERROR, message);
}

void logWarning(std::string const& message) noexcept
{
    log(nvinfer1::ILogger::Severity::kWARNING, message);
}

cudaError_t takePendingCudaError(std::string const& who) noexcept
{
    cudaError_t const pending = cudaGetLastError();
    if (pending != cudaSuccess)
    {
        logWarning(who
            + "a CUDA error was pending before this layer launched (left by earlier work, not by this "
              "layer): "
            + cudaGetErrorName(pending) + ": " + cudaGetErrorString(pending));
    }
    return pending;
}

int32_t reportLaunch(std::string const& who, cudaError_t pending, cudaError_t status, char const* detail) noexcept
{
    if (status == cudaSuccess)
    {
        return 0;
    }
    std::string const extra = detail != nullptr && *detail != '\0' ? std::string(" (") + detail + ")" : "";
    if (pending != cudaSuccess && status == pending)
    {
        logError(who + "the CUDA context was already failed by earlier work (" + cudaGetErrorName(status)
            + "), so this layer could not run; look for the first CUDA error before this layer");
    }
    else
    {
        logError(who + "launch failed: " + cudaGetErrorName(status) + ": " + cudaGetErrorString(status) + extra);
    }
    return 1;
}

bool isSupportedFloatType(nvinfer1::DataType type) noexcept
{
    return type == nvinfer1::DataType::kFLOAT || type == nvinfer1::DataType::kHALF;
}

bool isShapeIntType(nvinfer1::DataType type) noexcept
{
    return type == nvinfer1::DataType::kINT32 || type == nvinfer1::DataType::kINT64;
}

char const* dataTypeName(nvinfer1::DataType type) noexcept
{
    switch (type)
    {
    case nvinfer1::DataType::kFLOAT: return "FP32";
    case nvinfer1::DataType::kHALF: return "FP16";
    case nvinfer1::DataType::kINT32: return "INT32";
    case nvinfer1::DataType::kINT64: return "INT64";
    default: return "unsupported type";
    }
}

std::string dimsToString(nvinfer1::Dims const& dims)
{
    std::ostringstream os;
    os << "[";
    for (int32_t i = 0; i < dims.nbDims; ++i)
    {
        os << (i ? ", " : "") << dims.d[i];
    }
    os << "]";
    return os.str();
}

FieldReader::FieldReader(char const* pluginName, nvinfer1::PluginFieldCollection const* fc) noexcept
    : mPluginName(pluginName)
    , mFc(fc)
{
}

nvinfer1::PluginField const* FieldReader::find(char const* name, bool& duplicate) const noexcept
{
    duplicate = false;
    nvinfer1::PluginField const* found = nullptr;
    if (mFc == nullptr || mFc->fields == nullptr)
    {
        return nullptr;
    }
    for (int32_t i = 0; i < mFc->nbFields; ++i)
    {
        nvinfer1::PluginField const& f = mFc->fields[i];
        if (f.name != nullptr && std::strcmp(f.name, name) == 0)
        {
            if (found != nullptr)
            {
                duplicate = true;
            }
            found = &f;
        }
    }
    return found;
}

bool FieldReader::readInts(char const* name, int32_t expectedLength, std::vector<int64_t>& out, bool& present) const
{
    bool duplicate = false;
    nvinfer1::PluginField const* f = find(name, duplicate);
    present = f != nullptr;
    if (!present)
    {
        return true;
    }
    std::string const where = mPluginName + ": attribute '" + name + "'";
    if (duplicate)
    {
        logError(where + " is given more than once");
        return false;
    }
    if (f->type != nvinfer1::PluginFieldType::kINT32 && f->type != nvinfer1::PluginFieldType::kINT64)
    {
        logError(where + " must be INT32 or INT64 (PluginFieldType " + std::to_string(static_cast<int32_t>(f->type))
            + " given)");
        return false;
    }
    if (f->length <= 0 || f->data == nullptr)
    {
        logError(where + " has no values");
        return false;
    }
    if (expectedLength >= 0 && f->length != expectedLength)
    {
        logError(
            where + " must have " + std::to_string(expectedLength) + " value(s), got " + std::to_string(f->length));
        return false;
    }
    out.resize(static_cast<size_t>(f->length));
    for (int32_t i = 0; i < f->length; ++i)
    {
        out[i] = f->type == nvinfer1::PluginFieldType::kINT32 ? static_cast<int32_t const*>(f->data)[i]
                                                              : static_cast<int64_t const*>(f->data)[i];
    }
    return true;
}

bool FieldReader::readInt(char const* name, int64_t& out, bool& present) const
{
    std::vector<int64_t> values;
    if (!readInts(name, 1, values, present))
    {
        return false;
    }
    if (present)
    {
        out = values[0];
    }
    return true;
}

bool checkRange(char const* pluginName, char const* name, std::vector<int64_t> const& values, int64_t lo, int64_t hi)
{
    for (int64_t v : values)
    {
        if (v < lo || v > hi)
        {
            logError(std::string(pluginName) + ": attribute '" + name + "' value " + std::to_string(v) + " is outside ["
                + std::to_string(lo) + ", " + std::to_string(hi) + "]");
            return false;
        }
    }
    return true;
}

void SerializedFields::clear() noexcept
{
    mFields.clear();
    mCollection = nvinfer1::PluginFieldCollection {};
}

void SerializedFields::addInt32s(char const* name, int32_t const* data, int32_t length)
{
    mFields.emplace_back(name, data, nvinfer1::PluginFieldType::kINT32, length);
}

nvinfer1::PluginFieldCollection const* SerializedFields::collection() noexcept
{
    mCollection.nbFields = static_cast<int32_t>(mFields.size());
    mCollection.fields = mFields.empty() ? nullptr : mFields.data();
    return &mCollection;
}

} // namespace plugin
} // namespace sr
