// Host-side self-test of libsr_trt_plugins.so, no GPU and no TensorRT library needed: loads the plugin library the
// way TensorRT does (dlopen + getCreators/setLoggerFinder) and drives the creators and the build-time plugin API
// (fields, types, formats, output shapes through a small IExprBuilder, workspace, serialization round trip).
// Usage: trt_plugin_selftest [path/to/libsr_trt_plugins.so]. Prints one "ok"/"FAIL" line per check; exit 0 = all ok.
#include "deformConv2d/deformConv2dMath.h"
#include "tests/pluginTestSupport.h"

#include <NvInferRuntime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace nvinfer1;
using namespace srtest;

namespace
{

// ---- DynamicResize ---------------------------------------------------------------------------------------------
void testDynamicResize(IPluginCreatorV3One* creator, CapturingLogger& logger)
{
    std::printf("# DynamicResize\n");
    char const ns[] = "sr";
    int32_t const shapeIdx[] = {1};
    std::vector<PluginField> parserFields {PluginField("plugin_namespace", ns, PluginFieldType::kCHAR, 3),
        PluginField("tensorrt_plugin_shape_input_indices", shapeIdx, PluginFieldType::kINT32, 1)};
    PluginFieldCollection fc = collection(parserFields);
    logger.clear();
    IPluginV3* p = creator->createPlugin("resize0", &fc, TensorRTPhase::kBUILD);
    check(p != nullptr && logger.empty(), "DynamicResize: createPlugin ignores the parser's extra fields");
    if (p == nullptr)
    {
        return;
    }
    PluginParts r = parts(p);
    check(r.core && r.build && r.runtime, "DynamicResize: core/build/runtime capabilities");
    check(std::strcmp(r.core->getPluginName(), "DynamicResize") == 0
            && std::strcmp(r.core->getPluginVersion(), "1") == 0
            && std::strcmp(r.core->getPluginNamespace(), "sr") == 0,
        "DynamicResize: name/version/namespace = DynamicResize/1/sr");
    check(r.build->getNbOutputs() == 1, "DynamicResize: one output");

    DataType out {};
    DataType in = DataType::kFLOAT;
    check(r.build->getOutputDataTypes(&out, 1, &in, 1) == 0 && out == DataType::kFLOAT, "DynamicResize: FP32 -> FP32");
    in = DataType::kHALF;
    check(r.build->getOutputDataTypes(&out, 1, &in, 1) == 0 && out == DataType::kHALF, "DynamicResize: FP16 -> FP16");
    in = DataType::kINT32;
    logger.clear();
    check(r.build->getOutputDataTypes(&out, 1, &in, 1) != 0 && !logger.empty(),
        "DynamicResize: INT32 input rejected with a logged error");

    // Formats: X picks FP32/FP16 LINEAR, Y must match it.
    DynamicPluginTensorDesc io[2]
        = {tensorDesc(dims4(1, 3, 8, 8), DataType::kFLOAT), tensorDesc(dims4(1, 3, 16, 16), DataType::kFLOAT)};
    check(r.build->supportsFormatCombination(0, io, 1, 1), "DynamicResize: X FP32 LINEAR supported");
    check(r.build->supportsFormatCombination(1, io, 1, 1), "DynamicResize: Y FP32 after X FP32 supported");
    io[1].desc.type = DataType::kHALF;
    check(!r.build->supportsFormatCombination(1, io, 1, 1), "DynamicResize: Y FP16 after X FP32 rejected");
    io[0].desc.type = DataType::kHALF;
    check(r.build->supportsFormatCombination(0, io, 1, 1) && r.build->supportsFormatCombination(1, io, 1, 1),
        "DynamicResize: FP16 in/out supported");
    io[0].desc.type = DataType::kINT8;
    check(!r.build->supportsFormatCombination(0, io, 1, 1), "DynamicResize: INT8 X rejected");
    io[0].desc.type = DataType::kFLOAT;
    io[0].desc.format = TensorFormat::kCHW32;
    check(!r.build->supportsFormatCombination(0, io, 1, 1), "DynamicResize: non-LINEAR format rejected");

    // Output shape: N, C from X; H_out, W_out are the values of the size shape input.
    TestExprBuilder eb;
    DimsExprs x {};
    x.nbDims = 4;
    x.d[0] = eb.symbolic(2);
    x.d[1] = eb.fixed(3);
    x.d[2] = eb.symbolic(7);
    x.d[3] = eb.symbolic(5);
    DimsExprs size {};
    size.nbDims = 2;
    size.d[0] = eb.symbolic(11);
    size.d[1] = eb.symbolic(13);
    DimsExprs y {};
    logger.clear();
    int32_t const rc = r.build->getOutputShapes(&x, 1, &size, 1, &y, 1, eb);
    check(rc == 0 && y.nbDims == 4 && valueOf(y.d[0]) == 2 && valueOf(y.d[1]) == 3 && y.d[2] == size.d[0]
            && y.d[3] == size.d[1] && logger.empty(),
        "DynamicResize: getOutputShapes = [N, C, size[0], size[1]]");
    logger.clear();
    check(r.build->getOutputShapes(&x, 1, nullptr, 0, &y, 1, eb) != 0
            && logger.mentions("tensorrt_plugin_shape_input_indices"),
        "DynamicResize: missing shape input rejected, error names tensorrt_plugin_shape_input_indices");
    DimsExprs badSize {};
    badSize.nbDims = 2;
    badSize.d[0] = eb.fixed(0);
    badSize.d[1] = eb.fixed(4);
    logger.clear();
    check(r.build->getOutputShapes(&x, 1, &badSize, 1, &y, 1, eb) != 0 && !logger.empty(),
        "DynamicResize: constant size 0 rejected");

    // configure / onShapeChange / workspace.
    DynamicPluginTensorDesc cin = tensorDesc(dims4(-1, 3, -1, -1), DataType::kHALF);
    DynamicPluginTensorDesc cout = tensorDesc(dims4(-1, 3, -1, -1), DataType::kHALF);
    logger.clear();
    check(r.build->configurePlugin(&cin, 1, &cout, 1) == 0 && logger.empty(),
        "DynamicResize: configurePlugin with dynamic dims");
    cout.desc.type = DataType::kFLOAT;
    logger.clear();
    check(r.build->configurePlugin(&cin, 1, &cout, 1) != 0 && !logger.empty(),
        "DynamicResize: configurePlugin rejects mixed FP16/FP32");
    check(r.build->getWorkspaceSize(&cin, 1, &cout, 1) == 0, "DynamicResize: no workspace");
    PluginTensorDesc rin = tensorDesc(dims4(2, 3, 7, 5), DataType::kFLOAT).desc;
    PluginTensorDesc rout = tensorDesc(dims4(2, 3, 11, 13), DataType::kFLOAT).desc;
    check(r.runtime->onShapeChange(&rin, 1, &rout, 1) == 0, "DynamicResize: onShapeChange with concrete dims");
    rout.dims.d[3] = 0;
    logger.clear();
    check(r.runtime->onShapeChange(&rin, 1, &rout, 1) != 0 && !logger.empty(),
        "DynamicResize: onShapeChange rejects an empty output width");

    // The other layout: TensorRT may count the size shape tensor as input 1 (INT32/INT64, ignored by the plugin).
    {
        DataType types2[2] = {DataType::kHALF, DataType::kINT64};
        DataType out2 {};
        check(r.build->getOutputDataTypes(&out2, 1, types2, 2) == 0 && out2 == DataType::kHALF,
            "DynamicResize (size counted): getOutputDataTypes(FP16, INT64) -> FP16");
        types2[1] = DataType::kFLOAT;
        logger.clear();
        check(r.build->getOutputDataTypes(&out2, 1, types2, 2) != 0 && logger.mentions("size shape tensor"),
            "DynamicResize (size counted): a float second input is rejected, naming the size shape tensor");
        DynamicPluginTensorDesc io3[3] = {tensorDesc(dims4(1, 3, 8, 8), DataType::kFLOAT),
            tensorDesc(dims1(2), DataType::kINT32), tensorDesc(dims4(1, 3, 16, 16), DataType::kFLOAT)};
        bool const all = r.build->supportsFormatCombination(0, io3, 2, 1)
            && r.build->supportsFormatCombination(1, io3, 2, 1) && r.build->supportsFormatCombination(2, io3, 2, 1);
        io3[1].desc.type = DataType::kINT64;
        bool const int64Ok = r.build->supportsFormatCombination(1, io3, 2, 1);
        io3[1].desc.type = DataType::kHALF;
        bool const halfSizeRejected = !r.build->supportsFormatCombination(1, io3, 2, 1);
        io3[1].desc.type = DataType::kINT64;
        io3[2].desc.type = DataType::kHALF;
        bool const mismatchRejected = !r.build->supportsFormatCombination(2, io3, 2, 1);
        io3[2].desc.type = DataType::kFLOAT;
        check(all && int64Ok && halfSizeRejected && mismatchRejected,
            "DynamicResize (size counted): formats X/size(INT32|INT64)/Y, FP16 size and Y != X rejected");
        DynamicPluginTensorDesc cin2[2]
            = {tensorDesc(dims4(-1, 3, -1, -1), DataType::kFLOAT), tensorDesc(dims1(2), DataType::kINT64)};
        DynamicPluginTensorDesc cout2 = tensorDesc(dims4(-1, 3, -1, -1), DataType::kFLOAT);
        logger.clear();
        check(r.build->configurePlugin(cin2, 2, &cout2, 1) == 0 && logger.empty()
                && r.build->getWorkspaceSize(cin2, 2, &cout2, 1) == 0,
            "DynamicResize (size counted): configurePlugin + getWorkspaceSize with 2 inputs");
        PluginTensorDesc rin2[2]
            = {tensorDesc(dims4(2, 3, 7, 5), DataType::kFLOAT).desc, tensorDesc(dims1(2), DataType::kINT64).desc};
        PluginTensorDesc rout2 = tensorDesc(dims4(2, 3, 11, 13), DataType::kFLOAT).desc;
        logger.clear();
        check(r.runtime->onShapeChange(rin2, 2, &rout2, 1) == 0 && logger.empty(),
            "DynamicResize (size counted): onShapeChange with 2 inputs");
        DimsExprs x2[2] = {x, size};
        logger.clear();
        check(r.build->getOutputShapes(x2, 2, &size, 1, &y, 1, eb) == 0 && y.d[2] == size.d[0] && logger.empty(),
            "DynamicResize (size counted): getOutputShapes with 2 inputs + the shape input");
        logger.clear();
        check(r.runtime->onShapeChange(rin2, 3, &rout2, 1) != 0 && !logger.empty(), "DynamicResize: 3 inputs rejected");
    }

    // Serialization (no attributes) and clone.
    PluginFieldCollection const* ser = r.runtime->getFieldsToSerialize();
    check(ser != nullptr && ser->nbFields == 0, "DynamicResize: serializes no fields (no attributes)");
    IPluginV3* fromSer = creator->createPlugin("resize0", ser, TensorRTPhase::kRUNTIME);
    check(fromSer != nullptr, "DynamicResize: createPlugin(kRUNTIME) from serialized fields");
    delete fromSer;
    IPluginV3* c = p->clone();
    check(c != nullptr && c != p && std::strcmp(parts(c).core->getPluginName(), "DynamicResize") == 0,
        "DynamicResize: clone is a new plugin object");
    delete c;
    delete p;
}

// ---- DeformConv2d ----------------------------------------------------------------------------------------------
struct DeformAttrs
{
    std::vector<int32_t> strides {2, 1};
    std::vector<int32_t> pads {1, 2, 1, 2};
    std::vector<int32_t> dilations {1, 2};
    std::vector<int32_t> group {2};
    std::vector<int32_t> offsetGroup {2};
    std::vector<int32_t> kernelShape {3, 3};
    std::vector<int32_t> allowTf32 {0};
    std::vector<int32_t> impl {1}; // im2col: the workspace checks below are about its columns; fused needs none

    std::vector<PluginField> fields(bool withKernel = true) const
    {
        std::vector<PluginField> f {
            PluginField("strides", strides.data(), PluginFieldType::kINT32, static_cast<int32_t>(strides.size())),
            PluginField("pads", pads.data(), PluginFieldType::kINT32, static_cast<int32_t>(pads.size())),
            PluginField("dilations", dilations.data(), PluginFieldType::kINT32, static_cast<int32_t>(dilations.size())),
            PluginField("group", group.data(), PluginFieldType::kINT32, static_cast<int32_t>(group.size())),
            PluginField(
                "offset_group", offsetGroup.data(), PluginFieldType::kINT32, static_cast<int32_t>(offsetGroup.size()))};
        if (withKernel)
        {
            f.emplace_back(
                "kernel_shape", kernelShape.data(), PluginFieldType::kINT32, static_cast<int32_t>(kernelShape.size()));
        }
        f.emplace_back("allow_tf32", allowTf32.data(), PluginFieldType::kINT32, static_cast<int32_t>(allowTf32.size()));
        f.emplace_back("impl", impl.data(), PluginFieldType::kINT32, static_cast<int32_t>(impl.size()));
        return f;
    }
};

void expectRejected(IPluginCreatorV3One* creator, CapturingLogger& logger, std::vector<PluginField> const& fields,
    std::string const& fieldName, std::string const& what)
{
    PluginFieldCollection fc = collection(fields);
    logger.clear();
    IPluginV3* p = creator->createPlugin("bad", &fc, TensorRTPhase::kBUILD);
    check(p == nullptr && logger.mentions(fieldName),
        "DeformConv2d: " + what + " -> nullptr, error names '" + fieldName + "' (last: " + logger.last() + ")");
    delete p;
}

size_t exactWorkspace(sr::DeformConvShape const& s, size_t elem)
{
    // Independent evaluation of the kernel library's chunk rule (header-only math).
    if (s.n <= 0)
    {
        return 0;
    }
    size_t const columns = sr::deformConv2dColumnElements(s, sr::deformConv2dChunk(s, elem)) * elem;
    return sr::kWorkspaceAlignment + sr::alignUp(columns, sr::kWorkspaceAlignment) + sr::kDeformConvCublasWorkspace;
}

void testDeformConv2d(IPluginCreatorV3One* creator, CapturingLogger& logger)
{
    std::printf("# DeformConv2d\n");
    PluginFieldCollection const* names = creator->getFieldNames();
    std::vector<std::string> expectNames {
        "strides", "pads", "dilations", "group", "offset_group", "kernel_shape", "allow_tf32", "impl"};
    bool allListed = names != nullptr;
    for (auto const& n : expectNames)
    {
        allListed = allListed && findField(names, n.c_str()) != nullptr;
    }
    check(allListed, "DeformConv2d: getFieldNames lists every ONNX DeformConv attribute, allow_tf32 and impl");

    DeformAttrs attrs;
    std::vector<PluginField> fields = attrs.fields();
    char const ns[] = "sr";
    fields.emplace_back("plugin_namespace", ns, PluginFieldType::kCHAR, 3);
    PluginFieldCollection fc = collection(fields);
    logger.clear();
    IPluginV3* p = creator->createPlugin("dcn0", &fc, TensorRTPhase::kBUILD);
    check(p != nullptr && logger.empty(), "DeformConv2d: createPlugin with valid INT32 fields (+ plugin_namespace)");
    if (p == nullptr)
    {
        return;
    }
    PluginParts r = parts(p);
    check(r.core && r.build && r.runtime, "DeformConv2d: core/build/runtime capabilities");
    check(std::strcmp(r.core->getPluginName(), "DeformConv2d") == 0 && std::strcmp(r.core->getPluginVersion(), "1") == 0
            && std::strcmp(r.core->getPluginNamespace(), "sr") == 0,
        "DeformConv2d: name/version/namespace = DeformConv2d/1/sr");

    // INT64 fields (as Python users pass numpy int64) are accepted too.
    std::vector<int64_t> s64 {1, 1};
    std::vector<PluginField> f64 {PluginField("strides", s64.data(), PluginFieldType::kINT64, 2)};
    PluginFieldCollection fc64 = collection(f64);
    IPluginV3* p64 = creator->createPlugin("dcn64", &fc64, TensorRTPhase::kBUILD);
    check(p64 != nullptr, "DeformConv2d: INT64 fields accepted");

    // No fields: ONNX defaults (and the implementation SR_DEFORM_CONV2D_IMPL names: unset = fused).
    unsetenv(sr::kDeformConvImplEnv);
    IPluginV3* pDef = creator->createPlugin("dcnDefault", nullptr, TensorRTPhase::kBUILD);
    check(pDef != nullptr, "DeformConv2d: createPlugin without fields uses ONNX defaults");
    if (pDef != nullptr)
    {
        PluginFieldCollection const* d = parts(pDef).runtime->getFieldsToSerialize();
        bool ok = d != nullptr && findField(d, "strides")
            && fieldValues(*findField(d, "strides")) == std::vector<int64_t> {1, 1}
            && fieldValues(*findField(d, "pads")) == std::vector<int64_t> {0, 0, 0, 0}
            && fieldValues(*findField(d, "dilations")) == std::vector<int64_t> {1, 1}
            && fieldValues(*findField(d, "group")) == std::vector<int64_t> {1}
            && fieldValues(*findField(d, "offset_group")) == std::vector<int64_t> {1}
            && findField(d, "kernel_shape") == nullptr
            && fieldValues(*findField(d, "allow_tf32")) == std::vector<int64_t> {0}
            && fieldValues(*findField(d, "impl")) == std::vector<int64_t> {sr::kDeformConvFused};
        check(ok,
            "DeformConv2d: defaults strides=1,1 pads=0 dilations=1,1 group=1 offset_group=1, no kernel_shape, "
            "allow_tf32=0, impl=0 (fused)");
    }
    // SR_DEFORM_CONV2D_IMPL picks the implementation of a build without the field; a bad value is refused by name.
    {
        setenv(sr::kDeformConvImplEnv, "im2col", 1);
        IPluginV3* pEnv = creator->createPlugin("dcnEnv", nullptr, TensorRTPhase::kBUILD);
        PluginField const* f
            = pEnv != nullptr ? findField(parts(pEnv).runtime->getFieldsToSerialize(), "impl") : nullptr;
        check(f != nullptr && fieldValues(*f) == std::vector<int64_t> {sr::kDeformConvIm2col},
            "DeformConv2d: SR_DEFORM_CONV2D_IMPL=im2col -> impl=1 serialized");
        delete pEnv;
        setenv(sr::kDeformConvImplEnv, "fast", 1);
        logger.clear();
        IPluginV3* pBad = creator->createPlugin("dcnBadEnv", nullptr, TensorRTPhase::kBUILD);
        check(pBad == nullptr && logger.mentions(sr::kDeformConvImplEnv),
            "DeformConv2d: SR_DEFORM_CONV2D_IMPL=fast -> nullptr, error names the variable (last: " + logger.last()
                + ")");
        delete pBad;
        unsetenv(sr::kDeformConvImplEnv);
    }

    // Invalid attributes: nullptr, no crash, an error naming the field.
    {
        DeformAttrs a;
        a.strides = {1};
        expectRejected(creator, logger, a.fields(), "strides", "strides of length 1");
    }
    {
        DeformAttrs a;
        a.strides = {0, 1};
        expectRejected(creator, logger, a.fields(), "strides", "stride 0");
    }
    {
        DeformAttrs a;
        a.pads = {1, -1, 1, 1};
        expectRejected(creator, logger, a.fields(), "pads", "negative pad");
    }
    {
        DeformAttrs a;
        a.pads = {1, 1};
        expectRejected(creator, logger, a.fields(), "pads", "pads of length 2");
    }
    {
        DeformAttrs a;
        a.dilations = {0, 1};
        expectRejected(creator, logger, a.fields(), "dilations", "dilation 0");
    }
    {
        DeformAttrs a;
        a.group = {0};
        expectRejected(creator, logger, a.fields(), "group", "group 0");
    }
    {
        DeformAttrs a;
        a.offsetGroup = {-2};
        expectRejected(creator, logger, a.fields(), "offset_group", "offset_group -2");
    }
    {
        DeformAttrs a;
        a.allowTf32 = {2};
        expectRejected(creator, logger, a.fields(), "allow_tf32", "allow_tf32 2");
    }
    {
        DeformAttrs a;
        a.impl = {2};
        expectRejected(creator, logger, a.fields(), "impl", "impl 2");
    }
    {
        DeformAttrs a;
        a.kernelShape = {3};
        expectRejected(creator, logger, a.fields(), "kernel_shape", "kernel_shape of length 1");
    }
    {
        float const bad[2] = {1.0F, 1.0F};
        std::vector<PluginField> f {PluginField("dilations", bad, PluginFieldType::kFLOAT32, 2)};
        expectRejected(creator, logger, f, "dilations", "FLOAT32 dilations");
    }
    {
        int32_t const g1[1] = {1};
        int32_t const g2[1] = {2};
        std::vector<PluginField> f {
            PluginField("group", g1, PluginFieldType::kINT32, 1), PluginField("group", g2, PluginFieldType::kINT32, 1)};
        expectRejected(creator, logger, f, "group", "group given twice");
    }
    {
        std::vector<PluginField> f {PluginField("strides", nullptr, PluginFieldType::kINT32, 2)};
        expectRejected(creator, logger, f, "strides", "strides without data");
    }
    {
        int64_t const huge[2] = {int64_t(1) << 40, 1};
        std::vector<PluginField> f {PluginField("strides", huge, PluginFieldType::kINT64, 2)};
        expectRejected(creator, logger, f, "strides", "stride beyond int32");
    }

    // getFieldsToSerialize round trip: every attribute comes back with the same values.
    PluginFieldCollection const* ser = r.runtime->getFieldsToSerialize();
    bool serOk = ser != nullptr && ser->nbFields == 8;
    DeformAttrs expect;
    std::vector<std::pair<char const*, std::vector<int32_t>>> expected {{"strides", expect.strides},
        {"pads", expect.pads}, {"dilations", expect.dilations}, {"group", expect.group},
        {"offset_group", expect.offsetGroup}, {"kernel_shape", expect.kernelShape}, {"allow_tf32", expect.allowTf32},
        {"impl", expect.impl}};
    for (auto const& e : expected)
    {
        PluginField const* f = findField(ser, e.first);
        serOk = serOk && f != nullptr && f->type == PluginFieldType::kINT32
            && fieldValues(*f) == std::vector<int64_t>(e.second.begin(), e.second.end());
    }
    check(serOk, "DeformConv2d: getFieldsToSerialize holds all 8 attributes as INT32 with the given values");
    IPluginV3* p2 = creator->createPlugin("dcn0", ser, TensorRTPhase::kRUNTIME);
    check(p2 != nullptr, "DeformConv2d: createPlugin(kRUNTIME) from serialized fields");
    if (p2 != nullptr)
    {
        PluginFieldCollection const* ser2 = parts(p2).runtime->getFieldsToSerialize();
        bool same = ser2 != nullptr && ser2->nbFields == ser->nbFields;
        for (int32_t i = 0; same && i < ser->nbFields; ++i)
        {
            PluginField const* f2 = findField(ser2, ser->fields[i].name);
            same = f2 != nullptr && f2->type == ser->fields[i].type && fieldValues(*f2) == fieldValues(ser->fields[i]);
        }
        check(same, "DeformConv2d: serialize -> create -> serialize gives identical fields");
        check(std::strcmp(parts(p2).build->getTimingCacheID(), r.build->getTimingCacheID()) == 0,
            "DeformConv2d: round-tripped plugin has the same timing-cache id");
    }
    check(pDef != nullptr && std::strcmp(parts(pDef).build->getTimingCacheID(), r.build->getTimingCacheID()) != 0,
        "DeformConv2d: different attributes give different timing-cache ids");
    {
        DeformAttrs tf32;
        tf32.allowTf32 = {1};
        std::vector<PluginField> tf = tf32.fields();
        PluginFieldCollection tfc = collection(tf);
        IPluginV3* pTf = creator->createPlugin("dcnTf32", &tfc, TensorRTPhase::kBUILD);
        PluginField const* f
            = pTf != nullptr ? findField(parts(pTf).runtime->getFieldsToSerialize(), "allow_tf32") : nullptr;
        check(f != nullptr && fieldValues(*f) == std::vector<int64_t> {1}
                && std::strcmp(parts(pTf).build->getTimingCacheID(), r.build->getTimingCacheID()) != 0,
            "DeformConv2d: allow_tf32=1 accepted, serialized, and part of the timing-cache id");
        delete pTf;
    }

    // Output types.
    DataType outType {};
    DataType f32[5] = {DataType::kFLOAT, DataType::kFLOAT, DataType::kFLOAT, DataType::kFLOAT, DataType::kFLOAT};
    DataType f16[5] = {DataType::kHALF, DataType::kHALF, DataType::kHALF, DataType::kHALF, DataType::kHALF};
    check(r.build->getOutputDataTypes(&outType, 1, f32, 5) == 0 && outType == DataType::kFLOAT,
        "DeformConv2d: FP32 inputs -> FP32 output");
    check(r.build->getOutputDataTypes(&outType, 1, f16, 3) == 0 && outType == DataType::kHALF,
        "DeformConv2d: FP16 inputs -> FP16 output");
    DataType mixed[4] = {DataType::kHALF, DataType::kFLOAT, DataType::kHALF, DataType::kHALF};
    logger.clear();
    check(r.build->getOutputDataTypes(&outType, 1, mixed, 4) != 0 && !logger.empty(),
        "DeformConv2d: mixed FP16/FP32 inputs rejected");

    // Formats for 3, 4 and 5 inputs: all LINEAR, all the type of X.
    int32_t const n = 2, c = 4, h = 9, w = 10, cOut = 6, k = 3;
    int64_t const ho = (h + 1 + 1 - (1 * (k - 1) + 1)) / 2 + 1; // strides 2, pads 1/1, dilation 1
    int64_t const wo = (w + 2 + 2 - (2 * (k - 1) + 1)) / 1 + 1; // stride 1, pads 2/2, dilation 2
    int32_t const og = 2;
    for (int32_t nbIn = 3; nbIn <= 5; ++nbIn)
    {
        std::vector<DynamicPluginTensorDesc> io {tensorDesc(dims4(n, c, h, w), DataType::kHALF),
            tensorDesc(dims4(cOut, c / 2, k, k), DataType::kHALF),
            tensorDesc(dims4(n, 2 * og * k * k, ho, wo), DataType::kHALF)};
        if (nbIn >= 4)
        {
            io.push_back(tensorDesc(dims1(cOut), DataType::kHALF));
        }
        if (nbIn == 5)
        {
            io.push_back(tensorDesc(dims4(n, og * k * k, ho, wo), DataType::kHALF));
        }
        io.push_back(tensorDesc(dims4(n, cOut, ho, wo), DataType::kHALF));
        bool all = true;
        for (int32_t pos = 0; pos <= nbIn; ++pos)
        {
            all = all && r.build->supportsFormatCombination(pos, io.data(), nbIn, 1);
        }
        io[1].desc.type = DataType::kFLOAT;
        bool const rejectsMixed = !r.build->supportsFormatCombination(1, io.data(), nbIn, 1);
        io[1].desc.type = DataType::kHALF;
        io[nbIn].desc.format = TensorFormat::kHWC8;
        bool const rejectsFormat = !r.build->supportsFormatCombination(nbIn, io.data(), nbIn, 1);
        io[nbIn].desc.format = TensorFormat::kLINEAR;
        check(all && rejectsMixed && rejectsFormat,
            "DeformConv2d: formats with " + std::to_string(nbIn) + " inputs (FP16 LINEAR, mixed/HWC8 rejected)");

        logger.clear();
        check(r.build->configurePlugin(io.data(), nbIn, &io[nbIn], 1) == 0 && logger.empty(),
            "DeformConv2d: configurePlugin with consistent shapes, " + std::to_string(nbIn) + " inputs");
        // Fixed shape: the workspace is exactly the kernel library's im2col chunk.
        sr::DeformConvShape s {n, c, h, w, cOut, k, k, static_cast<int>(ho), static_cast<int>(wo), 2, 1, 1, 2, 1, 2, 2,
            og, nbIn >= 4, nbIn == 5};
        size_t const ws = r.build->getWorkspaceSize(io.data(), nbIn, &io[nbIn], 1);
        size_t const columns = size_t(n) * c * k * k * ho * wo * 2;
        check(ws == exactWorkspace(s, 2) && ws == 256 + (columns + 255) / 256 * 256 + (size_t(32) << 20),
            "DeformConv2d: workspace (fixed shape, FP16) = 256 + align256(N*C*kH*kW*Ho*Wo*2) + 32 MiB cuBLAS = "
                + std::to_string(ws));
        DynamicPluginTensorDesc unknownOut = tensorDesc(dims4(-1, -1, -1, -1), DataType::kHALF);
        check(r.build->getWorkspaceSize(io.data(), nbIn, &unknownOut, 1) == ws,
            "DeformConv2d: workspace without output bounds derives H_out/W_out from the input maxima");
    }

    // Shape validation in configurePlugin / onShapeChange (no GPU needed: they fail before touching cuBLAS).
    {
        std::vector<DynamicPluginTensorDesc> io {tensorDesc(dims4(n, c, h, w), DataType::kFLOAT),
            tensorDesc(dims4(cOut, c, k, k), DataType::kFLOAT), // C/group would be 2
            tensorDesc(dims4(n, 2 * og * k * k, ho, wo), DataType::kFLOAT),
            tensorDesc(dims4(n, cOut, ho, wo), DataType::kFLOAT)};
        logger.clear();
        check(r.build->configurePlugin(io.data(), 3, &io[3], 1) != 0 && logger.mentions("C/group"),
            "DeformConv2d: configurePlugin rejects W with C instead of C/group channels");
        io[1] = tensorDesc(dims4(cOut, c / 2, k, k), DataType::kFLOAT);
        io[2] = tensorDesc(dims4(n, 2 * k * k, ho, wo), DataType::kFLOAT); // offset_group 1 layout
        logger.clear();
        check(r.build->configurePlugin(io.data(), 3, &io[3], 1) != 0 && logger.mentions("offset"),
            "DeformConv2d: configurePlugin rejects offset channels != 2*offset_group*kH*kW");
        io[2] = tensorDesc(dims4(-1, 2 * og * k * k, -1, -1), DataType::kFLOAT);
        io[0] = tensorDesc(dims4(-1, c, -1, -1), DataType::kFLOAT);
        io[3] = tensorDesc(dims4(-1, cOut, -1, -1), DataType::kFLOAT);
        logger.clear();
        check(r.build->configurePlugin(io.data(), 3, &io[3], 1) == 0 && logger.empty(),
            "DeformConv2d: configurePlugin accepts dynamic N/H/W");
        PluginTensorDesc rt[4] = {tensorDesc(dims4(n, c, h, w), DataType::kFLOAT).desc,
            tensorDesc(dims4(cOut, c / 2, k, k), DataType::kFLOAT).desc,
            tensorDesc(dims4(n, 2 * og * k * k, ho + 1, wo), DataType::kFLOAT).desc,
            tensorDesc(dims4(n, cOut, ho, wo), DataType::kFLOAT).desc};
        logger.clear();
        check(r.runtime->onShapeChange(rt, 3, &rt[3], 1) != 0 && !logger.empty(),
            "DeformConv2d: onShapeChange rejects offset spatial size != output size");
    }

    // enqueue on an instance that was never attached to a context: error, no crash, no GPU touched.
    {
        PluginTensorDesc rt[4] = {tensorDesc(dims4(n, c, h, w), DataType::kFLOAT).desc,
            tensorDesc(dims4(cOut, c / 2, k, k), DataType::kFLOAT).desc,
            tensorDesc(dims4(n, 2 * og * k * k, ho, wo), DataType::kFLOAT).desc,
            tensorDesc(dims4(n, cOut, ho, wo), DataType::kFLOAT).desc};
        void const* ins[3] = {nullptr, nullptr, nullptr};
        void* outs[1] = {nullptr};
        IPluginV3* fresh = creator->createPlugin("dcnFresh", &fc, TensorRTPhase::kRUNTIME);
        logger.clear();
        check(fresh != nullptr && parts(fresh).runtime->enqueue(rt, &rt[3], ins, outs, nullptr, nullptr) != 0
                && logger.mentions("cuBLAS"),
            "DeformConv2d: enqueue without attachToContext fails cleanly");
        delete fresh;
    }

    // Dynamic profile: one workspace size must serve every problem up to the maxima.
    {
        int32_t const bigC = 64, bigW = 2048, bigH = 2048;
        std::vector<DynamicPluginTensorDesc> io {tensorDesc(dims4(1, bigC, bigH, bigW), DataType::kFLOAT),
            tensorDesc(dims4(bigC, bigC / 2, k, k), DataType::kFLOAT),
            tensorDesc(dims4(1, 2 * og * k * k, bigH, bigW), DataType::kFLOAT),
            tensorDesc(dims4(1, bigC, bigH, bigW), DataType::kFLOAT)};
        for (int i : {0, 2, 3})
        {
            io[i].min.d[2] = 1;
            io[i].min.d[3] = 1;
        }
        DeformAttrs g2;
        g2.strides = {1, 1};
        g2.pads = {1, 1, 1, 1};
        g2.dilations = {1, 1};
        std::vector<PluginField> gf = g2.fields();
        PluginFieldCollection gfc = collection(gf);
        IPluginV3* padded = creator->createPlugin("dcnPad", &gfc, TensorRTPhase::kBUILD);
        size_t const ws = parts(padded).build->getWorkspaceSize(io.data(), 3, &io[3], 1);
        bool covers = true;
        std::string worst;
        for (int32_t wSmall = bigW; wSmall >= 1600 && covers; wSmall -= 7)
        {
            for (int32_t hSmall : {bigH, 1500, 300, 40, 1})
            {
                sr::DeformConvShape s {
                    1, bigC, hSmall, wSmall, bigC, k, k, hSmall, wSmall, 1, 1, 1, 1, 1, 1, 2, og, false, false};
                if (exactWorkspace(s, 4) > ws)
                {
                    covers = false;
                    worst = std::to_string(hSmall) + "x" + std::to_string(wSmall);
                    break;
                }
            }
        }
        check(covers,
            "DeformConv2d: dynamic-profile workspace " + std::to_string(ws) + " covers every smaller problem"
                + (worst.empty() ? "" : " (fails at " + worst + ")"));
        check(ws <= sr::kDeformConvColumnBudget + size_t(bigC) * k * k * bigW * 4 + 2 * sr::kWorkspaceAlignment
                    + sr::kDeformConvCublasWorkspace,
            "DeformConv2d: dynamic-profile workspace stays within the column budget (+ one row) + cuBLAS slice");
        check(ws
                == sr::deformConv2dProfileWorkspaceBytes(sr::DeformConvShape {1, bigC, bigH, bigW, bigC, k, k, bigH,
                                                             bigW, 1, 1, 1, 1, 1, 1, 2, og, false, false},
                    4, false),
            "DeformConv2d: getWorkspaceSize = deformConv2dProfileWorkspaceBytes (the engine stage's minimum)");
        delete padded;
        g2.impl = {0};
        std::vector<PluginField> ff = g2.fields();
        PluginFieldCollection ffc = collection(ff);
        IPluginV3* fused = creator->createPlugin("dcnFused", &ffc, TensorRTPhase::kBUILD);
        check(fused != nullptr && parts(fused).build->getWorkspaceSize(io.data(), 3, &io[3], 1) == 0,
            "DeformConv2d: impl=0 (fused kernel) asks for no workspace");
        delete fused;
    }

    // Output shapes through the expression builder: symbolic N/H/W, constant channels.
    {
        TestExprBuilder eb;
        DimsExprs in[3] {};
        in[0].nbDims = 4;
        in[0].d[0] = eb.symbolic(n);
        in[0].d[1] = eb.fixed(c);
        in[0].d[2] = eb.symbolic(h);
        in[0].d[3] = eb.symbolic(w);
        in[1].nbDims = 4;
        in[1].d[0] = eb.fixed(cOut);
        in[1].d[1] = eb.fixed(c / 2);
        in[1].d[2] = eb.fixed(k);
        in[1].d[3] = eb.fixed(k);
        in[2].nbDims = 4;
        for (int i = 0; i < 4; ++i)
        {
            in[2].d[i] = eb.symbolic(1);
        }
        DimsExprs y {};
        logger.clear();
        int32_t const rc = r.build->getOutputShapes(in, 3, nullptr, 0, &y, 1, eb);
        check(rc == 0 && y.nbDims == 4 && valueOf(y.d[0]) == n && valueOf(y.d[1]) == cOut && valueOf(y.d[2]) == ho
                && valueOf(y.d[3]) == wo && !y.d[2]->isConstant() && logger.empty(),
            "DeformConv2d: getOutputShapes = [N, C_out, " + std::to_string(ho) + ", " + std::to_string(wo)
                + "] (strides 2,1 pads 1,2,1,2 dilations 1,2)");
        // kernel_shape absent: taken from W.
        if (pDef != nullptr)
        {
            in[0].d[2] = eb.fixed(h);
            in[0].d[3] = eb.fixed(w);
            check(parts(pDef).build->getOutputShapes(in, 3, nullptr, 0, &y, 1, eb) == 0 && valueOf(y.d[2]) == h - k + 1
                    && valueOf(y.d[3]) == w - k + 1 && y.d[2]->isConstant(),
                "DeformConv2d: defaults + kernel from W -> [N, C_out, H-2, W-2], constant for constant input");
            in[0].d[2] = eb.fixed(2);
            logger.clear();
            check(parts(pDef).build->getOutputShapes(in, 3, nullptr, 0, &y, 1, eb) != 0 && !logger.empty(),
                "DeformConv2d: kernel larger than the input rejected");
        }
    }

    IPluginV3* c2 = p->clone();
    bool cloneOk = c2 != nullptr && c2 != p;
    if (cloneOk)
    {
        PluginFieldCollection const* a = parts(p).runtime->getFieldsToSerialize();
        PluginFieldCollection const* b = parts(c2).runtime->getFieldsToSerialize();
        cloneOk = a->nbFields == b->nbFields && a->fields != b->fields; // own storage
        for (int32_t i = 0; cloneOk && i < a->nbFields; ++i)
        {
            cloneOk = fieldValues(a->fields[i]) == fieldValues(b->fields[i]) && a->fields[i].data != b->fields[i].data;
        }
    }
    check(cloneOk, "DeformConv2d: clone deep-copies the attributes");
    delete c2;
    delete p2;
    delete p64;
    delete pDef;
    delete p;
}

} // namespace

int main(int argc, char** argv)
{
    char const* path = argc > 1 ? argv[1] : SR_TRT_PLUGIN_LIBRARY;
    static TestLoggerFinder finder;
    PluginLibrary const lib = loadPluginLibrary(path, &finder);
    if (lib.handle == nullptr)
    {
        std::printf("FAIL %s\n", lib.error.c_str());
        return 2;
    }
    check(lib.error.empty(), "library exports getCreators and setLoggerFinder");
    check(lib.nbCreators == 2, "getCreators returns 2 creators");
    check(lib.resize != nullptr && lib.deform != nullptr,
        "IPluginCreatorV3One creators for DynamicResize and DeformConv2d");
    for (IPluginCreatorV3One* c : {lib.resize, lib.deform})
    {
        if (c != nullptr)
        {
            check(std::strcmp(c->getPluginVersion(), "1") == 0 && std::strcmp(c->getPluginNamespace(), "sr") == 0,
                std::string("creator ") + c->getPluginName() + " has version 1, namespace sr");
        }
    }
    if (lib.resize != nullptr)
    {
        testDynamicResize(lib.resize, finder.logger);
    }
    if (lib.deform != nullptr)
    {
        testDeformConv2d(lib.deform, finder.logger);
    }
    std::printf("# %d checks, %d failed\n", gChecks, gFailures);
    return gFailures == 0 ? 0 : 1;
}
