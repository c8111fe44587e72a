"""Every CPU kind from one machine (issue 65): the kind-sensitive tests run again with the instruction set capped to
each lower kind this CPU can act as. oneDNN's ONEDNN_MAX_CPU_ISA caps PyTorch's and OpenVINO's CPU kernels and our
own decisions (pipeline.native.cpu), PyTorch's ATEN_CPU_CAPABILITY its vectorised kernels; each cap is checked to
take effect before the tests run under it. A machine runs none for its own kind (the plain run is that) and none for
a kind above it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.native.cpu import CPU_KINDS, ISA_CAP_ENV, cpu_kind

REPO = Path(__file__).resolve().parents[1]
# What picks kernels by CPU: tiles' exactness (convolution kernels), the bf16 DeformConv2d kernel and OpenVINO's
# node for it, and the CPU kernels' own dispatch.
KIND_SENSITIVE = ("tests/test_tiling.py", "tests/test_tiling_properties.py", "tests/test_deform_bf16.py",
                  "tests/test_kernels_cpu.py")
CAPS = {  # kind -> (ONEDNN_MAX_CPU_ISA, ATEN_CPU_CAPABILITY, what PyTorch then reports, ISAs no kernel may use)
    "avx2": ("AVX2", "avx2", "AVX2", ("avx512", "amx")),
    "avx512": ("AVX512_CORE", "avx512", "AVX512", ("amx",)),
    "avx512-vnni": ("AVX512_CORE_VNNI", "avx512", "AVX512", ("amx",)),
    "avx512-bf16": ("AVX512_CORE_BF16", "avx512", "AVX512", ("amx",)),
}
# Run under the caps: the kind our code decides by, PyTorch's capability, and the ISAs in OpenVINO's compiled kernels.
PROBE = """
import json
import numpy as np, openvino as ov, openvino.opset13 as ops, torch
from pipeline.native.cpu import cpu_kind
x = ops.parameter([1, 16, 32, 32], np.float32)
w = ops.constant(np.ones((16, 16, 3, 3), np.float32))
compiled = ov.Core().compile_model(ov.Model([ops.convolution(x, w, [1, 1], [1, 1], [1, 1], [1, 1])], [x]), "CPU")
kernels = sorted({op.get_rt_info()["primitiveType"].astype(str) for op in compiled.get_runtime_model().get_ops()})
print(json.dumps({"kind": cpu_kind(), "aten": torch.backends.cpu.get_cpu_capability(), "openvino": kernels}))
"""
KINDS = [name for name, _ in CPU_KINDS]


def _below_this_cpu(kind: str) -> None:
    own = cpu_kind()
    if own is None or KINDS.index(kind) >= KINDS.index(own):
        pytest.skip(f"this CPU is {own or 'below avx2'}: it can act only as a lower kind than its own "
                    f"({kind} is not lower; the plain run covers its own kind)")


@pytest.mark.parametrize("kind", list(CAPS))
def test_the_kind_sensitive_tests_pass_as_each_lower_cpu_kind(kind):
    _below_this_cpu(kind)
    pytest.importorskip("openvino", reason="OpenVINO is not installed")
    isa, aten, reported, forbidden = CAPS[kind]
    env = {**os.environ, ISA_CAP_ENV: isa, "ATEN_CPU_CAPABILITY": aten}
    probe = subprocess.run([sys.executable, "-c", PROBE], env=env, cwd=REPO, capture_output=True, text=True,
                           timeout=300)
    assert probe.returncode == 0, probe.stderr[-2000:]
    seen = json.loads(probe.stdout.strip().splitlines()[-1])
    # each cap takes effect: else the run below would test this CPU's own kind again under another name
    assert seen["kind"] == kind and seen["aten"] == reported, seen
    assert not [k for k in seen["openvino"] if any(f in k for f in forbidden)], seen
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *KIND_SENSITIVE], env=env,
                         cwd=REPO, capture_output=True, text=True, timeout=1800)
    assert run.returncode == 0, f"as {kind} ({ISA_CAP_ENV}={isa}):\n" + run.stdout[-4000:]
