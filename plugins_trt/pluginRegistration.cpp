// Entry points TensorRT looks up when it loads this library (IPluginRegistry::loadLibrary,
// trt.get_plugin_registry().load_library(path), trtexec --dynamicPlugins=...). They are the only exported symbols.
#include "common/pluginCommon.h"
#include "deformConv2d/deformConv2dPlugin.h"
#include "dynamicResize/dynamicResizePlugin.h"

#include <NvInferRuntime.h>

#define SR_PLUGIN_EXPORT __attribute__((visibility("default")))

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
