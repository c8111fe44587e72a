# One entry point per pipeline stage. Every target sets itself up first.
PY      ?= .venv/bin/python
VENV    := .venv
STAMP   := $(VENV)/.installed
BUILD   := build/plugins
CUDA_HOME ?= /usr/local/cuda
export CUDA_HOME
# TensorRT C++ headers (for the plugin library). Unset: the plugin library is skipped with a message.
TENSORRT_ROOT ?= $(patsubst %/include/NvInferRuntime.h,%,$(wildcard /tmp/tensorrt-headers/include/NvInferRuntime.h))

.PHONY: setup lint demo test onnx plugins engine sr eval compare bench train clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

plugins: setup
	cmake -S plugins_trt -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE=$(abspath $(PY)) $(if $(TENSORRT_ROOT),-DTENSORRT_ROOT=$(TENSORRT_ROOT),)
	cmake --build $(BUILD) -j 2

lint: setup
	$(PY) -m ruff check .

test: setup plugins
	$(PY) -m pytest -q $(PYTEST_ARGS)

demo: setup plugins
	$(PY) -m pipeline demo --output outputs

onnx: setup
	$(PY) -m pipeline export --all --output-dir outputs/onnx

engine: setup plugins
	$(PY) -m pipeline engine --all --onnx-dir outputs/onnx --output-dir outputs/engines

IN  ?= outputs/demo/input
OUT ?= outputs/sr
MODEL ?= srcnn
SCALE ?= 3
BACKEND ?= auto
sr: setup
	$(PY) -m pipeline sr $(IN) $(OUT) --model $(MODEL) --scale $(SCALE) --backend $(BACKEND)

eval: setup
	$(PY) -m pipeline eval --model $(MODEL)

compare: setup plugins
	$(PY) -m pipeline compare --model all --output outputs/compare

bench: setup plugins
	$(PY) -m pipeline bench --model all --output outputs/bench

train: setup
	$(PY) scripts/train.py --model all

clean:
	rm -rf build outputs
