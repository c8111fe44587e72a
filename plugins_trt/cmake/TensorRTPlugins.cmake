# TensorRT plugin library (libsr_trt_plugins.so) and its host-side self-test. Included by plugins_trt/CMakeLists.txt.
#
# Needs: TensorRT C++ headers (>= 10, IPluginV3), found through -DTENSORRT_ROOT=<dir with include/> (or the
# TENSORRT_ROOT environment variable) or -DTensorRT_INCLUDE_DIR=<dir with NvInferVersion.h>, else the usual system
# locations; and the CUDA launchers (target sr_cuda_kernels, which brings cudart and cuBLAS).
# The library does not link libnvinfer: TensorRT loads it (IPluginRegistry::loadLibrary,
# trt.get_plugin_registry().load_library, trtexec --dynamicPlugins) and calls getCreators / setLoggerFinder.

set(TENSORRT_ROOT "$ENV{TENSORRT_ROOT}" CACHE PATH "TensorRT install or header root (contains include/NvInfer.h)")
set(TensorRT_INCLUDE_DIR "" CACHE PATH "Directory holding NvInferVersion.h (overrides TENSORRT_ROOT)")

# Where to look, in order: what the user named, then the Debian/RPM packages, the tar layouts, and the headers that
# `make trt-headers` fetched into build/trt-headers/<version>/ (newest first).
set(SR_TRT_HINTS)
set(SR_TRT_HINT_ORIGIN "")
if(TensorRT_INCLUDE_DIR)
  list(APPEND SR_TRT_HINTS "${TensorRT_INCLUDE_DIR}")
  set(SR_TRT_HINT_ORIGIN "TensorRT_INCLUDE_DIR")
elseif(TENSORRT_ROOT)
  list(APPEND SR_TRT_HINTS "${TENSORRT_ROOT}/include" "${TENSORRT_ROOT}")
  set(SR_TRT_HINT_ORIGIN "TENSORRT_ROOT")
endif()
file(GLOB SR_TRT_FETCHED LIST_DIRECTORIES true "${CMAKE_CURRENT_SOURCE_DIR}/../build/trt-headers/*/include")
list(SORT SR_TRT_FETCHED COMPARE NATURAL ORDER DESCENDING)
set(SR_TRT_SYSTEM_DIRS
  /usr/include/${CMAKE_LIBRARY_ARCHITECTURE} /usr/include/x86_64-linux-gnu /usr/include/aarch64-linux-gnu
  /usr/local/tensorrt/include /usr/local/TensorRT/include /opt/tensorrt/include /opt/TensorRT/include
  /usr/src/tensorrt/include /usr/include)
unset(SR_TENSORRT_INCLUDE_DIR CACHE)
if(SR_TRT_HINTS)
  # A named location wins or fails on its own: never silently fall back to another TensorRT.
  find_path(SR_TENSORRT_INCLUDE_DIR NvInferVersion.h HINTS ${SR_TRT_HINTS} NO_DEFAULT_PATH)
  if(NOT SR_TENSORRT_INCLUDE_DIR)
    message(STATUS "sr: TensorRT headers: ${SR_TRT_HINT_ORIGIN}=${SR_TRT_HINTS} has no NvInferVersion.h")
  endif()
else()
  find_path(SR_TENSORRT_INCLUDE_DIR NvInferVersion.h PATHS ${SR_TRT_SYSTEM_DIRS} ${SR_TRT_FETCHED} NO_DEFAULT_PATH)
  set(SR_TRT_HINT_ORIGIN "searched the system locations and build/trt-headers")
endif()

set(SR_TRT_STATUS "")
if(NOT SR_TENSORRT_INCLUDE_DIR)
  set(SR_TRT_STATUS "skipped: TensorRT headers not found (NvInferVersion.h; ${SR_TRT_HINT_ORIGIN}); pass -DTENSORRT_ROOT=<dir with include/>, or run `make trt-headers` to fetch the headers matching the installed tensorrt")
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
    set(SR_TRT_STATUS "skipped: the CUDA kernels are not built (${SR_CUDA_STATUS}); TensorRT headers ${SR_TRT_VERSION} were found in ${SR_TENSORRT_INCLUDE_DIR} (${SR_TRT_HINT_ORIGIN})")
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
# What this library was built against, embedded as a string that `python -m pipeline doctor` reads from the file.
target_compile_definitions(sr_trt_plugins PRIVATE SR_TRT_HEADERS_VERSION="${SR_TRT_VERSION}"
  SR_CUDA_TOOLKIT_VERSION="${CMAKE_CUDA_COMPILER_VERSION}")
sr_origin_runpath(sr_trt_plugins)
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

# Test programs load the plugin library like TensorRT (dlopen) and need its cudart / cuBLAS already loaded: they link
# both (kept even if unused, --no-as-needed) and, being build-tree tools, find them through the build RUNPATH.
function(sr_trt_test_program target source)
  add_executable(${target} ${source})
  target_include_directories(${target} PRIVATE ${SR_KERNELS_DIR})
  target_include_directories(${target} SYSTEM PRIVATE ${SR_TENSORRT_INCLUDE_DIR} ${CUDAToolkit_INCLUDE_DIRS})
  target_compile_definitions(${target} PRIVATE SR_TRT_PLUGIN_LIBRARY="$<TARGET_FILE:sr_trt_plugins>")
  target_compile_options(${target} PRIVATE ${SR_WARNINGS})
  target_link_libraries(${target} PRIVATE ${CMAKE_DL_LIBS} "-Wl,--no-as-needed" ${SR_CUDART_LIBRARY} ${SR_CUBLAS_LIBRARY}
    "-Wl,--as-needed")
  add_dependencies(${target} sr_trt_plugins)
endfunction()

# Host-side self-test: drives the creators and build-time API (no GPU).
sr_trt_test_program(trt_plugin_selftest ${SR_KERNELS_DIR}/tests/trtPluginSelfTest.cpp)
# GPU harness: the whole plugin life on a GPU with CUDA alone, compared with libsr_kernels_cpu; --host-only runs
# its host-side steps anywhere.
sr_trt_test_program(trt_plugin_gpu_harness ${SR_KERNELS_DIR}/tests/trtPluginGpuHarness.cpp)
target_link_libraries(trt_plugin_gpu_harness PRIVATE sr_kernels_cpu)

message(STATUS "sr: TensorRT plugins: building libsr_trt_plugins.so + trt_plugin_selftest + trt_plugin_gpu_harness against TensorRT headers ${SR_TRT_VERSION} (${SR_TENSORRT_INCLUDE_DIR}; ${SR_TRT_HINT_ORIGIN})")
