// Test support shared by the host self-test and the GPU harness: check() bookkeeping, a capturing ILogger for
// setLoggerFinder, a small IExprBuilder that evaluates expressions, tensor-description and PluginField helpers,
// and loading the plugin library the way TensorRT does (dlopen + getCreators / setLoggerFinder).
// Header-only on purpose: each test program is one translation unit.
#pragma once

#include <NvInferRuntime.h>

#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace srtest
{

using namespace nvinfer1;

inline int gFailures = 0;
inline int gChecks = 0;

inline void check(bool cond, std::string const& what)
{
    ++gChecks;
    if (cond)
    {
        std::printf("ok   %s\n", what.c_str());
    }
    else
    {
        ++gFailures;
        std::printf("FAIL %s\n", what.c_str());
    }
}

// ---- Logger: captures what the plugins report through TensorRT's logger ----------------------------------------
class CapturingLogger : public ILogger
{
public:
    void log(Severity severity, AsciiChar const* msg) noexcept override
    {
        if (severity <= Severity::kWARNING)
        {
            mMessages.emplace_back(msg);
        }
    }
    void clear()
    {
        mMessages.clear();
    }
    bool empty() const
    {
        return mMessages.empty();
    }
    // True when some captured message mentions `text`.
    bool mentions(std::string const& text) const
    {
        return std::any_of(mMessages.begin(), mMessages.end(),
            [&](std::string const& m) { return m.find(text) != std::string::npos; });
    }
    std::string last() const
    {
        return mMessages.empty() ? std::string("<none>") : mMessages.back();
    }

private:
    std::vector<std::string> mMessages;
};

class TestLoggerFinder : public ILoggerFinder
{
public:
    ILogger* findLogger() override
    {
        return &logger;
    }
    CapturingLogger logger;
};

// ---- A tiny IExprBuilder: every expression carries its value and whether TensorRT would see it as constant ------
class Expr;
class ExprImpl : public apiv::VDimensionExpr
{
public:
    ExprImpl(bool constant, int64_t value)
        : mConstant(constant)
        , mValue(value)
    {
    }
    bool isConstant() const override
    {
        return mConstant;
    }
    int64_t getConstantValue() const override
    {
        return mConstant ? mValue : std::numeric_limits<int64_t>::min();
    }
    bool isSizeTensor() const override
    {
        return false;
    }
    bool mConstant;
    int64_t mValue;
};

class Expr : public IDimensionExpr
{
public:
    Expr(bool constant, int64_t value)
        : mImplObj(constant, value)
    {
        mImpl = &mImplObj;
    }
    int64_t value() const
    {
        return mImplObj.mValue;
    }

private:
    ExprImpl mImplObj;
};

inline int64_t floorDiv(int64_t a, int64_t b)
{
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0)))
    {
        --q;
    }
    return q;
}

class BuilderImpl : public apiv::VExprBuilder
{
public:
    IDimensionExpr const* constant(int64_t value) override
    {
        return make(true, value);
    }
    IDimensionExpr const* operation(
        DimensionOperation op, IDimensionExpr const& first, IDimensionExpr const& second) override
    {
        int64_t const a = static_cast<Expr const&>(first).value();
        int64_t const b = static_cast<Expr const&>(second).value();
        int64_t r = 0;
        switch (op)
        {
        case DimensionOperation::kSUM: r = a + b; break;
        case DimensionOperation::kPROD: r = a * b; break;
        case DimensionOperation::kMAX: r = std::max(a, b); break;
        case DimensionOperation::kMIN: r = std::min(a, b); break;
        case DimensionOperation::kSUB: r = a - b; break;
        case DimensionOperation::kEQUAL: r = a == b; break;
        case DimensionOperation::kLESS: r = a < b; break;
        case DimensionOperation::kFLOOR_DIV: r = floorDiv(a, b); break;
        case DimensionOperation::kCEIL_DIV: r = -floorDiv(-a, b); break;
        default: return nullptr;
        }
        return make(first.isConstant() && second.isConstant(), r);
    }
    IDimensionExpr const* declareSizeTensor(int32_t, IDimensionExpr const&, IDimensionExpr const&) override
    {
        return nullptr;
    }
    Expr const* make(bool constant, int64_t value)
    {
        mPool.emplace_back(new Expr(constant, value));
        return mPool.back().get();
    }

private:
    std::vector<std::unique_ptr<Expr>> mPool;
};

class TestExprBuilder : public IExprBuilder
{
public:
    TestExprBuilder()
    {
        mImpl = &mBuilder;
    }
    // Input dimension that TensorRT would only know at run time (value used to evaluate the result).
    IDimensionExpr const* symbolic(int64_t value)
    {
        return mBuilder.make(false, value);
    }
    IDimensionExpr const* fixed(int64_t value)
    {
        return mBuilder.make(true, value);
    }

private:
    BuilderImpl mBuilder;
};

inline int64_t valueOf(IDimensionExpr const* e)
{
    return e == nullptr ? -999 : static_cast<Expr const*>(e)->value();
}

// ---- Helpers ---------------------------------------------------------------------------------------------------
inline Dims dims4(int64_t a, int64_t b, int64_t c, int64_t d)
{
    Dims r {};
    r.nbDims = 4;
    r.d[0] = a;
    r.d[1] = b;
    r.d[2] = c;
    r.d[3] = d;
    return r;
}

inline std::string dimsToString(Dims const& d)
{
    std::string s = "[";
    for (int32_t i = 0; i < d.nbDims; ++i)
    {
        s += (i != 0 ? "," : "") + std::to_string(d.d[i]);
    }
    return s + "]";
}

inline Dims dims1(int64_t a)
{
    Dims r {};
    r.nbDims = 1;
    r.d[0] = a;
    return r;
}

inline DynamicPluginTensorDesc tensorDesc(Dims const& d, DataType type, TensorFormat format = TensorFormat::kLINEAR)
{
    DynamicPluginTensorDesc t {};
    t.desc.dims = d;
    t.desc.type = type;
    t.desc.format = format;
    t.desc.scale = -1.0F;
    t.min = d;
    t.opt = d;
    t.max = d;
    return t;
}

inline PluginFieldCollection collection(std::vector<PluginField> const& fields)
{
    PluginFieldCollection fc {};
    fc.nbFields = static_cast<int32_t>(fields.size());
    fc.fields = fields.empty() ? nullptr : fields.data();
    return fc;
}

inline std::vector<int64_t> fieldValues(PluginField const& f)
{
    std::vector<int64_t> v;
    for (int32_t i = 0; i < f.length; ++i)
    {
        v.push_back(f.type == PluginFieldType::kINT64 ? static_cast<int64_t const*>(f.data)[i]
                                                      : static_cast<int32_t const*>(f.data)[i]);
    }
    return v;
}

inline PluginField const* findField(PluginFieldCollection const* fc, char const* name)
{
    for (int32_t i = 0; fc != nullptr && i < fc->nbFields; ++i)
    {
        if (std::strcmp(fc->fields[i].name, name) == 0)
        {
            return &fc->fields[i];
        }
    }
    return nullptr;
}

struct PluginParts
{
    IPluginV3* plugin {nullptr};
    IPluginV3OneCore* core {nullptr};
    IPluginV3OneBuild* build {nullptr};
    IPluginV3OneRuntime* runtime {nullptr};
};

inline PluginParts parts(IPluginV3* p)
{
    PluginParts r;
    r.plugin = p;
    if (p != nullptr)
    {
        r.core = static_cast<IPluginV3OneCore*>(p->getCapabilityInterface(PluginCapabilityType::kCORE));
        r.build = static_cast<IPluginV3OneBuild*>(p->getCapabilityInterface(PluginCapabilityType::kBUILD));
        r.runtime = static_cast<IPluginV3OneRuntime*>(p->getCapabilityInterface(PluginCapabilityType::kRUNTIME));
    }
    return r;
}

// ---- Loading the library like TensorRT -------------------------------------------------------------------------
struct PluginLibrary
{
    void* handle {nullptr};
    IPluginCreatorV3One* resize {nullptr};
    IPluginCreatorV3One* deform {nullptr};
    int32_t nbCreators {0};
    std::string error;
};

// dlopens `path`, hands it `finder` through setLoggerFinder and picks the two sr creators out of getCreators.
inline PluginLibrary loadPluginLibrary(char const* path, ILoggerFinder* finder)
{
    PluginLibrary lib;
    lib.handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib.handle == nullptr)
    {
        char const* why = dlerror();
        lib.error = std::string("dlopen ") + path + ": " + (why != nullptr ? why : "unknown error");
        return lib;
    }
    using GetCreators = IPluginCreatorInterface* const* (*)(int32_t&);
    using SetLoggerFinder = void (*)(ILoggerFinder*);
    auto getCreators = reinterpret_cast<GetCreators>(dlsym(lib.handle, "getCreators"));
    auto setLoggerFinder = reinterpret_cast<SetLoggerFinder>(dlsym(lib.handle, "setLoggerFinder"));
    if (getCreators == nullptr || setLoggerFinder == nullptr)
    {
        lib.error = std::string(path) + " does not export getCreators and setLoggerFinder";
        return lib;
    }
    setLoggerFinder(finder);
    IPluginCreatorInterface* const* creators = getCreators(lib.nbCreators);
    for (int32_t i = 0; creators != nullptr && i < lib.nbCreators; ++i)
    {
        if (std::strcmp(creators[i]->getInterfaceInfo().kind, "PLUGIN CREATOR_V3ONE") != 0)
        {
            continue;
        }
        auto* c = static_cast<IPluginCreatorV3One*>(creators[i]);
        if (std::strcmp(c->getPluginName(), "DynamicResize") == 0)
        {
            lib.resize = c;
        }
        else if (std::strcmp(c->getPluginName(), "DeformConv2d") == 0)
        {
            lib.deform = c;
        }
    }
    return lib;
}

} // namespace srtest
