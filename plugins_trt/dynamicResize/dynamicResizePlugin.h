// TensorRT IPluginV3 for sr::DynamicResize: bicubic resize (torch F.interpolate, align_corners=False, A=-0.75) of an
// NCHW tensor to a run-time size given by a shape input. See plugins_trt/dynamicResize/README.md.
#pragma once

#include "common/pluginCommon.h"

#include <NvInferRuntime.h>

#include <string>

namespace sr
{
namespace plugin
{

class DynamicResizePlugin final : public nvinfer1::IPluginV3,
                                  public nvinfer1::IPluginV3OneCore,
                                  public nvinfer1::IPluginV3OneBuild,
                                  public nvinfer1::IPluginV3OneRuntime
{
public:
    static constexpr char const* kNAME = "DynamicResize";

    explicit DynamicResizePlugin(std::string layerName);
    ~DynamicResizePlugin() override = default;

    // IPluginV3
    nvinfer1::IPluginCapability* getCapabilityInterface(nvinfer1::PluginCapabilityType type) noexcept override;
    nvinfer1::IPluginV3* clone() noexcept override;

    // IPluginV3OneCore
    char const* getPluginName() const noexcept override;
    char const* getPluginVersion() const noexcept override;
    char const* getPluginNamespace() const noexcept override;

    // IPluginV3OneBuild
    int32_t configurePlugin(nvinfer1::DynamicPluginTensorDesc const* in, int32_t nbInputs,
        nvinfer1::DynamicPluginTensorDesc const* out, int32_t nbOutputs) noexcept override;
    int32_t getOutputDataTypes(nvinfer1::DataType* outputTypes, int32_t nbOutputs, nvinfer1::DataType const* inputTypes,
        int32_t nbInputs) const noexcept override;
    int32_t getOutputShapes(nvinfer1::DimsExprs const* inputs, int32_t nbInputs, nvinfer1::DimsExprs const* shapeInputs,
        int32_t nbShapeInputs, nvinfer1::DimsExprs* outputs, int32_t nbOutputs,
        nvinfer1::IExprBuilder& exprBuilder) noexcept override;
    bool supportsFormatCombination(int32_t pos, nvinfer1::DynamicPluginTensorDesc const* inOut, int32_t nbInputs,
        int32_t nbOutputs) noexcept override;
    int32_t getNbOutputs() const noexcept override;
    size_t getWorkspaceSize(nvinfer1::DynamicPluginTensorDesc const* inputs, int32_t nbInputs,
        nvinfer1::DynamicPluginTensorDesc const* outputs, int32_t nbOutputs) const noexcept override;
    char const* getTimingCacheID() noexcept override;

    // IPluginV3OneRuntime
    int32_t onShapeChange(nvinfer1::PluginTensorDesc const* in, int32_t nbInputs, nvinfer1::PluginTensorDesc const* out,
        int32_t nbOutputs) noexcept override;
    int32_t enqueue(nvinfer1::PluginTensorDesc const* inputDesc, nvinfer1::PluginTensorDesc const* outputDesc,
        void const* const* inputs, void* const* outputs, void* workspace, cudaStream_t stream) noexcept override;
    nvinfer1::IPluginV3* attachToContext(nvinfer1::IPluginResourceContext* context) noexcept override;
    nvinfer1::PluginFieldCollection const* getFieldsToSerialize() noexcept override;

private:
    // TensorRT's headers do not say whether the `size` shape input is counted in nbInputs of the tensor-description
    // methods, so both layouts are accepted: 1 input (X) or 2 (X, then the INT32/INT64 size tensor, ignored).
    bool checkInputCount(int32_t nbInputs, int32_t nbOutputs, char const* method) const;
    // Shared by configurePlugin (build-time dims, -1 = unknown) and onShapeChange (concrete dims). sizeType is the
    // type of the counted size input (layout 2), or nullptr in layout 1.
    bool checkIO(nvinfer1::Dims const& in, nvinfer1::DataType inType, nvinfer1::Dims const& out,
        nvinfer1::DataType outType, nvinfer1::DataType const* sizeType) const;

    std::string mLayerName;
    std::string mLogPrefix; // "DynamicResize 'name': ", built once so enqueue formats nothing on success
    // Every error this layer logs: logError(mLogPrefix + message), the one place the prefix is added.
    void logLayerError(std::string const& message) const noexcept;
    SerializedFields mSerialized;
};

class DynamicResizePluginCreator final : public nvinfer1::IPluginCreatorV3One
{
public:
    DynamicResizePluginCreator() = default;
    ~DynamicResizePluginCreator() override = default;

    char const* getPluginName() const noexcept override;
    char const* getPluginVersion() const noexcept override;
    char const* getPluginNamespace() const noexcept override;
    nvinfer1::PluginFieldCollection const* getFieldNames() noexcept override;
    nvinfer1::IPluginV3* createPlugin(
        char const* name, nvinfer1::PluginFieldCollection const* fc, nvinfer1::TensorRTPhase phase) noexcept override;

private:
    nvinfer1::PluginFieldCollection mFieldNames {};
};

} // namespace plugin
} // namespace sr
