#include "dynamicResize/dynamicResizePlugin.h"

#include "dynamicResize/dynamicResizeKernel.h"

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <exception>
#include <limits>
#include <utility>

using nvinfer1::DataType;
using nvinfer1::Dims;
using nvinfer1::DimsExprs;
using nvinfer1::DynamicPluginTensorDesc;
using nvinfer1::PluginTensorDesc;
using nvinfer1::TensorFormat;

namespace sr
{
namespace plugin
{

namespace
{
constexpr int64_t kINT_MAX = std::numeric_limits<int32_t>::max();
} // namespace

DynamicResizePlugin::DynamicResizePlugin(std::string layerName)
    : mLayerName(std::move(layerName))
    , mLogPrefix(std::string(kNAME) + " '" + mLayerName + "': ")
{
}

void DynamicResizePlugin::logLayerError(std::string const& message) const noexcept
{
    logError(mLogPrefix + message);
}

nvinfer1::IPluginCapability* DynamicResizePlugin::getCapabilityInterface(nvinfer1::PluginCapabilityType type) noexcept
{
    switch (type)
    {
    case nvinfer1::PluginCapabilityType::kCORE: return static_cast<nvinfer1::IPluginV3OneCore*>(this);
    case nvinfer1::PluginCapabilityType::kBUILD: return static_cast<nvinfer1::IPluginV3OneBuild*>(this);
    case nvinfer1::PluginCapabilityType::kRUNTIME: return static_cast<nvinfer1::IPluginV3OneRuntime*>(this);
    }
    return nullptr;
}

nvinfer1::IPluginV3* DynamicResizePlugin::clone() noexcept
{
    try
    {
        return new DynamicResizePlugin(mLayerName);
    }
    catch (std::exception const& e)
    {
        logLayerError(std::string("clone failed: ") + e.what());
    }
    return nullptr;
}

char const* DynamicResizePlugin::getPluginName() const noexcept
{
    return kNAME;
}

char const* DynamicResizePlugin::getPluginVersion() const noexcept
{
    return kPLUGIN_VERSION;
}

char const* DynamicResizePlugin::getPluginNamespace() const noexcept
{
    return kPLUGIN_NAMESPACE;
}

bool DynamicResizePlugin::checkInputCount(int32_t nbInputs, int32_t nbOutputs, char const* method) const
{
    if ((nbInputs != 1 && nbInputs != 2) || nbOutputs != 1)
    {
        logLayerError(std::string(method)
            + ": expects X (optionally followed by the size shape tensor) and 1 "
              "output, got "
            + std::to_string(nbInputs) + " input(s) and " + std::to_string(nbOutputs) + " output(s)");
        return false;
    }
    return true;
}

bool DynamicResizePlugin::checkIO(
    Dims const& in, DataType inType, Dims const& out, DataType outType, DataType const* sizeType) const
{
    if (sizeType != nullptr && !isShapeIntType(*sizeType))
    {
        logLayerError(
            std::string("the second input must be the INT32/INT64 size shape tensor, got ") + dataTypeName(*sizeType));
        return false;
    }
    if (in.nbDims != 4 || out.nbDims != 4)
    {
        logLayerError("X and Y must be 4-D NCHW, got X " + dimsToString(in) + ", Y " + dimsToString(out));
        return false;
    }
    if (!isSupportedFloatType(inType) || outType != inType)
    {
        logLayerError(std::string("X and Y must both be FP32 or both FP16, got ") + dataTypeName(inType) + " and "
            + dataTypeName(outType));
        return false;
    }
    for (int32_t i = 0; i < 4; ++i)
    {
        if (in.d[i] > kINT_MAX || out.d[i] > kINT_MAX)
        {
            logLayerError("dimensions must fit in int32, got X " + dimsToString(in) + ", Y " + dimsToString(out));
            return false;
        }
    }
    // Run-time (and build-time known) output sizes must be positive; -1 means "not known yet".
    for (int32_t i = 2; i < 4; ++i)
    {
        if (out.d[i] == 0 || out.d[i] < -1)
        {
            logLayerError("output size must be positive, got Y " + dimsToString(out));
            return false;
        }
        if (in.d[i] == 0)
        {
            logLayerError("input height/width must be positive, got X " + dimsToString(in));
            return false;
        }
    }
    return true;
}

int32_t DynamicResizePlugin::configurePlugin(
    DynamicPluginTensorDesc const* in, int32_t nbInputs, DynamicPluginTensorDesc const* out, int32_t nbOutputs) noexcept
{
    if (in == nullptr || out == nullptr || !checkInputCount(nbInputs, nbOutputs, "configurePlugin"))
    {
        return 1;
    }
    DataType const* sizeType = nbInputs == 2 ? &in[1].desc.type : nullptr;
    return checkIO(in[0].desc.dims, in[0].desc.type, out[0].desc.dims, out[0].desc.type, sizeType) ? 0 : 1;
}

int32_t DynamicResizePlugin::getOutputDataTypes(
    DataType* outputTypes, int32_t nbOutputs, DataType const* inputTypes, int32_t nbInputs) const noexcept
{
    if (outputTypes == nullptr || inputTypes == nullptr || !checkInputCount(nbInputs, nbOutputs, "getOutputDataTypes"))
    {
        return 1;
    }
    if (!isSupportedFloatType(inputTypes[0]))
    {
        logLayerError(std::string("X must be FP32 or FP16, got ") + dataTypeName(inputTypes[0]));
        return 1;
    }
    if (nbInputs == 2 && !isShapeIntType(inputTypes[1]))
    {
        logLayerError(std::string("the second input must be the INT32/INT64 size shape tensor, got ")
            + dataTypeName(inputTypes[1]));
        return 1;
    }
    outputTypes[0] = inputTypes[0];
    return 0;
}

int32_t DynamicResizePlugin::getOutputShapes(DimsExprs const* inputs, int32_t nbInputs, DimsExprs const* shapeInputs,
    int32_t nbShapeInputs, DimsExprs* outputs, int32_t nbOutputs, nvinfer1::IExprBuilder& /*exprBuilder*/) noexcept
{
    if ((nbInputs != 1 && nbInputs != 2) || nbShapeInputs != 1 || nbOutputs != 1)
    {
        logLayerError("expects X as the only tensor input and 'size' as a shape input (ONNX "
                      "attribute tensorrt_plugin_shape_input_indices=[1]); got "
            + std::to_string(nbInputs) + " tensor input(s) and " + std::to_string(nbShapeInputs) + " shape input(s)");
        return 1;
    }
    if (inputs[0].nbDims != 4)
    {
        logLayerError("X must be 4-D NCHW, got rank " + std::to_string(inputs[0].nbDims));
        return 1;
    }
    // The shape input's "dims" are its values: [H_out, W_out].
    if (shapeInputs[0].nbDims != 2)
    {
        logLayerError("size must hold 2 values (H_out, W_out), got " + std::to_string(shapeInputs[0].nbDims));
        return 1;
    }
    for (int32_t i = 0; i < 2; ++i)
    {
        nvinfer1::IDimensionExpr const* v = shapeInputs[0].d[i];
        if (v == nullptr || (v->isConstant() && v->getConstantValue() < 1))
        {
            logLayerError("size values must be positive");
            return 1;
        }
    }
    outputs[0].nbDims = 4;
    outputs[0].d[0] = inputs[0].d[0];
    outputs[0].d[1] = inputs[0].d[1];
    outputs[0].d[2] = shapeInputs[0].d[0];
    outputs[0].d[3] = shapeInputs[0].d[1];
    return 0;
}

bool DynamicResizePlugin::supportsFormatCombination(
    int32_t pos, DynamicPluginTensorDesc const* inOut, int32_t nbInputs, int32_t nbOutputs) noexcept
{
    if (inOut == nullptr || (nbInputs != 1 && nbInputs != 2) || nbOutputs != 1 || pos < 0 || pos > nbInputs)
    {
        return false;
    }
    PluginTensorDesc const& d = inOut[pos].desc;
    if (nbInputs == 2 && pos == 1)
    {
        return isShapeIntType(d.type); // the size shape tensor, counted as an input: its values are read on the host
    }
    if (d.format != TensorFormat::kLINEAR)
    {
        return false;
    }
    // pos 0 = X picks the type; the output (last position) must match it.
    return pos == 0 ? isSupportedFloatType(d.type) : d.type == inOut[0].desc.type;
}

int32_t DynamicResizePlugin::getNbOutputs() const noexcept
{
    return 1;
}

size_t DynamicResizePlugin::getWorkspaceSize(DynamicPluginTensorDesc const* /*inputs*/, int32_t /*nbInputs*/,
    DynamicPluginTensorDesc const* /*outputs*/, int32_t /*nbOutputs*/) const noexcept
{
    return 0; // one pass, straight from X to Y
}

char const* DynamicResizePlugin::getTimingCacheID() noexcept
{
    // No attributes: I/O shapes and formats (which TensorRT adds itself) identify the timing.
    return "sr.DynamicResize.1";
}

int32_t DynamicResizePlugin::onShapeChange(
    PluginTensorDesc const* in, int32_t nbInputs, PluginTensorDesc const* out, int32_t nbOutputs) noexcept
{
    if (in == nullptr || out == nullptr || !checkInputCount(nbInputs, nbOutputs, "onShapeChange"))
    {
        return 1;
    }
    DataType const* sizeType = nbInputs == 2 ? &in[1].type : nullptr;
    return checkIO(in[0].dims, in[0].type, out[0].dims, out[0].type, sizeType) ? 0 : 1;
}

int32_t DynamicResizePlugin::enqueue(PluginTensorDesc const* inputDesc, PluginTensorDesc const* outputDesc,
    void const* const* inputs, void* const* outputs, void* /*workspace*/, cudaStream_t stream) noexcept
{
    Dims const& in = inputDesc[0].dims;
    Dims const& out = outputDesc[0].dims;
    int const n = static_cast<int>(in.d[0]);
    int const c = static_cast<int>(in.d[1]);
    int const hIn = static_cast<int>(in.d[2]);
    int const wIn = static_cast<int>(in.d[3]);
    int const hOut = static_cast<int>(out.d[2]);
    int const wOut = static_cast<int>(out.d[3]);
    if (n == 0 || c == 0)
    {
        return 0; // empty batch: nothing to write
    }
    std::string const& who = mLogPrefix;
    cudaError_t const pending = takePendingCudaError(who);
    cudaError_t status = cudaSuccess;
    switch (inputDesc[0].type)
    {
    case DataType::kFLOAT:
        status = launchDynamicResize<float>(
            static_cast<float const*>(inputs[0]), static_cast<float*>(outputs[0]), n, c, hIn, wIn, hOut, wOut, stream);
        break;
    case DataType::kHALF:
        status = launchDynamicResize<__half>(static_cast<__half const*>(inputs[0]), static_cast<__half*>(outputs[0]), n,
            c, hIn, wIn, hOut, wOut, stream);
        break;
    default: logLayerError(std::string("enqueue got unsupported type ") + dataTypeName(inputDesc[0].type)); return 1;
    }
    return reportLaunch(who, pending, status);
}

nvinfer1::IPluginV3* DynamicResizePlugin::attachToContext(nvinfer1::IPluginResourceContext* /*context*/) noexcept
{
    return clone(); // no per-context resources
}

nvinfer1::PluginFieldCollection const* DynamicResizePlugin::getFieldsToSerialize() noexcept
{
    mSerialized.clear(); // the op has no attributes
    return mSerialized.collection();
}

char const* DynamicResizePluginCreator::getPluginName() const noexcept
{
    return DynamicResizePlugin::kNAME;
}

char const* DynamicResizePluginCreator::getPluginVersion() const noexcept
{
    return kPLUGIN_VERSION;
}

char const* DynamicResizePluginCreator::getPluginNamespace() const noexcept
{
    return kPLUGIN_NAMESPACE;
}

nvinfer1::PluginFieldCollection const* DynamicResizePluginCreator::getFieldNames() noexcept
{
    return &mFieldNames; // no attributes
}

nvinfer1::IPluginV3* DynamicResizePluginCreator::createPlugin(
    char const* name, nvinfer1::PluginFieldCollection const* /*fc*/, nvinfer1::TensorRTPhase /*phase*/) noexcept
{
    // Every field is ignored: the op has no attributes and the ONNX parser may pass its own bookkeeping fields.
    try
    {
        return new DynamicResizePlugin(name != nullptr ? name : "");
    }
    catch (std::exception const& e)
    {
        logError(std::string(DynamicResizePlugin::kNAME) + ": createPlugin failed: " + e.what());
    }
    return nullptr;
}

} // namespace plugin
} // namespace sr
