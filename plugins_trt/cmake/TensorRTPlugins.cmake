# TensorRT plugin library (libsr_trt_plugins.so) and its host-side self-test. Included by plugins_trt/CMakeLists.txt.
#
# Needs: TensorRT C++ headers (>= 10, IPluginV3), found through -DTENSORRT_ROOT=<dir with include/> (or the
# TENSORRT_ROOT environment variable) or -DTensorRT_INCLUDE_DIR=<dir with NvInferVersion.h>, else the usual system
# locations; and the CUDA launchers (target sr_cuda_kernels, which brings cudart and cuBLAS).
# The library does not link libnvinfer: TensorRT loads it (IPluginRegistry::loadLibrary,
# trt.get_plugin_registry().load_library, trtexec --dynamicPlugins) and calls getCreators / setLoggerFinder.

set(TENSORRT_ROOT "$ENV{TENSORRT_ROOT}" CACHE PATH "TensorRT install or header root (contains include/NvInfer.h)")
set(TensorRT_INCLUDE_DIR "" CACHE PATH "Directory holding NvInferVersion.h (overrides TENSORRT_ROOT)")

set(SR_TRT_STATUS "")
set(SR_TRT_HINTS)
if(TensorRT_INCLUDE_DIR)
  list(APPEND SR_TRT_HINTS "${TensorRT_INCLUDE_DIR}")
endif()
if(TENSORRT_ROOT)
  list(APPEND SR_TRT_HINTS "${TENSORRT_ROOT}/include" "${TENSORRT_ROOT}")
endif()
unset(SR_TENSORRT_INCLUDE_DIR CACHE)
find_path(SR_TENSORRT_INCLUDE_DIR NvInferVersion.h
  HINTS ${SR_TRT_HINTS}
  PATHS /usr/include/x86_64-linux-gnu /usr/include/aarch64-linux-gnu /usr/local/TensorRT/include /usr/include)

if(NOT SR_TENSORRT_INCLUDE_DIR)
  set(SR_TRT_STATUS "skipped: TensorRT headers not found (NvInferVersion.h); pass -DTENSORRT_ROOT=<dir with include/> or -DTensorRT_INCLUDE_DIR=<dir>")
elseif(NOT EXISTS "${SR_TENSORRT_INCLUDE_DIR}/NvInferRuntime.h")
  set(SR_TRT_STATUS "skipped: ${SR_TENSORRT_INCLUDE_DIR} has NvInferVersion.h but no NvInferRuntime.h")
else()
  # TensorRT 10 names the macros TRT_*_ENTERPRISE (NV_TENSORRT_* are aliases); older releases define NV_TENSORRT_*.
  file(READ "${SR_TENSORRT_INCLUDE_DIR}/NvInferVersion.h" SR_TRT_VERSION_H)
  foreach(part MAJOR MINOR PATCH)
    string(REGEX MATCH "#define (TRT_${part}_ENTERPRISE|NV_TENSORRT_${part}) +([0-9]+)" _m "${SR_TRT_VERSION_H}")
    set(SR_TRT_${part} "${CMAKE_MATCH_2}")
  endforeach()
  set(SR_TRT_VERSION "${SR_TRT_MAJOR}.${SR_TRT_MINOR}.${SR_TRT_PATCH}")
  if(NOT SR_TRT_MAJOR OR SR_TRT_MAJOR LESS 10)
    set(SR_TRT_STATUS "skipped: TensorRT headers ${SR_TENSORRT_INCLUDE_DIR} are version '${SR_TRT_VERSION}'; IPluginV3 needs TensorRT 10 or newer")
  elseif(NOT TARGET sr_cuda_kernels)
    set(SR_TRT_STATUS "skipped: the CUDA kernels are not built (${SR_CUDA_STATUS})")
  endif()
endif()

if(SR_TRT_STATUS)
  message(STATUS "sr: TensorRT plugins: ${SR_TRT_STATUS}")
  return()
endif()

set(SR_TRT_PLUGIN_SOURCES
  ${SR_KERNELS_DIR}/common/pluginCommon.cpp
  ${SR_KERNELS_DIR}/dynamicResize/dynamicResizePlugin.cpp
  ${SR_KERNELS_DIR}/deformConv2d/deformConv2dPlugin.cpp
  ${SR_KERNELS_DIR}/pluginRegistration.cpp)

add_library(sr_trt_plugins SHARED ${SR_TRT_PLUGIN_SOURCES})
target_include_directories(sr_trt_plugins PRIVATE ${SR_KERNELS_DIR})
# Third-party headers as SYSTEM: -Werror applies to our code, not to TensorRT's deprecation warnings.
target_include_directories(sr_trt_plugins SYSTEM PRIVATE ${SR_TENSORRT_INCLUDE_DIR} ${CUDAToolkit_INCLUDE_DIRS}
  ${SR_CUBLAS_INCLUDE_DIR})
target_link_libraries(sr_trt_plugins PRIVATE sr_cuda_kernels)
target_compile_options(sr_trt_plugins PRIVATE ${SR_WARNINGS})
# Only the two TensorRT entry points leave the library (the version script also hides the static launchers), and
# --no-undefined proves nothing is left for libnvinfer to provide.
set(SR_TRT_EXPORT_MAP ${CMAKE_CURRENT_BINARY_DIR}/sr_trt_plugins.map)
file(WRITE ${SR_TRT_EXPORT_MAP} "{\n  global:\n    getCreators;\n    setLoggerFinder;\n  local:\n    *;\n};\n")
set_target_properties(sr_trt_plugins PROPERTIES
  CXX_VISIBILITY_PRESET hidden
  VISIBILITY_INLINES_HIDDEN ON
  LINK_DEPENDS ${SR_TRT_EXPORT_MAP})
target_link_options(sr_trt_plugins PRIVATE "LINKER:--version-script=${SR_TRT_EXPORT_MAP}" "LINKER:--no-undefined")

# Host-side self-test: dlopens the library like TensorRT and drives the creators and build-time API (no GPU).
add_executable(trt_plugin_selftest ${SR_KERNELS_DIR}/tests/trtPluginSelfTest.cpp)
target_include_directories(trt_plugin_selftest PRIVATE ${SR_KERNELS_DIR})
target_include_directories(trt_plugin_selftest SYSTEM PRIVATE ${SR_TENSORRT_INCLUDE_DIR} ${CUDAToolkit_INCLUDE_DIRS})
target_compile_definitions(trt_plugin_selftest PRIVATE SR_TRT_PLUGIN_LIBRARY="$<TARGET_FILE:sr_trt_plugins>")
target_compile_options(trt_plugin_selftest PRIVATE ${SR_WARNINGS})
target_link_libraries(trt_plugin_selftest PRIVATE ${CMAKE_DL_LIBS})
add_dependencies(trt_plugin_selftest sr_trt_plugins)

message(STATUS "sr: TensorRT plugins: building libsr_trt_plugins.so + trt_plugin_selftest against TensorRT headers ${SR_TRT_VERSION} (${SR_TENSORRT_INCLUDE_DIR})")
