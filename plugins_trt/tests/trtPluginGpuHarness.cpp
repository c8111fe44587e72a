// GPU harness for libsr_trt_plugins.so that needs no TensorRT library: it drives each plugin's whole IPluginV3 life
// the way TensorRT would, on a GPU with CUDA alone, and compares every output with libsr_kernels_cpu.
//
// Per plugin, type (FP32/FP16) and case: createPlugin from a PluginFieldCollection as the ONNX parser builds it (int
// attributes as kINT32 plus plugin_namespace / plugin_version / tensorrt_plugin_shape_input_indices),
// getFieldsToSerialize -> createPlugin(kRUNTIME) round trip, getOutputDataTypes, supportsFormatCombination,
// getOutputShapes through our own IExprBuilder, configurePlugin + getWorkspaceSize with dynamic min/opt/max,
// attachToContext, then for several shapes on that one instance: onShapeChange, enqueue on cudaMalloc buffers on a
// non-default stream, directly and captured into a CUDA graph (global capture mode, so any allocation fails the
// capture) and replayed, with exactly getWorkspaceSize bytes of workspace between two canary regions that must stay
// untouched (outputs and inputs are guarded the same way, and inputs must come back unchanged).
//
// Usage: trt_plugin_gpu_harness [--host-only] [--library PATH]
// Exit codes: 0 all checks passed; 1 a check failed; 2 bad usage or the library could not be loaded; 3 no CUDA
// device (every host-side step still ran and passed). --host-only runs the host-side steps and exits 0/1.
#include "tests/harnessCases.h"

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

using namespace nvinfer1;
using namespace srtest;

namespace
{

constexpr int kEXIT_PASS = 0;
constexpr int kEXIT_FAIL = 1;
constexpr int kEXIT_USAGE = 2;
constexpr int kEXIT_NO_GPU = 3;

// TensorRT's resource context is not public; our plugins use neither of its resources.
class NullResourceContext final : public IPluginResourceContext
{
public:
    IGpuAllocator* getGpuAllocator() const noexcept override
    {
        return nullptr;
    }
    IErrorRecorder* getErrorRecorder() const noexcept override
    {
        return nullptr;
    }
};

// ---- Host encoding of FP32 / FP16 tensors --------------------------------------------------------------------------
std::vector<unsigned char> encode(std::vector<float> const& v, bool fp16)
{
    std::vector<unsigned char> bytes(v.size() * (fp16 ? sizeof(__half) : sizeof(float)));
    for (size_t i = 0; i < v.size(); ++i)
    {
        if (fp16)
        {
            __half const h = __float2half_rn(v[i]);
            std::memcpy(bytes.data() + i * sizeof(__half), &h, sizeof h);
        }
        else
        {
            std::memcpy(bytes.data() + i * sizeof(float), &v[i], sizeof(float));
        }
    }
    return bytes;
}

std::vector<float> decode(std::vector<unsigned char> const& bytes, bool fp16)
{
    size_t const elem = fp16 ? sizeof(__half) : sizeof(float);
    std::vector<float> v(bytes.size() / elem);
    for (size_t i = 0; i < v.size(); ++i)
    {
        if (fp16)
        {
            __half h;
            std::memcpy(&h, bytes.data() + i * elem, sizeof h);
            v[i] = __half2float(h);
        }
        else
        {
            std::memcpy(&v[i], bytes.data() + i * elem, sizeof(float));
        }
    }
    return v;
}

size_t volume(Dims const& d)
{
    size_t v = 1;
    for (int32_t i = 0; i < d.nbDims; ++i)
    {
        v *= static_cast<size_t>(d.d[i]);
    }
    return v;
}

// Host-side stand-in for the GPU comparison: the encode/decode and comparison code run on the reference itself.
void checkHostRoundTrip(std::vector<float> const& ref, bool fp16, std::string const& label)
{
    Comparison const c = compareOutputs(decode(encode(ref, fp16), fp16), ref, toleranceFor(fp16, false));
    check(c.ok, label + ": host encode/decode of the CPU reference within tolerance (" + c.summary() + ")");
}

// ---- Device memory with canaries ------------------------------------------------------------------------------------
constexpr size_t kCANARY_BYTES = 4096; // a multiple of 256, so data() keeps cudaMalloc's alignment
constexpr unsigned char kCANARY = 0xA5;

// Every transfer and fill runs on the stream the plugins are enqueued on, and the host waits for it: a plain
// cudaMemcpy from pageable memory may return before its DMA lands, and cudaMemset runs on the legacy default stream,
// which a non-blocking stream does not wait for. So the kernels could read inputs still arriving (seen as random
// FAIL lines when other GPU work ran beside the harness). tests/test_trt_plugins.py checks that no other copy exists.
cudaError_t streamCopy(void* dst, void const* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream)
{
    cudaError_t const e = cudaMemcpyAsync(dst, src, bytes, kind, stream);
    return e == cudaSuccess ? cudaStreamSynchronize(stream) : e;
}

cudaError_t streamFill(void* dst, unsigned char value, size_t bytes, cudaStream_t stream)
{
    cudaError_t const e = cudaMemsetAsync(dst, value, bytes, stream);
    return e == cudaSuccess ? cudaStreamSynchronize(stream) : e;
}

class DeviceBuffer
{
public:
    DeviceBuffer() = default;
    DeviceBuffer(DeviceBuffer const&) = delete;
    DeviceBuffer& operator=(DeviceBuffer const&) = delete;
    ~DeviceBuffer()
    {
        if (mBase != nullptr)
        {
            cudaFree(mBase);
        }
    }
    // `bytes` of payload between two canary regions; everything starts as the canary pattern. Its copies and fills
    // run on `stream` (the one the plugins are enqueued on) and are waited for.
    cudaError_t allocate(size_t bytes, cudaStream_t stream)
    {
        mBytes = bytes;
        mStream = stream;
        cudaError_t e = cudaMalloc(&mBase, bytes + 2 * kCANARY_BYTES);
        return e == cudaSuccess ? streamFill(mBase, kCANARY, bytes + 2 * kCANARY_BYTES, mStream) : e;
    }
    void* data() const
    {
        return static_cast<char*>(mBase) + kCANARY_BYTES;
    }
    size_t bytes() const
    {
        return mBytes;
    }
    bool canariesIntact() const
    {
        std::vector<unsigned char> head(kCANARY_BYTES);
        std::vector<unsigned char> tail(kCANARY_BYTES);
        if (streamCopy(head.data(), mBase, kCANARY_BYTES, cudaMemcpyDeviceToHost, mStream) != cudaSuccess
            || streamCopy(
                   tail.data(), static_cast<char*>(data()) + mBytes, kCANARY_BYTES, cudaMemcpyDeviceToHost, mStream)
                != cudaSuccess)
        {
            return false;
        }
        for (size_t i = 0; i < kCANARY_BYTES; ++i)
        {
            if (head[i] != kCANARY || tail[i] != kCANARY)
            {
                return false;
            }
        }
        return true;
    }
    cudaError_t upload(std::vector<unsigned char> const& bytes) const
    {
        return streamCopy(data(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice, mStream);
    }
    std::vector<unsigned char> download() const
    {
        std::vector<unsigned char> bytes(mBytes);
        if (streamCopy(bytes.data(), data(), mBytes, cudaMemcpyDeviceToHost, mStream) != cudaSuccess)
        {
            bytes.clear();
        }
        return bytes;
    }

private:
    void* mBase {nullptr};
    size_t mBytes {0};
    cudaStream_t mStream {nullptr};
};

std::string cudaText(cudaError_t e)
{
    return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

// ---- One problem on the GPU: inputs uploaded, enqueue direct and through a CUDA graph
// --------------------------------
struct Problem
{
    std::string label;
    bool fp16 {false};
    Tolerance tol {};
    std::vector<PluginTensorDesc> inDesc;
    PluginTensorDesc outDesc {};
    std::vector<std::vector<unsigned char>> inBytes; // as uploaded (FP32/FP16 data; raw bytes for the size tensor)
    std::vector<float> reference;
};

// Runs `p` on the attached instance with `workspace` (exactly getWorkspaceSize bytes) and reports ok/FAIL lines.
// probePendingError: also enqueue once right after a failed cudaMalloc left a (non-sticky) error pending, which the
// plugin must report as not its own and survive.
void runOnGpu(IPluginV3OneRuntime* rt, Problem const& p, DeviceBuffer const& workspace, cudaStream_t stream,
    CapturingLogger& logger, bool probePendingError = false)
{
    std::vector<DeviceBuffer> ins(p.inBytes.size());
    std::vector<void const*> inPtrs;
    for (size_t i = 0; i < ins.size(); ++i)
    {
        cudaError_t const e = ins[i].allocate(p.inBytes[i].size(), stream);
        if (e != cudaSuccess || ins[i].upload(p.inBytes[i]) != cudaSuccess)
        {
            check(false, p.label + ": input upload (" + cudaText(e) + ")");
            return;
        }
        inPtrs.push_back(ins[i].data());
    }
    DeviceBuffer out;
    size_t const outBytes = volume(p.outDesc.dims) * (p.fp16 ? sizeof(__half) : sizeof(float));
    if (cudaError_t const e = out.allocate(outBytes, stream); e != cudaSuccess)
    {
        check(false, p.label + ": output allocation (" + cudaText(e) + ")");
        return;
    }
    void* outPtrs[1] = {out.data()};
    void* ws = workspace.bytes() != 0 ? workspace.data() : nullptr;

    auto verify = [&](std::string const& how)
    {
        std::vector<float> const got = decode(out.download(), p.fp16);
        Comparison const c = compareOutputs(got, p.reference, p.tol);
        check(c.ok, p.label + ": " + how + " matches libsr_kernels_cpu (" + c.summary() + ")");
    };

    // 1. Direct enqueue; the output starts as NaN (0xFF bytes) so a skipped element cannot pass.
    logger.clear();
    cudaMemsetAsync(out.data(), 0xFF, outBytes, stream);
    int32_t const rc = rt->enqueue(p.inDesc.data(), &p.outDesc, inPtrs.data(), outPtrs, ws, stream);
    cudaError_t const synced = cudaStreamSynchronize(stream);
    check(rc == 0 && synced == cudaSuccess && logger.empty(),
        p.label + ": enqueue on a non-default stream (rc " + std::to_string(rc) + ", " + cudaText(synced)
            + ", log: " + logger.last() + ")");
    verify("direct enqueue");

    if (probePendingError)
    {
        void* huge = nullptr;
        // scripts/sanitize_harness.py counts these lines: compute-sanitizer reports each probe, on purpose.
        std::printf("# planted out-of-memory probe: cudaMalloc of 2^62 bytes\n");
        cudaError_t const left = cudaMalloc(&huge, size_t(1) << 62); // fails and leaves the error pending
        logger.clear();
        int32_t const rcPending = rt->enqueue(p.inDesc.data(), &p.outDesc, inPtrs.data(), outPtrs, ws, stream);
        cudaError_t const after = cudaStreamSynchronize(stream);
        check(left != cudaSuccess && rcPending == 0 && after == cudaSuccess && logger.mentions("not by this layer"),
            p.label + ": an error pending from earlier work is reported as not this layer's, and the layer runs ("
                + cudaText(left) + ", log: " + logger.last() + ")");
        verify("enqueue after an earlier failed call");
    }

    // 2. Captured into a CUDA graph (global mode: an allocation or sync inside enqueue breaks the capture), replayed.
    cudaMemsetAsync(out.data(), 0xFF, outBytes, stream);
    cudaStreamSynchronize(stream);
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    logger.clear();
    cudaError_t e = cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal);
    int32_t const rcCaptured
        = e == cudaSuccess ? rt->enqueue(p.inDesc.data(), &p.outDesc, inPtrs.data(), outPtrs, ws, stream) : -1;
    cudaError_t const ended = cudaStreamEndCapture(stream, &graph);
    if (e == cudaSuccess)
    {
        e = ended;
    }
    if (e == cudaSuccess)
    {
        e = cudaGraphInstantiate(&exec, graph, 0);
    }
    for (int replay = 0; replay < 2 && e == cudaSuccess; ++replay)
    {
        e = cudaGraphLaunch(exec, stream);
    }
    if (e == cudaSuccess)
    {
        e = cudaStreamSynchronize(stream);
    }
    check(rcCaptured == 0 && e == cudaSuccess,
        p.label + ": enqueue captured into a CUDA graph and replayed twice (rc " + std::to_string(rcCaptured) + ", "
            + cudaText(e) + ", log: " + logger.last() + ")");
    if (exec != nullptr)
    {
        cudaGraphExecDestroy(exec);
    }
    if (graph != nullptr)
    {
        cudaGraphDestroy(graph);
    }
    cudaGetLastError(); // a failed capture leaves an error; it is reported above and must not leak into the next case
    verify("CUDA graph replay");

    // 3. Nothing written outside the output, and nothing written to the inputs.
    bool inputsIntact = true;
    for (size_t i = 0; i < ins.size(); ++i)
    {
        inputsIntact = inputsIntact && ins[i].canariesIntact() && ins[i].download() == p.inBytes[i];
    }
    check(workspace.canariesIntact(),
        p.label + ": workspace canaries untouched (" + std::to_string(workspace.bytes()) + " bytes used at most)");
    check(out.canariesIntact() && inputsIntact, p.label + ": output canaries untouched, inputs unchanged");
}

// ---- Plugin life helpers -------------------------------------------------------------------------------------------
// serialize -> createPlugin(kRUNTIME) -> serialize gives the same fields (names, types, values).
IPluginV3* roundTrip(IPluginCreatorV3One* creator, PluginParts const& built, char const* name, std::string const& label)
{
    PluginFieldCollection const* ser = built.runtime->getFieldsToSerialize();
    IPluginV3* again = ser != nullptr ? creator->createPlugin(name, ser, TensorRTPhase::kRUNTIME) : nullptr;
    bool same = again != nullptr;
    if (same)
    {
        PluginFieldCollection const* ser2 = parts(again).runtime->getFieldsToSerialize();
        same = ser2 != nullptr && ser2->nbFields == ser->nbFields;
        for (int32_t i = 0; same && i < ser->nbFields; ++i)
        {
            PluginField const* f = findField(ser2, ser->fields[i].name);
            same = f != nullptr && f->type == ser->fields[i].type && fieldValues(*f) == fieldValues(ser->fields[i]);
        }
    }
    check(same, label + ": getFieldsToSerialize -> createPlugin(kRUNTIME) -> same fields");
    return again;
}

DynamicPluginTensorDesc rangeDesc(Dims const& lo, Dims const& hi, DataType type)
{
    DynamicPluginTensorDesc t {};
    t.desc.type = type;
    t.desc.format = TensorFormat::kLINEAR;
    t.desc.scale = -1.0F;
    t.desc.dims = lo;
    for (int32_t i = 0; i < lo.nbDims; ++i)
    {
        t.desc.dims.d[i] = lo.d[i] == hi.d[i] ? lo.d[i] : -1; // dynamic extents are -1 at build time
    }
    t.min = lo;
    t.opt = hi;
    t.max = hi;
    return t;
}

// Element-wise min / max of a list of dims of one rank.
Dims extreme(std::vector<Dims> const& all, bool takeMax)
{
    Dims r = all.front();
    for (Dims const& d : all)
    {
        for (int32_t i = 0; i < d.nbDims; ++i)
        {
            r.d[i] = takeMax ? std::max(r.d[i], d.d[i]) : std::min(r.d[i], d.d[i]);
        }
    }
    return r;
}

bool supportsAll(IPluginV3OneBuild* build, std::vector<DynamicPluginTensorDesc> const& io, int32_t nbInputs)
{
    bool all = true;
    for (int32_t pos = 0; pos <= nbInputs; ++pos)
    {
        all = all && build->supportsFormatCombination(pos, io.data(), nbInputs, 1);
    }
    return all;
}

struct GpuContext
{
    bool present {false};
    cudaStream_t stream {nullptr};
};

// ---- DynamicResize -------------------------------------------------------------------------------------------------
void runResize(IPluginCreatorV3One* creator, CapturingLogger& logger, bool fp16, bool sizeCounted, GpuContext& gpu)
{
    std::string const label = std::string("DynamicResize ") + (fp16 ? "FP16" : "FP32")
        + (sizeCounted ? " (size counted as input 1)" : " (size as shape input only)");
    std::printf("# %s\n", label.c_str());
    DataType const dt = fp16 ? DataType::kHALF : DataType::kFLOAT;
    int32_t const nbIn = sizeCounted ? 2 : 1;
    ParserFields fields(true);
    logger.clear();
    IPluginV3* built = creator->createPlugin("resize", fields.collection(), TensorRTPhase::kBUILD);
    check(built != nullptr && logger.empty(), label + ": createPlugin with the ONNX parser's fields");
    if (built == nullptr)
    {
        return;
    }
    PluginParts b = parts(built);
    IPluginV3* runtimePlugin = roundTrip(creator, b, "resize", label);

    DataType types[2] = {dt, DataType::kINT64};
    DataType outType {};
    check(b.build->getOutputDataTypes(&outType, 1, types, nbIn) == 0 && outType == dt, label + ": output type");

    std::vector<ResizeShape> const shapes = resizeShapes();
    TestExprBuilder eb;
    bool shapesOk = true;
    std::vector<Dims> inDims;
    std::vector<Dims> outDims;
    for (ResizeShape const& s : shapes)
    {
        DimsExprs x {};
        x.nbDims = 4;
        x.d[0] = eb.symbolic(s.n);
        x.d[1] = eb.fixed(s.c);
        x.d[2] = eb.symbolic(s.hIn);
        x.d[3] = eb.symbolic(s.wIn);
        DimsExprs size {};
        size.nbDims = 2;
        size.d[0] = eb.symbolic(s.hOut);
        size.d[1] = eb.symbolic(s.wOut);
        DimsExprs ins[2] = {x, size};
        DimsExprs y {};
        shapesOk = shapesOk && b.build->getOutputShapes(ins, nbIn, &size, 1, &y, 1, eb) == 0 && y.nbDims == 4
            && valueOf(y.d[0]) == s.n && valueOf(y.d[1]) == s.c && valueOf(y.d[2]) == s.hOut
            && valueOf(y.d[3]) == s.wOut;
        inDims.push_back(dims4(s.n, s.c, s.hIn, s.wIn));
        outDims.push_back(dims4(s.n, s.c, s.hOut, s.wOut));
    }
    check(shapesOk, label + ": getOutputShapes = [N, C, size[0], size[1]] for every shape");

    std::vector<DynamicPluginTensorDesc> io {rangeDesc(extreme(inDims, false), extreme(inDims, true), dt)};
    if (sizeCounted)
    {
        io.push_back(rangeDesc(dims1(2), dims1(2), DataType::kINT64));
    }
    io.push_back(rangeDesc(extreme(outDims, false), extreme(outDims, true), dt));
    check(supportsAll(b.build, io, nbIn), label + ": supportsFormatCombination accepts every position");
    logger.clear();
    check(b.build->configurePlugin(io.data(), nbIn, &io[nbIn], 1) == 0 && logger.empty(),
        label + ": configurePlugin with a dynamic min/opt/max profile");
    size_t const wsBytes = b.build->getWorkspaceSize(io.data(), nbIn, &io[nbIn], 1);
    check(wsBytes == 0, label + ": getWorkspaceSize = 0");

    NullResourceContext context;
    IPluginV3* attached = runtimePlugin != nullptr ? parts(runtimePlugin).runtime->attachToContext(&context) : nullptr;
    check(attached != nullptr, label + ": attachToContext");
    DeviceBuffer workspace;
    if (gpu.present && workspace.allocate(wsBytes, gpu.stream) != cudaSuccess)
    {
        check(false, label + ": workspace allocation");
        gpu.present = false;
    }
    for (size_t i = 0; attached != nullptr && i < shapes.size(); ++i)
    {
        ResizeShape const& s = shapes[i];
        std::string const caseLabel
            = label + " " + s.what + " " + dimsToString(inDims[i]) + " -> " + dimsToString(outDims[i]);
        Problem p;
        p.label = caseLabel;
        p.fp16 = fp16;
        p.tol = toleranceFor(fp16, false);
        p.inDesc.push_back(tensorDesc(inDims[i], dt).desc);
        if (sizeCounted)
        {
            p.inDesc.push_back(tensorDesc(dims1(2), DataType::kINT64).desc);
        }
        p.outDesc = tensorDesc(outDims[i], dt).desc;
        logger.clear();
        check(parts(attached).runtime->onShapeChange(p.inDesc.data(), nbIn, &p.outDesc, 1) == 0 && logger.empty(),
            caseLabel + ": onShapeChange on the attached instance");
        Rng rng(1000 + i + (fp16 ? 100 : 0));
        std::vector<float> const x = rng.fill(volume(inDims[i]), -1.0F, 1.0F);
        std::string const err = resizeReference(s, x, p.reference, fp16);
        check(err.empty(), caseLabel + ": CPU reference " + err);
        if (!gpu.present)
        {
            checkHostRoundTrip(p.reference, fp16, caseLabel);
            continue;
        }
        p.inBytes.push_back(encode(x, fp16));
        if (sizeCounted)
        {
            int64_t const size[2] = {s.hOut, s.wOut};
            p.inBytes.emplace_back(reinterpret_cast<unsigned char const*>(size),
                reinterpret_cast<unsigned char const*>(size) + sizeof size);
        }
        runOnGpu(parts(attached).runtime, p, workspace, gpu.stream, logger, i == 0);
    }
    delete attached;
    delete runtimePlugin;
    delete built;
}

// ---- DeformConv2d --------------------------------------------------------------------------------------------------
void runDeform(IPluginCreatorV3One* creator, CapturingLogger& logger, DeformGroup const& g, size_t groupIndex,
    bool fp16, int32_t impl, GpuContext& gpu, bool hostOnly)
{
    std::string const label
        = std::string("DeformConv2d ") + deformImplName(impl) + " " + (fp16 ? "FP16" : "FP32") + " [" + g.name + "]";
    std::printf("# %s\n", label.c_str());
    DataType const dt = fp16 ? DataType::kHALF : DataType::kFLOAT;
    ParserFields fields(false);
    addDeformAttributes(fields, g);
    fields.addInts("impl", {impl});
    logger.clear();
    IPluginV3* built = creator->createPlugin("dcn", fields.collection(), TensorRTPhase::kBUILD);
    check(built != nullptr && logger.empty(), label + ": createPlugin with the ONNX parser's INT32 fields");
    if (built == nullptr)
    {
        return;
    }
    PluginParts b = parts(built);
    IPluginV3* runtimePlugin = roundTrip(creator, b, "dcn", label);

    std::vector<DataType> types(g.nbInputs, dt);
    DataType outType {};
    check(b.build->getOutputDataTypes(&outType, 1, types.data(), g.nbInputs) == 0 && outType == dt,
        label + ": output type");

    // Output shapes through the expression builder, with symbolic N/H/W as in a dynamic profile.
    TestExprBuilder eb;
    bool shapesOk = true;
    std::vector<std::vector<Dims>> perTensor(g.nbInputs + 1);
    for (DeformShape const& s : g.shapes)
    {
        std::vector<Dims> const dims = deformDims(g, s);
        std::vector<DimsExprs> ins(g.nbInputs);
        for (int32_t t = 0; t < g.nbInputs; ++t)
        {
            ins[t].nbDims = dims[t].nbDims;
            for (int32_t j = 0; j < dims[t].nbDims; ++j)
            {
                // N, H, W of X, offset and mask vary in the profile; channels, W and B are fixed.
                bool const dynamic = (t == 0 || t == 2 || t == 4) && j != 1;
                ins[t].d[j] = dynamic ? eb.symbolic(dims[t].d[j]) : eb.fixed(dims[t].d[j]);
            }
        }
        DimsExprs y {};
        Dims const& want = dims[g.nbInputs];
        shapesOk = shapesOk && b.build->getOutputShapes(ins.data(), g.nbInputs, nullptr, 0, &y, 1, eb) == 0
            && y.nbDims == 4 && valueOf(y.d[0]) == want.d[0] && valueOf(y.d[1]) == want.d[1]
            && valueOf(y.d[2]) == want.d[2] && valueOf(y.d[3]) == want.d[3];
        for (int32_t t = 0; t <= g.nbInputs; ++t)
        {
            perTensor[t].push_back(dims[t]);
        }
    }
    check(shapesOk, label + ": getOutputShapes = [N, C_out, H_out, W_out] for every shape");

    std::vector<DynamicPluginTensorDesc> io;
    for (auto const& all : perTensor)
    {
        io.push_back(rangeDesc(extreme(all, false), extreme(all, true), dt));
    }
    check(supportsAll(b.build, io, g.nbInputs), label + ": supportsFormatCombination accepts every position");
    logger.clear();
    check(b.build->configurePlugin(io.data(), g.nbInputs, &io[g.nbInputs], 1) == 0 && logger.empty(),
        label + ": configurePlugin with a dynamic min/opt/max profile");
    size_t const wsBytes = b.build->getWorkspaceSize(io.data(), g.nbInputs, &io[g.nbInputs], 1);
    Dims const yMax = io[g.nbInputs].max;
    size_t const minimum = sr_deform_conv2d_min_workspace_impl(static_cast<int>(yMax.d[0]), g.c, g.k, g.k,
        static_cast<int>(yMax.d[2]), static_cast<int>(yMax.d[3]), fp16 ? 2 : 4, g.shapes.size() == 1 ? 1 : 0, impl);
    // The fused kernel needs no workspace; im2col its columns and the cuBLAS slice.
    check((impl == sr::kDeformConvFused ? wsBytes == 0 : wsBytes > 0) && wsBytes == minimum,
        label + ": getWorkspaceSize " + std::to_string(wsBytes) + " = sr_deform_conv2d_min_workspace "
            + std::to_string(minimum));

    if (hostOnly || !gpu.present)
    {
        // attachToContext creates a cuBLAS handle and enqueue needs the GPU: only the references run here (the
        // first shape, to keep CI quick).
        DeformData d = makeDeformData(g, g.shapes.front(), groupIndex);
        std::string const err = deformReference(g, g.shapes.front(), d, fp16);
        check(err.empty(), label + ": CPU reference " + err);
        checkHostRoundTrip(d.reference, fp16, label);
        std::printf("skip %s: attachToContext / onShapeChange / enqueue need a GPU\n", label.c_str());
        delete runtimePlugin;
        delete built;
        return;
    }

    NullResourceContext context;
    IPluginV3* attached = runtimePlugin != nullptr ? parts(runtimePlugin).runtime->attachToContext(&context) : nullptr;
    check(attached != nullptr, label + ": attachToContext (creates the cuBLAS handle)");
    DeviceBuffer workspace;
    if (workspace.allocate(wsBytes, gpu.stream) != cudaSuccess)
    {
        check(false, label + ": workspace allocation of " + std::to_string(wsBytes) + " bytes");
        attached = nullptr;
    }
    for (size_t si = 0; attached != nullptr && si < g.shapes.size(); ++si)
    {
        DeformShape const& s = g.shapes[si];
        DeformData d = makeDeformData(g, s, groupIndex * 100 + si);
        Problem p;
        p.label = label + " " + dimsToString(d.dims[0]) + " -> " + dimsToString(d.dims[g.nbInputs]);
        p.fp16 = fp16;
        p.tol = toleranceFor(fp16, g.allowTf32);
        for (int32_t t = 0; t < g.nbInputs; ++t)
        {
            p.inDesc.push_back(tensorDesc(d.dims[t], dt).desc);
            p.inBytes.push_back(encode(d.inputs[t], fp16));
        }
        p.outDesc = tensorDesc(d.dims[g.nbInputs], dt).desc;
        logger.clear();
        check(parts(attached).runtime->onShapeChange(p.inDesc.data(), g.nbInputs, &p.outDesc, 1) == 0 && logger.empty(),
            p.label + ": onShapeChange on the attached instance");
        std::string const err = deformReference(g, s, d, fp16);
        check(err.empty(), p.label + ": CPU reference " + err);
        p.reference = std::move(d.reference);
        runOnGpu(parts(attached).runtime, p, workspace, gpu.stream, logger, si == 0);
    }
    delete attached;
    delete runtimePlugin;
    delete built;
}

} // namespace

int main(int argc, char** argv)
{
    char const* path = SR_TRT_PLUGIN_LIBRARY;
    bool hostOnly = false;
    for (int i = 1; i < argc; ++i)
    {
        if (std::strcmp(argv[i], "--host-only") == 0)
        {
            hostOnly = true;
        }
        else if (std::strcmp(argv[i], "--library") == 0 && i + 1 < argc)
        {
            path = argv[++i];
        }
        else
        {
            std::fprintf(stderr, "usage: %s [--host-only] [--library PATH]\n", argv[0]);
            return kEXIT_USAGE;
        }
    }
    static TestLoggerFinder finder;
    PluginLibrary const lib = loadPluginLibrary(path, &finder);
    if (!lib.error.empty() || lib.resize == nullptr || lib.deform == nullptr)
    {
        std::printf("FAIL %s\n", lib.error.empty() ? "the library lacks the sr creators" : lib.error.c_str());
        return kEXIT_USAGE;
    }

    GpuContext gpu;
    std::string noGpu;
    if (!hostOnly)
    {
        int count = 0;
        cudaError_t const e = cudaGetDeviceCount(&count);
        if (e != cudaSuccess || count == 0)
        {
            noGpu = e != cudaSuccess ? cudaText(e) : "no device";
            cudaGetLastError();
        }
        else if (cudaError_t const s = cudaStreamCreateWithFlags(&gpu.stream, cudaStreamNonBlocking); s != cudaSuccess)
        {
            check(false, "cudaStreamCreateWithFlags: " + cudaText(s));
        }
        else
        {
            gpu.present = true;
            cudaDeviceProp prop {};
            cudaGetDeviceProperties(&prop, 0);
            std::printf("# GPU: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
        }
    }
    if (!gpu.present)
    {
        std::printf("# host-side steps only%s\n", noGpu.empty() ? "" : (" (no CUDA device: " + noGpu + ")").c_str());
    }

    for (bool fp16 : {false, true})
    {
        for (bool sizeCounted : {false, true})
        {
            runResize(lib.resize, finder.logger, fp16, sizeCounted, gpu);
        }
        std::vector<DeformGroup> const groups = deformGroups();
        for (size_t gi = 0; gi < groups.size(); ++gi)
        {
            if (fp16 && groups[gi].allowTf32)
            {
                continue; // TF32 concerns FP32 GEMMs only
            }
            for (int32_t impl : {sr::kDeformConvFused, sr::kDeformConvIm2col})
            {
                if (impl == sr::kDeformConvFused && groups[gi].im2colOnly)
                {
                    continue;
                }
                runDeform(lib.deform, finder.logger, groups[gi], gi, fp16, impl, gpu, hostOnly);
            }
        }
    }
    if (gpu.stream != nullptr)
    {
        cudaStreamDestroy(gpu.stream);
    }
    std::printf("# %d checks, %d failed\n", gChecks, gFailures);
    if (gFailures != 0)
    {
        return kEXIT_FAIL;
    }
    if (!hostOnly && !gpu.present)
    {
        std::printf("# no CUDA device: the enqueue steps did not run (exit %d)\n", kEXIT_NO_GPU);
        return kEXIT_NO_GPU;
    }
    return kEXIT_PASS;
}
