"""Engine stage: FP32 engines default to TF32 off (`--tf32` turns it on, the sidecar says which), and a `--workspace`
below what our DeformConv2d layers need is refused before the build, naming the minimum."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from models.registry import get_spec
from pipeline.engine import (
    Profile,
    check_workspace,
    default_profile,
    make_sidecar,
    min_workspace_bytes,
    plan_engine,
    sidecar_path,
    sidecar_tf32,
)
from pipeline.errors import PipelineError
from pipeline.export import strip_sr_functions
from pipeline.export.sr_ops import register_schemas
from pipeline.native import kernels_cpu

pytestmark = pytest.mark.usefixtures("cpu_kernels")
REPO = Path(__file__).resolve().parents[1]
ENV = {"tensorrt": "11.4.0", "cuda": "13.0", "gpu": "NVIDIA H100", "compute_capability": "9.0",
       "plugin_library": "libsr_trt_plugins.so", "plugin_sha256": "a" * 64}


def _deform_model(c_in: int = 64, c_out: int = 32, k: int = 3, dtype=TensorProto.FLOAT) -> onnx.ModelProto:
    """x -> sr::DeformConv2d(x, W, offset) as the exporter writes it (W an initializer, pads 1)."""
    register_schemas()
    w = numpy_helper.from_array(np.zeros((c_out, c_in, k, k), np.float32), "W")
    node = helper.make_node("DeformConv2d", ["x", "W", "offset"], ["y"], domain="sr", name="dcn",
                            strides=[1, 1], pads=[1, 1, 1, 1], dilations=[1, 1], group=1, offset_group=1,
                            kernel_shape=[k, k])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", dtype, ["n", c_in, "h", "w"]),
                                        helper.make_tensor_value_info("offset", dtype, ["n", 2 * k * k, "h", "w"])],
                          [helper.make_tensor_value_info("y", dtype, ["n", c_out, "h", "w"])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19), helper.make_opsetid("sr", 1)])
    m.ir_version = 9
    return m


# -- TF32 ------------------------------------------------------------------------------------------------------
def test_strip_marks_deform_conv_allow_tf32_only_when_asked():
    model = _deform_model()
    plain = strip_sr_functions(model)
    tf32 = strip_sr_functions(model, allow_tf32=True)
    attrs = {a.name: helper.get_attribute_value(a) for a in tf32.graph.node[0].attribute}
    assert attrs["allow_tf32"] == 1 and attrs["plugin_namespace"] == b"sr"
    assert "allow_tf32" not in {a.name for a in plain.graph.node[0].attribute}
    onnx.checker.check_model(tf32, full_check=True)  # the attribute is declared in the sr schema


def test_sidecar_records_tf32_and_a_change_forces_a_rebuild(tmp_path):
    profiles = [default_profile(get_spec("srcnn"))]
    engine = tmp_path / "m.engine"
    engine.write_bytes(b"x")
    sidecar = make_sidecar(ENV, onnx_file=Path("m.onnx"), onnx_sha256="b" * 64, model="srcnn", precision="fp32",
                           ops="custom", profiles=profiles, workspace_mb=1024)
    assert sidecar["tf32"] is False and sidecar["workspace_mb"] == 1024
    sidecar_path(engine).write_text(json.dumps(sidecar))
    assert plan_engine(engine, ENV, "b" * 64, profiles)[0] == "use"
    assert plan_engine(engine, ENV, "b" * 64, profiles, tf32=True) == ("rebuild", "built with TF32 off, wanted on")
    # Engines from before the flag were built with TensorRT's default, TF32 on: FP32 checks would fail on them.
    del sidecar["tf32"]
    assert sidecar_tf32(sidecar) is True
    sidecar_path(engine).write_text(json.dumps(sidecar))
    assert plan_engine(engine, ENV, "b" * 64, profiles) == ("rebuild", "built with TF32 on, wanted off")


def test_engine_cli_has_tf32_flag():
    out = subprocess.run([sys.executable, "-m", "pipeline", "engine", "--help"], cwd=REPO, capture_output=True,
                         text=True, timeout=120).stdout
    assert "--tf32" in out and "FP32-accurate" in " ".join(out.split())


# -- workspace -------------------------------------------------------------------------------------------------
def test_min_workspace_is_the_plugin_rule_at_the_profile_maxima(monkeypatch):
    monkeypatch.setenv("SR_DEFORM_CONV2D_IMPL", "im2col")  # the column rule; the fused kernel needs none
    model = _deform_model()
    profile = Profile(batch=(1, 1, 4), height=(8, 256, 512), width=(8, 256, 512), scale=(2.0, 3.0, 4.0))
    need, where = min_workspace_bytes(model, [profile], "fp32")
    # The layer runs on the upscaled image: 2048 x 2048 (pads 1 keep the size), batch 4, dynamic profile.
    assert need == kernels_cpu.deform_conv2d_min_workspace(4, 64, 3, 3, 2048, 2048, 4, False)
    assert need == 256 + (64 << 20) + (32 << 20)  # column budget + cuBLAS slice + alignment
    assert "DeformConv2d 'dcn'" in where and "2048x2048" in where
    fixed = Profile(batch=(1, 1, 1), height=(16, 16, 16), width=(16, 16, 16), scale=(2.0, 2.0, 2.0))
    exact, _ = min_workspace_bytes(model, [fixed], "fp16")
    assert exact == 256 + 64 * 9 * 32 * 32 * 2 + (32 << 20)  # one 32x32 image of FP16 columns, exactly


def test_too_small_workspace_refused_naming_the_minimum(monkeypatch):
    monkeypatch.setenv("SR_DEFORM_CONV2D_IMPL", "im2col")
    model = _deform_model()
    profiles = [Profile(batch=(1, 1, 4), height=(8, 256, 512), width=(8, 256, 512), scale=(2.0, 3.0, 4.0))]
    with pytest.raises(PipelineError, match=r"--workspace 64 MiB is below the 97 MiB .*use --workspace 97 or more"):
        check_workspace(64, model, profiles, "fp32")
    assert check_workspace(97, model, profiles, "fp32") == 97
    assert check_workspace(1024, model, profiles, "fp32") == 97


@pytest.mark.parametrize("env", [None, "fused"])
def test_fused_kernel_needs_no_workspace(monkeypatch, env):
    """The default (fused) DeformConv2d kernel has no column buffer: deform-srcnn's default profile needs no
    workspace at all (the issue's ceiling is 8 MiB), and any --workspace passes."""
    if env is None:
        monkeypatch.delenv("SR_DEFORM_CONV2D_IMPL", raising=False)
    else:
        monkeypatch.setenv("SR_DEFORM_CONV2D_IMPL", env)
    model = _deform_model()
    need, _ = min_workspace_bytes(model, [default_profile(get_spec("deform-srcnn"))], "fp16")
    assert need == 0 <= 8 << 20
    assert kernels_cpu.deform_conv2d_min_workspace(4, 64, 3, 3, 2048, 2048, 4, False) == 0
    assert check_workspace(1, model, [default_profile(get_spec("deform-srcnn"))], "fp32") == 0


def test_unknown_impl_counts_as_the_larger_rule(monkeypatch):
    monkeypatch.setenv("SR_DEFORM_CONV2D_IMPL", "fast")  # the plugin refuses it by name; the check stays safe
    need = kernels_cpu.deform_conv2d_min_workspace(1, 64, 3, 3, 32, 32, 2, True)
    assert need == 256 + 64 * 9 * 32 * 32 * 2 + (32 << 20)


def test_graph_without_deform_conv_needs_no_minimum():
    register_schemas()
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 4, 4])])
    assert check_workspace(1, helper.make_model(g), [default_profile(get_spec("srcnn"))], "fp32") == 0
