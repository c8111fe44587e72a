#include "deformConv2d/deformConv2dPlugin.h"

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <exception>
#include <limits>
#include <sstream>
#include <utility>

using nvinfer1::DataType;
using nvinfer1::DimensionOperation;
using nvinfer1::Dims;
using nvinfer1::DimsExprs;
using nvinfer1::DynamicPluginTensorDesc;
using nvinfer1::IDimensionExpr;
using nvinfer1::PluginField;
using nvinfer1::PluginFieldType;
using nvinfer1::PluginTensorDesc;
using nvinfer1::TensorFormat;

namespace sr
{
namespace plugin
{

namespace
{
constexpr int64_t kINT_MAX = std::numeric_limits<int32_t>::max();
// Limits for the spatial attributes: far above any real network, small enough that no product overflows int32.
constexpr int64_t kMAX_SPATIAL = 65535;
constexpr int64_t kMAX_GROUPS = 65535;

constexpr int32_t kX = 0;
constexpr int32_t kW = 1;
constexpr int32_t kOFFSET = 2;
constexpr int32_t kB = 3;
constexpr int32_t kMASK = 4;

bool known(int64_t d)
{
    return d >= 0;
}

// For build-time checks: equal, or at least one side not known yet.
bool sameOrUnknown(int64_t a, int64_t b)
{
    return !known(a) || !known(b) || a == b;
}

bool sameDims(Dims const& a, Dims const& b)
{
    if (a.nbDims != b.nbDims)
    {
        return false;
    }
    for (int32_t i = 0; i < a.nbDims; ++i)
    {
        if (a.d[i] != b.d[i])
        {
            return false;
        }
    }
    return true;
}

bool readPair(nvinfer1::PluginFieldCollection const* fc, char const* name, int32_t length, int64_t lo, int64_t hi,
    int32_t* dst, bool* present = nullptr)
{
    FieldReader reader(DeformConv2dPlugin::kNAME, fc);
    std::vector<int64_t> values;
    bool isPresent = false;
    if (!reader.readInts(name, length, values, isPresent))
    {
        return false;
    }
    if (present != nullptr)
    {
        *present = isPresent;
    }
    if (!isPresent)
    {
        return true;
    }
    if (!checkRange(DeformConv2dPlugin::kNAME, name, values, lo, hi))
    {
        return false;
    }
    for (int32_t i = 0; i < length; ++i)
    {
        dst[i] = static_cast<int32_t>(values[i]);
    }
    return true;
}
} // namespace

bool parseDeformConv2dParams(nvinfer1::PluginFieldCollection const* fc, DeformConv2dParams& params)
{
    DeformConv2dParams p;
    bool hasKernel = false;
    bool hasImpl = false;
    if (!readPair(fc, "strides", 2, 1, kMAX_SPATIAL, p.strides) || !readPair(fc, "pads", 4, 0, kMAX_SPATIAL, p.pads)
        || !readPair(fc, "dilations", 2, 1, kMAX_SPATIAL, p.dilations)
        || !readPair(fc, "group", 1, 1, kMAX_GROUPS, &p.group)
        || !readPair(fc, "offset_group", 1, 1, kMAX_GROUPS, &p.offsetGroup)
        || !readPair(fc, "kernel_shape", 2, 1, kMAX_SPATIAL, p.kernelShape, &hasKernel)
        || !readPair(fc, "allow_tf32", 1, 0, 1, &p.allowTf32)
        || !readPair(fc, "impl", 1, kDeformConvFused, kDeformConvIm2col, &p.impl, &hasImpl))
    {
        return false;
    }
    p.hasKernelShape = hasKernel;
    p.hasImpl = hasImpl;
    params = p;
    return true;
}

DeformConv2dPlugin::DeformConv2dPlugin(std::string layerName, DeformConv2dParams const& params)
    : mLayerName(std::move(layerName))
    , mLogPrefix(std::string(kNAME) + " '" + mLayerName + "': ")
    , mParams(params)
{
    std::ostringstream os;
    os << "sr.DeformConv2d.1;strides=" << mParams.strides[0] << "," << mParams.strides[1] << ";pads=" << mParams.pads[0]
       << "," << mParams.pads[1] << "," << mParams.pads[2] << "," << mParams.pads[3]
       << ";dilations=" << mParams.dilations[0] << "," << mParams.dilations[1] << ";group=" << mParams.group
       << ";offset_group=" << mParams.offsetGroup << ";allow_tf32=" << mParams.allowTf32 << ";impl=" << mParams.impl;
    if (mParams.hasKernelShape)
    {
        os << ";kernel_shape=" << mParams.kernelShape[0] << "," << mParams.kernelShape[1];
    }
    mTimingId = os.str();
}

DeformConv2dPlugin::~DeformConv2dPlugin()
{
    if (mCublas != nullptr)
    {
        cublasDestroy(mCublas);
        mCublas = nullptr;
    }
}

std::string DeformConv2dPlugin::prefix() const
{
    return mLogPrefix;
}

nvinfer1::IPluginCapability* DeformConv2dPlugin::getCapabilityInterface(nvinfer1::PluginCapabilityType type) noexcept
{
    switch (type)
    {
    case nvinfer1::PluginCapabilityType::kCORE: return static_cast<nvinfer1::IPluginV3OneCore*>(this);
    case nvinfer1::PluginCapabilityType::kBUILD: return static_cast<nvinfer1::IPluginV3OneBuild*>(this);
    case nvinfer1::PluginCapabilityType::kRUNTIME: return static_cast<nvinfer1::IPluginV3OneRuntime*>(this);
    }
    return nullptr;
}

nvinfer1::IPluginV3* DeformConv2dPlugin::clone() noexcept
{
    try
    {
        // Deep copy of the attributes and the configured input count; the cuBLAS handle is per instance and is
        // created again in attachToContext/onShapeChange of the copy.
        auto* p = new DeformConv2dPlugin(mLayerName, mParams);
        p->mNbInputs = mNbInputs;
        return p;
    }
    catch (std::exception const& e)
    {
        logError(prefix() + "clone failed: " + e.what());
    }
    return nullptr;
}

char const* DeformConv2dPlugin::getPluginName() const noexcept
{
    return kNAME;
}

char const* DeformConv2dPlugin::getPluginVersion() const noexcept
{
    return kPLUGIN_VERSION;
}

char const* DeformConv2dPlugin::getPluginNamespace() const noexcept
{
    return kPLUGIN_NAMESPACE;
}

bool DeformConv2dPlugin::checkIO(Dims const* dims, DataType const* types, int32_t nbInputs, int32_t nbOutputs) const
{
    if (nbInputs < 3 || nbInputs > 5 || nbOutputs != 1)
    {
        logError(prefix() + "expects 3 to 5 inputs (X, W, offset[, B[, mask]]) and 1 output, got "
            + std::to_string(nbInputs) + " input(s) and " + std::to_string(nbOutputs) + " output(s)");
        return false;
    }
    int32_t const nb = nbInputs + 1;
    for (int32_t i = 0; i < nb; ++i)
    {
        if (!isSupportedFloatType(types[i]) || types[i] != types[0])
        {
            logError(prefix() + "all inputs and the output must be FP32, or all FP16; tensor " + std::to_string(i)
                + " is " + dataTypeName(types[i]) + ", X is " + dataTypeName(types[0]));
            return false;
        }
        int32_t const rank = i == kB && nbInputs >= 4 ? 1 : 4;
        if (dims[i].nbDims != rank)
        {
            logError(prefix() + "tensor " + std::to_string(i) + " must have rank " + std::to_string(rank) + ", got "
                + dimsToString(dims[i]));
            return false;
        }
        for (int32_t j = 0; j < dims[i].nbDims; ++j)
        {
            if (dims[i].d[j] > kINT_MAX)
            {
                logError(prefix() + "dimensions must fit in int32, got " + dimsToString(dims[i]));
                return false;
            }
        }
    }
    Dims const& x = dims[kX];
    Dims const& w = dims[kW];
    Dims const& off = dims[kOFFSET];
    Dims const& y = dims[nbInputs];
    int64_t const n = x.d[0];
    int64_t const c = x.d[1];
    int64_t const cOut = w.d[0];
    int64_t const kH = w.d[2];
    int64_t const kW = w.d[3];
    int64_t const og = mParams.offsetGroup;
    std::string const shapes = "X " + dimsToString(x) + ", W " + dimsToString(w) + ", offset " + dimsToString(off);

    if (known(c) && c % mParams.group != 0)
    {
        logError(prefix() + "input channels " + std::to_string(c) + " are not divisible by group "
            + std::to_string(mParams.group));
        return false;
    }
    if (known(cOut) && cOut % mParams.group != 0)
    {
        logError(prefix() + "output channels " + std::to_string(cOut) + " are not divisible by group "
            + std::to_string(mParams.group));
        return false;
    }
    if (known(c) && known(w.d[1]) && w.d[1] * mParams.group != c)
    {
        logError(prefix() + "W must have C/group channels: " + shapes);
        return false;
    }
    if (mParams.hasKernelShape
        && (!sameOrUnknown(kH, mParams.kernelShape[0]) || !sameOrUnknown(kW, mParams.kernelShape[1])))
    {
        logError(prefix() + "kernel_shape (" + std::to_string(mParams.kernelShape[0]) + ", "
            + std::to_string(mParams.kernelShape[1]) + ") does not match W " + dimsToString(w));
        return false;
    }
    if (known(c) && c % og != 0)
    {
        logError(prefix() + "input channels " + std::to_string(c) + " are not divisible by offset_group "
            + std::to_string(og));
        return false;
    }
    bool const offsetOk = sameOrUnknown(off.d[0], n) && sameOrUnknown(off.d[2], y.d[2])
        && sameOrUnknown(off.d[3], y.d[3]) && (!known(kH) || !known(kW) || sameOrUnknown(off.d[1], 2 * og * kH * kW));
    if (!offsetOk)
    {
        logError(
            prefix() + "offset must be [N, 2*offset_group*kH*kW, H_out, W_out]: " + shapes + ", Y " + dimsToString(y));
        return false;
    }
    if (nbInputs >= 4 && !sameOrUnknown(dims[kB].d[0], cOut))
    {
        logError(prefix() + "B must have C_out values: B " + dimsToString(dims[kB]) + ", W " + dimsToString(w));
        return false;
    }
    if (nbInputs == 5)
    {
        Dims const& m = dims[kMASK];
        bool const maskOk = sameOrUnknown(m.d[0], n) && sameOrUnknown(m.d[2], y.d[2]) && sameOrUnknown(m.d[3], y.d[3])
            && (!known(kH) || !known(kW) || sameOrUnknown(m.d[1], og * kH * kW));
        if (!maskOk)
        {
            logError(prefix() + "mask must be [N, offset_group*kH*kW, H_out, W_out]: mask " + dimsToString(m) + ", "
                + shapes);
            return false;
        }
    }
    if (!sameOrUnknown(y.d[0], n) || !sameOrUnknown(y.d[1], cOut))
    {
        logError(prefix() + "Y must be [N, C_out, H_out, W_out], got Y " + dimsToString(y) + " for " + shapes);
        return false;
    }
    return true;
}

int32_t DeformConv2dPlugin::configurePlugin(
    DynamicPluginTensorDesc const* in, int32_t nbInputs, DynamicPluginTensorDesc const* out, int32_t nbOutputs) noexcept
{
    if (in == nullptr || out == nullptr || nbInputs < 3 || nbInputs > 5 || nbOutputs != 1)
    {
        logError(prefix() + "configurePlugin: expects 3 to 5 inputs and 1 output, got " + std::to_string(nbInputs)
            + " and " + std::to_string(nbOutputs));
        return 1;
    }
    Dims dims[6];
    DataType types[6];
    for (int32_t i = 0; i < nbInputs; ++i)
    {
        dims[i] = in[i].desc.dims;
        types[i] = in[i].desc.type;
    }
    dims[nbInputs] = out[0].desc.dims;
    types[nbInputs] = out[0].desc.type;
    if (!checkIO(dims, types, nbInputs, nbOutputs))
    {
        return 1;
    }
    mNbInputs = nbInputs;
    return 0;
}

int32_t DeformConv2dPlugin::getOutputDataTypes(
    DataType* outputTypes, int32_t nbOutputs, DataType const* inputTypes, int32_t nbInputs) const noexcept
{
    if (outputTypes == nullptr || inputTypes == nullptr || nbOutputs != 1 || nbInputs < 3 || nbInputs > 5)
    {
        logError(prefix() + "expects 3 to 5 inputs and 1 output, got " + std::to_string(nbInputs) + " and "
            + std::to_string(nbOutputs));
        return 1;
    }
    for (int32_t i = 0; i < nbInputs; ++i)
    {
        if (!isSupportedFloatType(inputTypes[i]) || inputTypes[i] != inputTypes[0])
        {
            logError(prefix() + "all inputs must be FP32, or all FP16; input " + std::to_string(i) + " is "
                + dataTypeName(inputTypes[i]) + ", X is " + dataTypeName(inputTypes[0]));
            return 1;
        }
    }
    outputTypes[0] = inputTypes[0];
    return 0;
}

int32_t DeformConv2dPlugin::getOutputShapes(DimsExprs const* inputs, int32_t nbInputs, DimsExprs const* /*shapeInputs*/,
    int32_t nbShapeInputs, DimsExprs* outputs, int32_t nbOutputs, nvinfer1::IExprBuilder& exprBuilder) noexcept
{
    if (nbInputs < 3 || nbInputs > 5 || nbShapeInputs != 0 || nbOutputs != 1)
    {
        logError(prefix() + "expects 3 to 5 tensor inputs, no shape inputs and 1 output, got "
            + std::to_string(nbInputs) + ", " + std::to_string(nbShapeInputs) + " and " + std::to_string(nbOutputs));
        return 1;
    }
    if (inputs[kX].nbDims != 4 || inputs[kW].nbDims != 4)
    {
        logError(prefix() + "X and W must be 4-D");
        return 1;
    }
    IDimensionExpr const* one = exprBuilder.constant(1);
    if (one == nullptr)
    {
        logError(prefix() + "could not build output shape expressions");
        return 1;
    }
    outputs[0].nbDims = 4;
    outputs[0].d[0] = inputs[kX].d[0];
    outputs[0].d[1] = inputs[kW].d[0];
    for (int32_t axis = 0; axis < 2; ++axis)
    {
        // out = floor((in + pad_begin + pad_end - (dilation * (k - 1) + 1)) / stride) + 1
        IDimensionExpr const* k
            = mParams.hasKernelShape ? exprBuilder.constant(mParams.kernelShape[axis]) : inputs[kW].d[2 + axis];
        IDimensionExpr const* kMinus1 = exprBuilder.operation(DimensionOperation::kSUB, *k, *one);
        if (k == nullptr || kMinus1 == nullptr)
        {
            logError(prefix() + "could not build output shape expressions");
            return 1;
        }
        IDimensionExpr const* span = exprBuilder.operation(DimensionOperation::kSUM,
            *exprBuilder.operation(DimensionOperation::kPROD, *exprBuilder.constant(mParams.dilations[axis]), *kMinus1),
            *one);
        IDimensionExpr const* padded = exprBuilder.operation(DimensionOperation::kSUM, *inputs[kX].d[2 + axis],
            *exprBuilder.constant(static_cast<int64_t>(mParams.pads[axis]) + mParams.pads[axis + 2]));
        IDimensionExpr const* steps = exprBuilder.operation(DimensionOperation::kFLOOR_DIV,
            *exprBuilder.operation(DimensionOperation::kSUB, *padded, *span),
            *exprBuilder.constant(mParams.strides[axis]));
        outputs[0].d[2 + axis] = exprBuilder.operation(DimensionOperation::kSUM, *steps, *one);
        if (outputs[0].d[2 + axis] == nullptr)
        {
            logError(prefix() + "could not build output shape expressions");
            return 1;
        }
        if (outputs[0].d[2 + axis]->isConstant() && outputs[0].d[2 + axis]->getConstantValue() < 1)
        {
            logError(prefix() + "kernel (with dilation) is larger than the padded input");
            return 1;
        }
    }
    return 0;
}

bool DeformConv2dPlugin::supportsFormatCombination(
    int32_t pos, DynamicPluginTensorDesc const* inOut, int32_t nbInputs, int32_t nbOutputs) noexcept
{
    if (inOut == nullptr || nbInputs < 3 || nbInputs > 5 || nbOutputs != 1 || pos < 0 || pos > nbInputs)
    {
        return false;
    }
    PluginTensorDesc const& d = inOut[pos].desc;
    if (d.format != TensorFormat::kLINEAR)
    {
        return false;
    }
    // X chooses FP32 or FP16; every other input and the output follow it.
    return pos == 0 ? isSupportedFloatType(d.type) : d.type == inOut[0].desc.type;
}

int32_t DeformConv2dPlugin::getNbOutputs() const noexcept
{
    return 1;
}

DeformConvShape DeformConv2dPlugin::makeShape(Dims const* inDims, Dims const& outDims, int32_t nbInputs) const
{
    DeformConvShape s {};
    s.n = static_cast<int>(inDims[kX].d[0]);
    s.cIn = static_cast<int>(inDims[kX].d[1]);
    s.hIn = static_cast<int>(inDims[kX].d[2]);
    s.wIn = static_cast<int>(inDims[kX].d[3]);
    s.cOut = static_cast<int>(inDims[kW].d[0]);
    s.kH = static_cast<int>(inDims[kW].d[2]);
    s.kW = static_cast<int>(inDims[kW].d[3]);
    s.hOut = static_cast<int>(outDims.d[2]);
    s.wOut = static_cast<int>(outDims.d[3]);
    s.strideH = mParams.strides[0];
    s.strideW = mParams.strides[1];
    // The begin pads place the sampling grid; the end pads only change H_out/W_out, which come from outDims.
    s.padH = mParams.pads[0];
    s.padW = mParams.pads[1];
    s.dilH = mParams.dilations[0];
    s.dilW = mParams.dilations[1];
    s.group = mParams.group;
    s.offsetGroup = mParams.offsetGroup;
    s.hasBias = nbInputs >= 4;
    s.hasMask = nbInputs == 5;
    return s;
}

size_t DeformConv2dPlugin::getWorkspaceSize(DynamicPluginTensorDesc const* inputs, int32_t nbInputs,
    DynamicPluginTensorDesc const* outputs, int32_t nbOutputs) const noexcept
{
    if (inputs == nullptr || outputs == nullptr || nbInputs < 3 || nbInputs > 5 || nbOutputs != 1)
    {
        return 0;
    }
    Dims minDims[5];
    Dims maxDims[5];
    bool fixed = sameDims(outputs[0].min, outputs[0].max);
    for (int32_t i = 0; i < nbInputs; ++i)
    {
        minDims[i] = inputs[i].min;
        maxDims[i] = inputs[i].max;
        fixed = fixed && sameDims(minDims[i], maxDims[i]);
    }
    size_t const elemSize = inputs[kX].desc.type == DataType::kHALF ? sizeof(__half) : sizeof(float);
    DeformConvShape sMax = makeShape(maxDims, outputs[0].max, nbInputs);
    if (outputs[0].max.nbDims != 4 || outputs[0].max.d[2] < 1 || outputs[0].max.d[3] < 1)
    {
        // No output bounds given: the output extent grows with the input extent, so the input maxima bound it.
        sMax.hOut = convOutputSize(sMax.hIn, mParams.pads[0], mParams.pads[2], sMax.kH, sMax.dilH, sMax.strideH);
        sMax.wOut = convOutputSize(sMax.wIn, mParams.pads[1], mParams.pads[3], sMax.kW, sMax.dilW, sMax.strideW);
    }
    if (deformConv2dCheckShape(sMax) != nullptr)
    {
        return 0;
    }
    // One rule, shared with the CPU library's sr_deform_conv2d_min_workspace (the engine stage's --workspace check).
    // The fused kernel needs none; the im2col path its columns and cuBLAS slice.
    return deformConv2dProfileWorkspaceBytes(sMax, elemSize, fixed, mParams.impl);
}

char const* DeformConv2dPlugin::getTimingCacheID() noexcept
{
    return mTimingId.c_str();
}

char const* DeformConv2dPlugin::getMetadataString() noexcept
{
    return mTimingId.c_str();
}

bool DeformConv2dPlugin::ensureCublas() noexcept
{
    if (mCublas != nullptr || mParams.impl != kDeformConvIm2col) // only the im2col path calls cuBLAS
    {
        return true;
    }
    cublasStatus_t const status = cublasCreate(&mCublas);
    if (status != CUBLAS_STATUS_SUCCESS)
    {
        mCublas = nullptr;
        logError(prefix() + "cublasCreate failed: " + cublasGetStatusString(status));
        return false;
    }
    return true;
}

int32_t DeformConv2dPlugin::onShapeChange(
    PluginTensorDesc const* in, int32_t nbInputs, PluginTensorDesc const* out, int32_t nbOutputs) noexcept
{
    if (in == nullptr || out == nullptr || nbInputs < 3 || nbInputs > 5 || nbOutputs != 1)
    {
        logError(prefix() + "onShapeChange: expects 3 to 5 inputs and 1 output, got " + std::to_string(nbInputs)
            + " and " + std::to_string(nbOutputs));
        return 1;
    }
    Dims dims[6];
    DataType types[6];
    for (int32_t i = 0; i < nbInputs; ++i)
    {
        dims[i] = in[i].dims;
        types[i] = in[i].type;
    }
    dims[nbInputs] = out[0].dims;
    types[nbInputs] = out[0].type;
    if (!checkIO(dims, types, nbInputs, nbOutputs))
    {
        return 1;
    }
    mNbInputs = nbInputs;
    // Normally attachToContext already made the handle; this covers instances TensorRT runs without attaching.
    return ensureCublas() ? 0 : 1;
}

int32_t DeformConv2dPlugin::enqueue(PluginTensorDesc const* inputDesc, PluginTensorDesc const* outputDesc,
    void const* const* inputs, void* const* outputs, void* workspace, cudaStream_t stream) noexcept
{
    if (mNbInputs < 3 || mNbInputs > 5 || (mParams.impl == kDeformConvIm2col && mCublas == nullptr))
    {
        logError(prefix() + "enqueue before onShapeChange/attachToContext (no input count or cuBLAS handle)");
        return 1;
    }
    Dims dims[5];
    for (int32_t i = 0; i < mNbInputs; ++i)
    {
        dims[i] = inputDesc[i].dims;
    }
    DeformConvShape const s = makeShape(dims, outputDesc[0].dims, mNbInputs);
    if (s.n == 0 || s.cOut == 0 || s.hOut == 0 || s.wOut == 0)
    {
        return 0; // empty output
    }
    void const* bias = mNbInputs >= 4 ? inputs[kB] : nullptr;
    void const* mask = mNbInputs == 5 ? inputs[kMASK] : nullptr;
    DeformConvGemmOptions options;
    options.allowTf32 = mParams.allowTf32 != 0;
    options.impl = mParams.impl;
    cublasStatus_t gemmStatus = CUBLAS_STATUS_SUCCESS;
    std::string const& who = mLogPrefix;
    cudaError_t const pending = takePendingCudaError(who);
    cudaError_t status = cudaSuccess;
    switch (inputDesc[kX].type)
    {
    case DataType::kFLOAT:
        status = launchDeformConv2d<float>(s, static_cast<float const*>(inputs[kX]),
            static_cast<float const*>(inputs[kW]), static_cast<float const*>(inputs[kOFFSET]),
            static_cast<float const*>(mask), static_cast<float const*>(bias), static_cast<float*>(outputs[0]),
            workspace, mCublas, stream, options, &gemmStatus);
        break;
    case DataType::kHALF:
        status = launchDeformConv2d<__half>(s, static_cast<__half const*>(inputs[kX]),
            static_cast<__half const*>(inputs[kW]), static_cast<__half const*>(inputs[kOFFSET]),
            static_cast<__half const*>(mask), static_cast<__half const*>(bias), static_cast<__half*>(outputs[0]),
            workspace, mCublas, stream, options, &gemmStatus);
        break;
    default: logError(who + "enqueue got unsupported type " + dataTypeName(inputDesc[kX].type)); return 1;
    }
    char const* detail = gemmStatus != CUBLAS_STATUS_SUCCESS ? cublasGetStatusString(gemmStatus) : nullptr;
    return reportLaunch(who, pending, status, detail);
}

nvinfer1::IPluginV3* DeformConv2dPlugin::attachToContext(nvinfer1::IPluginResourceContext* /*context*/) noexcept
{
    // The resource context offers only an allocator and error recorder, so each attached copy owns its own handle.
    auto* p = static_cast<DeformConv2dPlugin*>(clone());
    if (p != nullptr && !p->ensureCublas())
    {
        delete p;
        return nullptr;
    }
    return p;
}

nvinfer1::PluginFieldCollection const* DeformConv2dPlugin::getFieldsToSerialize() noexcept
{
    try
    {
        mSerialized.clear();
        mSerialized.addInt32s("strides", mParams.strides, 2);
        mSerialized.addInt32s("pads", mParams.pads, 4);
        mSerialized.addInt32s("dilations", mParams.dilations, 2);
        mSerialized.addInt32s("group", &mParams.group, 1);
        mSerialized.addInt32s("offset_group", &mParams.offsetGroup, 1);
        if (mParams.hasKernelShape)
        {
            mSerialized.addInt32s("kernel_shape", mParams.kernelShape, 2);
        }
        mSerialized.addInt32s("allow_tf32", &mParams.allowTf32, 1);
        mSerialized.addInt32s("impl", &mParams.impl, 1);
        return mSerialized.collection();
    }
    catch (std::exception const& e)
    {
        logError(prefix() + "getFieldsToSerialize failed: " + e.what());
    }
    return nullptr;
}

DeformConv2dPluginCreator::DeformConv2dPluginCreator()
{
    mFields.emplace_back("strides", nullptr, PluginFieldType::kINT32, 2);
    mFields.emplace_back("pads", nullptr, PluginFieldType::kINT32, 4);
    mFields.emplace_back("dilations", nullptr, PluginFieldType::kINT32, 2);
    mFields.emplace_back("group", nullptr, PluginFieldType::kINT32, 1);
    mFields.emplace_back("offset_group", nullptr, PluginFieldType::kINT32, 1);
    mFields.emplace_back("kernel_shape", nullptr, PluginFieldType::kINT32, 2);
    mFields.emplace_back("allow_tf32", nullptr, PluginFieldType::kINT32, 1);
    mFields.emplace_back("impl", nullptr, PluginFieldType::kINT32, 1);
    mFieldNames.nbFields = static_cast<int32_t>(mFields.size());
    mFieldNames.fields = mFields.data();
}

char const* DeformConv2dPluginCreator::getPluginName() const noexcept
{
    return DeformConv2dPlugin::kNAME;
}

char const* DeformConv2dPluginCreator::getPluginVersion() const noexcept
{
    return kPLUGIN_VERSION;
}

char const* DeformConv2dPluginCreator::getPluginNamespace() const noexcept
{
    return kPLUGIN_NAMESPACE;
}

nvinfer1::PluginFieldCollection const* DeformConv2dPluginCreator::getFieldNames() noexcept
{
    return &mFieldNames;
}

nvinfer1::IPluginV3* DeformConv2dPluginCreator::createPlugin(
    char const* name, nvinfer1::PluginFieldCollection const* fc, nvinfer1::TensorRTPhase phase) noexcept
{
    try
    {
        DeformConv2dParams params;
        if (!parseDeformConv2dParams(fc, params))
        {
            logError(std::string(DeformConv2dPlugin::kNAME) + " '" + (name != nullptr ? name : "")
                + "': invalid attributes, plugin not created");
            return nullptr;
        }
        // A build without the field takes SR_DEFORM_CONV2D_IMPL (the engine is built once with that choice and its
        // workspace); a runtime plugin without it comes from an engine older than the field: fused needs no workspace.
        if (!params.hasImpl && phase == nvinfer1::TensorRTPhase::kBUILD)
        {
            int32_t const impl = deformConv2dImplFromEnv();
            if (impl < 0)
            {
                logError(std::string(DeformConv2dPlugin::kNAME) + " '" + (name != nullptr ? name : "")
                    + "': " + kDeformConvImplEnv + " must be 'fused' or 'im2col', plugin not created");
                return nullptr;
            }
            params.impl = impl;
        }
        return new DeformConv2dPlugin(name != nullptr ? name : "", params);
    }
    catch (std::exception const& e)
    {
        logError(std::string(DeformConv2dPlugin::kNAME) + ": createPlugin failed: " + e.what());
    }
    return nullptr;
}

} // namespace plugin
} // namespace sr
