// Entry points TensorRT looks up when it loads this library (IPluginRegistry::loadLibrary,
// trt.get_plugin_registry().load_library(path), trtexec --dynamicPlugins=...). They are the only exported symbols.
#include "common/pluginCommon.h"
#include "deformConv2d/deformConv2dPlugin.h"
#include "dynamicResize/dynamicResizePlugin.h"

#include <NvInferRuntime.h>

#define SR_PLUGIN_EXPORT __attribute__((visibility("default")))

#ifndef SR_TRT_HEADERS_VERSION
#define SR_TRT_HEADERS_VERSION "unknown"
#endif
#ifndef SR_CUDA_TOOLKIT_VERSION
#define SR_CUDA_TOOLKIT_VERSION "unknown"
#endif

// What the library was built against, as one string in the file (not an exported symbol: TensorRT's plugin-library
// convention exports getCreators/setLoggerFinder only). `python -m pipeline doctor` reads it to compare with the
// installed TensorRT; `strings libsr_trt_plugins.so | grep SR_BUILD_INFO` shows it.
extern "C" __attribute__((used, visibility("hidden"))) char const srBuildInfo[]
    = "SR_BUILD_INFO tensorrt_headers=" SR_TRT_HEADERS_VERSION " cuda_toolkit=" SR_CUDA_TOOLKIT_VERSION
      " plugins=DynamicResize/1/sr,DeformConv2d/1/sr;";

extern "C" SR_PLUGIN_EXPORT void setLoggerFinder(nvinfer1::ILoggerFinder* finder)
{
    sr::plugin::setLoggerFinder(finder);
}

extern "C" SR_PLUGIN_EXPORT nvinfer1::IPluginCreatorInterface* const* getCreators(int32_t& nbCreators)
{
    // Function-local statics: created on first use, alive until the library is unloaded.
    static sr::plugin::DynamicResizePluginCreator sDynamicResizeCreator;
    static sr::plugin::DeformConv2dPluginCreator sDeformConv2dCreator;
    static nvinfer1::IPluginCreatorInterface* const sCreators[] = {&sDynamicResizeCreator, &sDeformConv2dCreator};
    nbCreators = static_cast<int32_t>(sizeof(sCreators) / sizeof(sCreators[0]));
    return sCreators;
}
