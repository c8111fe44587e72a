// Shared helpers for the sr TensorRT plugins: logging through TensorRT's logger, PluginField parsing with
// validation, and the field storage used by getFieldsToSerialize.
#pragma once

#include <NvInferRuntime.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

namespace sr
{
namespace plugin
{

// Every plugin in this library lives in this namespace with this version (see plugins_trt/README.md).
constexpr char const* kPLUGIN_NAMESPACE = "sr";
constexpr char const* kPLUGIN_VERSION = "1";

// Logger access. TensorRT hands the library an ILoggerFinder through setLoggerFinder() before it uses any creator;
// without one (e.g. a host-side test that never set it) messages go to stderr so they are never lost.
void setLoggerFinder(nvinfer1::ILoggerFinder* finder) noexcept;
void log(nvinfer1::ILogger::Severity severity, std::string const& message) noexcept;
void logError(std::string const& message) noexcept;
void logWarning(std::string const& message) noexcept;

// Launch-error attribution. A non-sticky CUDA error left on this thread by earlier work (another layer, the
// application) would otherwise be returned by our post-launch cudaGetLastError and blamed on us. Call
// takePendingCudaError() right before launching: it clears such an error and logs it as not ours. After launching,
// reportLaunch() returns 0 on success, else logs the failure, saying when the context was already broken (a sticky
// error that was pending before our launch) rather than calling it our launch failure.
cudaError_t takePendingCudaError(std::string const& who) noexcept;
int32_t reportLaunch(
    std::string const& who, cudaError_t pending, cudaError_t status, char const* detail = nullptr) noexcept;

// True for the element types every sr plugin supports (FP32, FP16).
bool isSupportedFloatType(nvinfer1::DataType type) noexcept;
// True for the integer types of a shape tensor (INT32, INT64).
bool isShapeIntType(nvinfer1::DataType type) noexcept;
char const* dataTypeName(nvinfer1::DataType type) noexcept;
std::string dimsToString(nvinfer1::Dims const& dims);

// Reads integer attributes from a PluginFieldCollection. Accepts kINT32 (what the ONNX parser produces) and kINT64
// (what Python users often pass); fields the caller never asks for are ignored, so the parser's extra fields
// (plugin_namespace, plugin_version, tensorrt_plugin_shape_input_indices) do no harm. Every problem is logged with
// the plugin and field name and makes the read return false.
class FieldReader
{
public:
    FieldReader(char const* pluginName, nvinfer1::PluginFieldCollection const* fc) noexcept;

    // Reads an int array of exactly `expectedLength` values (or any positive length when expectedLength < 0).
    // Returns true when the field is absent (present=false, out untouched) or valid; false on a bad field.
    bool readInts(char const* name, int32_t expectedLength, std::vector<int64_t>& out, bool& present) const;
    // Reads a single int (a length-1 array). Same return convention as readInts.
    bool readInt(char const* name, int64_t& out, bool& present) const;

private:
    nvinfer1::PluginField const* find(char const* name, bool& duplicate) const noexcept;

    std::string mPluginName;
    nvinfer1::PluginFieldCollection const* mFc;
};

// Checks that every value lies in [lo, hi]; logs "<plugin>: attribute <name> ..." and returns false otherwise.
bool checkRange(char const* pluginName, char const* name, std::vector<int64_t> const& values, int64_t lo, int64_t hi);

// Owns the PluginField array returned from getFieldsToSerialize; the fields point into the plugin's own members.
class SerializedFields
{
public:
    void clear() noexcept;
    void addInt32s(char const* name, int32_t const* data, int32_t length);
    nvinfer1::PluginFieldCollection const* collection() noexcept;

private:
    std::vector<nvinfer1::PluginField> mFields;
    nvinfer1::PluginFieldCollection mCollection {};
};

} // namespace plugin
} // namespace sr
