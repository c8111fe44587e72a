// TensorRT IPluginV3 for sr::DeformConv2d: deformable convolution with the attributes and input order of ONNX
// DeformConv (torchvision deform_conv2d semantics). See plugins_trt/deformConv2d/README.md.
#pragma once

#include "common/pluginCommon.h"
#include "deformConv2d/deformConv2dKernel.h"

#include <NvInferRuntime.h>
#include <cublas_v2.h>

#include <cstdint>
#include <string>

namespace sr
{
namespace plugin
{

// Attributes exactly as ONNX DeformConv; defaults are the ONNX defaults.
struct DeformConv2dParams
{
    int32_t strides[2] {1, 1};
    int32_t pads[4] {0, 0, 0, 0}; // top, left, bottom, right
    int32_t dilations[2] {1, 1};
    int32_t group {1};
    int32_t offsetGroup {1};
    int32_t kernelShape[2] {0, 0}; // 0 = not given: taken from W
    bool hasKernelShape {false};
    // Not an ONNX attribute: 1 lets FP32 GEMMs use TF32 tensor-op math (the engine stage's --tf32 sets it on the
    // node). Default 0, so FP32 engines stay FP32-accurate.
    int32_t allowTf32 {0};
    // Not an ONNX attribute: which implementation runs (DeformConvImpl: 0 = fused kernel, no workspace; 1 = im2col +
    // cuBLAS). When the field is absent at build time, SR_DEFORM_CONV2D_IMPL decides (createPlugin); serialized always.
    int32_t impl {kDeformConvFused};
    bool hasImpl {false};
};

// Parses and validates the attributes; logs the first problem and returns false on bad input.
bool parseDeformConv2dParams(nvinfer1::PluginFieldCollection const* fc, DeformConv2dParams& params);

class DeformConv2dPlugin final : public nvinfer1::IPluginV3,
                                 public nvinfer1::IPluginV3OneCore,
                                 public nvinfer1::IPluginV3OneBuild,
                                 public nvinfer1::IPluginV3OneRuntime
{
public:
    static constexpr char const* kNAME = "DeformConv2d";

    DeformConv2dPlugin(std::string layerName, DeformConv2dParams const& params);
    ~DeformConv2dPlugin() override;
    DeformConv2dPlugin(DeformConv2dPlugin const&) = delete;
    DeformConv2dPlugin& operator=(DeformConv2dPlugin const&) = delete;

    DeformConv2dParams const& params() const noexcept
    {
        return mParams;
    }

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
    char const* getMetadataString() noexcept override;

    // IPluginV3OneRuntime
    int32_t onShapeChange(nvinfer1::PluginTensorDesc const* in, int32_t nbInputs, nvinfer1::PluginTensorDesc const* out,
        int32_t nbOutputs) noexcept override;
    int32_t enqueue(nvinfer1::PluginTensorDesc const* inputDesc, nvinfer1::PluginTensorDesc const* outputDesc,
        void const* const* inputs, void* const* outputs, void* workspace, cudaStream_t stream) noexcept override;
    nvinfer1::IPluginV3* attachToContext(nvinfer1::IPluginResourceContext* context) noexcept override;
    nvinfer1::PluginFieldCollection const* getFieldsToSerialize() noexcept override;

private:
    // dims[i] / types[i] for the nbInputs inputs followed by the output; -1 dims are "unknown" (build time).
    bool checkIO(
        nvinfer1::Dims const* dims, nvinfer1::DataType const* types, int32_t nbInputs, int32_t nbOutputs) const;
    // Kernel-library shape from concrete (or upper-bound) dims.
    DeformConvShape makeShape(nvinfer1::Dims const* inDims, nvinfer1::Dims const& outDims, int32_t nbInputs) const;
    bool ensureCublas() noexcept;
    std::string prefix() const;

    std::string mLayerName;
    std::string mLogPrefix; // "DeformConv2d 'name': ", built once so enqueue formats nothing on success
    DeformConv2dParams mParams;
    int32_t mNbInputs {-1};           // 3 = X,W,offset; 4 = +B; 5 = +B,mask. Set by configurePlugin/onShapeChange.
    cublasHandle_t mCublas {nullptr}; // owned; one per plugin instance attached to a context
    SerializedFields mSerialized;
    std::string mTimingId;
};

class DeformConv2dPluginCreator final : public nvinfer1::IPluginCreatorV3One
{
public:
    DeformConv2dPluginCreator();
    ~DeformConv2dPluginCreator() override = default;

    char const* getPluginName() const noexcept override;
    char const* getPluginVersion() const noexcept override;
    char const* getPluginNamespace() const noexcept override;
    nvinfer1::PluginFieldCollection const* getFieldNames() noexcept override;
    nvinfer1::IPluginV3* createPlugin(
        char const* name, nvinfer1::PluginFieldCollection const* fc, nvinfer1::TensorRTPhase phase) noexcept override;

private:
    std::vector<nvinfer1::PluginField> mFields;
    nvinfer1::PluginFieldCollection mFieldNames {};
};

} // namespace plugin
} // namespace sr
