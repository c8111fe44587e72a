// Host-side half of the GPU harness (trtPluginGpuHarness.cpp): the cases, the parser-style field collections, the
// seeded data, the CPU references (libsr_kernels_cpu) and the output comparison. Nothing here touches CUDA, so
// `trt_plugin_gpu_harness --host-only` runs all of it on a machine without a GPU (CI does).
#pragma once

#include "cpu/srKernelsCpu.h"
#include "deformConv2d/deformConv2dMath.h"
#include "tests/pluginTestSupport.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace srtest
{

// ---- Seeded data -------------------------------------------------------------------------------------------------
class Rng
{
public:
    explicit Rng(uint64_t seed)
        : mState(seed * 0x9E3779B97F4A7C15ull + 1)
    {
    }
    // Uniform in [lo, hi).
    float uniform(float lo, float hi)
    {
        mState ^= mState << 13;
        mState ^= mState >> 7;
        mState ^= mState << 17;
        return lo + (hi - lo) * static_cast<float>(mState >> 40) / static_cast<float>(1ull << 24);
    }
    std::vector<float> fill(size_t count, float lo, float hi)
    {
        std::vector<float> v(count);
        for (float& x : v)
        {
            x = uniform(lo, hi);
        }
        return v;
    }

private:
    uint64_t mState;
};

// ---- Parser-style fields: int attributes as kINT32 plus the ONNX parser's bookkeeping fields ----------------------
class ParserFields
{
public:
    // The ONNX parser passes every node attribute; these are the ones strip_sr_functions adds besides the op's own.
    explicit ParserFields(bool shapeInputIndex)
    {
        addText("plugin_namespace", "sr");
        addText("plugin_version", "1");
        if (shapeInputIndex)
        {
            addInts("tensorrt_plugin_shape_input_indices", {1});
        }
    }
    void addInts(char const* name, std::vector<int32_t> values)
    {
        mInts.push_back(std::move(values));
        mNames.emplace_back(name);
        mKinds.push_back(PluginFieldType::kINT32);
    }
    // The fields point into this object's storage: call after the last add, keep this object alive while in use.
    PluginFieldCollection const* collection()
    {
        mFields.clear();
        size_t ints = 0;
        size_t texts = 0;
        for (size_t i = 0; i < mNames.size(); ++i)
        {
            if (mKinds[i] == PluginFieldType::kINT32)
            {
                std::vector<int32_t> const& v = mInts[ints++];
                mFields.emplace_back(
                    mNames[i].c_str(), v.data(), PluginFieldType::kINT32, static_cast<int32_t>(v.size()));
            }
            else
            {
                std::string const& t = mTexts[texts++];
                mFields.emplace_back(
                    mNames[i].c_str(), t.c_str(), PluginFieldType::kCHAR, static_cast<int32_t>(t.size() + 1));
            }
        }
        mCollection.nbFields = static_cast<int32_t>(mFields.size());
        mCollection.fields = mFields.data();
        return &mCollection;
    }

private:
    void addText(char const* name, char const* text)
    {
        mTexts.emplace_back(text);
        mNames.emplace_back(name);
        mKinds.push_back(PluginFieldType::kCHAR);
    }

    std::vector<std::vector<int32_t>> mInts;
    std::vector<std::string> mTexts;
    std::vector<std::string> mNames;
    std::vector<PluginFieldType> mKinds;
    std::vector<PluginField> mFields;
    PluginFieldCollection mCollection {};
};

// ---- Cases ---------------------------------------------------------------------------------------------------------
struct ResizeShape
{
    int n, c, hIn, wIn, hOut, wOut;
    char const* what;
};

// Every shape runs on ONE attached plugin instance per (type, layout), one onShapeChange each, as TensorRT does when
// the input shape changes between inferences.
inline std::vector<ResizeShape> resizeShapes()
{
    return {{2, 3, 7, 5, 21, 15, "up x3"}, {1, 3, 32, 24, 9, 7, "down"}, {2, 3, 10, 10, 25, 17, "non-integer 2.5/1.7"},
        {1, 3, 1, 1, 5, 4, "1-pixel input"}, {1, 3, 6, 6, 1, 1, "1-pixel output"},
        {1, 3, 256, 256, 768, 768, "256^2 -> 768^2"}};
}

struct DeformShape
{
    int n, h, w;
};

struct DeformGroup
{
    std::string name;
    int c, cOut, k;
    int strides[2];
    int pads[4];
    int dilations[2];
    int group, offsetGroup;
    bool kernelShapeAttr; // the parser passes kernel_shape when the node has it (our exporters write it)
    int nbInputs;         // 3: no bias/mask; 4: bias; 5: bias + mask
    bool zeroBias;        // mask without bias: the exporter passes a zero bias
    bool allowTf32;
    std::vector<DeformShape> shapes; // all on one attached instance
    float offsetRange {2.0F};        // offsets uniform in [-offsetRange, offsetRange]
    bool im2colOnly {false};         // the im2col path's chunking cases: large, and nothing new for the fused kernel
};

inline std::vector<DeformGroup> deformGroups()
{
    std::vector<DeformGroup> g;
    g.push_back({"bias+mask, 3x3 pad 1", 8, 8, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1, 1, true, 5, false, false,
        {{2, 9, 10}, {1, 5, 7}, {3, 16, 12}}});
    g.push_back({"group 2, offset_group 2, bias, no mask", 8, 6, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}, 2, 2, false, 4, false,
        false, {{2, 9, 10}, {1, 12, 12}}});
    g.push_back({"stride 2,1 pads 1,2,1,2 dilation 1,2, offset_group 4, no bias/mask", 8, 4, 3, {2, 1}, {1, 2, 1, 2},
        {1, 2}, 1, 4, true, 3, false, false, {{2, 9, 10}, {1, 17, 13}}});
    g.push_back({"mask, zero bias (bias off), offset_group 2", 8, 8, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1, 2, true, 5,
        true, false, {{1, 11, 9}}});
    // 64 channels x 3x3 taps: one 128^2 image is 37.7 MB of FP32 columns (18.9 MB FP16), so a batch of 5 spans several
    // chunks of the 64 MiB column budget, and one 300^2 image (207 MB FP32) is cut into row bands.
    // (im2col only: the fused kernel has no chunks, and these sizes would make compute-sanitizer's racecheck slow.)
    g.push_back({"64 ch: batch over several chunks, image over the column budget", 64, 32, 3, {1, 1}, {1, 1, 1, 1},
        {1, 1}, 1, 1, true, 5, false, false, {{5, 128, 128}, {1, 300, 300}}, 2.0F, true});
    g.push_back({"deform-srcnn's layer: 64 -> 32 ch, offset_group 2", 64, 32, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1, 2,
        true, 5, false, false, {{2, 33, 40}}});
    g.push_back({"bias+mask, FP32 GEMMs with allow_tf32=1", 8, 8, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1, 1, true, 5, false,
        true, {{2, 9, 10}}});
    // Tile edges of the fused kernel (32 output channels x 64 positions x 32 channels of one tap per step): channels
    // not divisible by the tile, offset groups changing inside a channel step, odd sizes whose positions cross image
    // boundaries inside a tile, more than one output-channel tile, tiny problems, many groups.
    g.push_back({"tile edges: 40 -> 40 ch, offset_group 5, odd sizes", 40, 40, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1, 5,
        true, 5, false, false, {{3, 13, 17}, {1, 7, 5}}});
    g.push_back({"tile edges: 33 -> 70 ch, 5x5, stride 2, no bias/mask", 33, 70, 5, {2, 2}, {2, 2, 2, 2}, {1, 1}, 1, 3,
        true, 3, false, false, {{2, 15, 11}}});
    g.push_back({"tile edges: group 2 (6 -> 5 ch each), offset_group 3 across groups, stride 2 dilation 2", 12, 10, 3,
        {2, 2}, {2, 2, 2, 2}, {2, 2}, 2, 3, true, 4, false, false, {{2, 11, 7}}});
    g.push_back({"tile edges: group 8 (2 -> 2 ch each), 1x1 kernel", 16, 16, 1, {1, 1}, {0, 0, 0, 0}, {1, 1}, 8, 4,
        true, 5, false, false, {{2, 5, 9}}});
    g.push_back({"tile edges: 3 -> 1 ch, 1x1 and 2x3 inputs, pad 1", 3, 1, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1, 1, true,
        5, false, false, {{1, 1, 1}, {2, 2, 3}}});
    g.push_back({"offsets far outside the image (up to 12 px)", 8, 8, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1, 2, true, 5,
        false, false, {{2, 9, 10}}, 12.0F});
    return g;
}

inline int deformOutH(DeformGroup const& g, int h)
{
    return sr::convOutputSize(h, g.pads[0], g.pads[2], g.k, g.dilations[0], g.strides[0]);
}

inline int deformOutW(DeformGroup const& g, int w)
{
    return sr::convOutputSize(w, g.pads[1], g.pads[3], g.k, g.dilations[1], g.strides[1]);
}

inline void addDeformAttributes(ParserFields& f, DeformGroup const& g)
{
    f.addInts("strides", {g.strides[0], g.strides[1]});
    f.addInts("pads", {g.pads[0], g.pads[1], g.pads[2], g.pads[3]});
    f.addInts("dilations", {g.dilations[0], g.dilations[1]});
    f.addInts("group", {g.group});
    f.addInts("offset_group", {g.offsetGroup});
    if (g.kernelShapeAttr)
    {
        f.addInts("kernel_shape", {g.k, g.k});
    }
    if (g.allowTf32)
    {
        f.addInts("allow_tf32", {1});
    }
}

// The implementations a harness run compares (DeformConvImpl): each against the CPU reference.
inline char const* deformImplName(int32_t impl)
{
    return impl == sr::kDeformConvFused ? "fused" : "im2col";
}

// The tensors of one DeformConv2d problem, in the plugin's input order.
struct DeformData
{
    std::vector<std::vector<float>> inputs; // X, W, offset[, B[, mask]]
    std::vector<Dims> dims;                 // of each input, then the output
    std::vector<float> reference;
};

// Dims of each input in the plugin's order (X, W, offset[, B[, mask]]), then of the output.
inline std::vector<Dims> deformDims(DeformGroup const& g, DeformShape const& s)
{
    int const ho = deformOutH(g, s.h);
    int const wo = deformOutW(g, s.w);
    int const taps = g.k * g.k;
    std::vector<Dims> dims {dims4(s.n, g.c, s.h, s.w), dims4(g.cOut, g.c / g.group, g.k, g.k),
        dims4(s.n, 2 * g.offsetGroup * taps, ho, wo)};
    if (g.nbInputs >= 4)
    {
        dims.push_back(dims1(g.cOut));
    }
    if (g.nbInputs == 5)
    {
        dims.push_back(dims4(s.n, g.offsetGroup * taps, ho, wo));
    }
    dims.push_back(dims4(s.n, g.cOut, ho, wo));
    return dims;
}

inline DeformData makeDeformData(DeformGroup const& g, DeformShape const& s, uint64_t seed)
{
    Rng rng(seed);
    DeformData d;
    d.dims = deformDims(g, s);
    float const wScale = 1.0F / std::sqrt(static_cast<float>(d.dims[1].d[1] * g.k * g.k));
    auto count = [&](int t)
    {
        size_t v = 1;
        for (int32_t i = 0; i < d.dims[t].nbDims; ++i)
        {
            v *= static_cast<size_t>(d.dims[t].d[i]);
        }
        return v;
    };
    d.inputs.push_back(rng.fill(count(0), -1.0F, 1.0F));
    d.inputs.push_back(rng.fill(count(1), -wScale, wScale));
    // Offsets up to 2 pixels (offsetRange): samples cross the border, exercising torchvision's out-of-range rule.
    d.inputs.push_back(rng.fill(count(2), -g.offsetRange, g.offsetRange));
    if (g.nbInputs >= 4)
    {
        d.inputs.push_back(g.zeroBias ? std::vector<float>(g.cOut, 0.0F) : rng.fill(count(3), -0.5F, 0.5F));
    }
    if (g.nbInputs == 5)
    {
        d.inputs.push_back(rng.fill(count(4), 0.0F, 1.0F));
    }
    return d;
}

// CPU reference from libsr_kernels_cpu; fp16 rounds inputs, columns and outputs as FP16 I/O does on the GPU.
inline std::string deformReference(DeformGroup const& g, DeformShape const& s, DeformData& d, bool fp16)
{
    int const ho = deformOutH(g, s.h);
    int const wo = deformOutW(g, s.w);
    d.reference.assign(size_t(s.n) * g.cOut * ho * wo, 0.0F);
    float const* bias = g.nbInputs >= 4 ? d.inputs[3].data() : nullptr;
    float const* mask = g.nbInputs == 5 ? d.inputs[4].data() : nullptr;
    int const rc = sr_deform_conv2d_f32(d.inputs[0].data(), d.inputs[1].data(), d.inputs[2].data(), mask, bias,
        d.reference.data(), s.n, g.c, s.h, s.w, g.cOut, g.k, g.k, ho, wo, g.strides[0], g.strides[1], g.pads[0],
        g.pads[1], g.dilations[0], g.dilations[1], g.group, g.offsetGroup, fp16 ? 1 : 0, 0);
    return rc == SR_OK ? std::string() : std::string("sr_deform_conv2d_f32: ") + sr_last_error();
}

inline std::string resizeReference(
    ResizeShape const& s, std::vector<float> const& x, std::vector<float>& ref, bool fp16)
{
    ref.assign(size_t(s.n) * s.c * s.hOut * s.wOut, 0.0F);
    int const rc = sr_dynamic_resize_f32(x.data(), ref.data(), s.n, s.c, s.hIn, s.wIn, s.hOut, s.wOut, fp16 ? 1 : 0);
    return rc == SR_OK ? std::string() : std::string("sr_dynamic_resize_f32: ") + sr_last_error();
}

// ---- Comparison --------------------------------------------------------------------------------------------------
struct Tolerance
{
    double abs;
    double rel;
};

// FP32 (TF32 off): same math, only the summation order differs. TF32: 10-bit mantissa products. FP16: the output is
// rounded to 11 bits, and the GEMM accumulates in another order.
inline Tolerance toleranceFor(bool fp16, bool tf32)
{
    if (fp16)
    {
        return {2e-3, 4e-3};
    }
    return tf32 ? Tolerance {5e-3, 5e-3} : Tolerance {2e-5, 2e-5};
}

struct Comparison
{
    bool ok {true};
    double maxAbsError {0.0};
    size_t worstIndex {0};
    size_t nonFinite {0};
    std::string summary() const
    {
        char buf[96];
        std::snprintf(buf, sizeof buf, "max abs error %.3g at %zu", maxAbsError, worstIndex);
        return nonFinite != 0 ? std::string(buf) + ", " + std::to_string(nonFinite) + " non-finite" : buf;
    }
};

inline Comparison compareOutputs(std::vector<float> const& got, std::vector<float> const& ref, Tolerance tol)
{
    Comparison c;
    if (got.size() != ref.size())
    {
        c.ok = false;
        c.nonFinite = got.size();
        return c;
    }
    for (size_t i = 0; i < got.size(); ++i)
    {
        if (!std::isfinite(got[i]))
        {
            ++c.nonFinite;
            c.ok = false;
            continue;
        }
        double const err = std::fabs(static_cast<double>(got[i]) - ref[i]);
        if (err > c.maxAbsError)
        {
            c.maxAbsError = err;
            c.worstIndex = i;
        }
        if (err > tol.abs + tol.rel * std::fabs(static_cast<double>(ref[i])))
        {
            c.ok = false;
        }
    }
    return c;
}

} // namespace srtest
