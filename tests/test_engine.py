"""Engine stage: profiles, sidecar staleness, and the one-line refusal without a GPU/TensorRT."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from models.registry import get_spec
from pipeline.engine import (
    Profile,
    check_engine,
    default_profile,
    make_sidecar,
    profile_for_input,
    profiles_from_config,
    read_sidecar,
    sidecar_path,
    sidecar_problems,
    tensorrt_problem,
    validate_profile,
)
from pipeline.errors import PipelineError, install_command

REPO = Path(__file__).resolve().parents[1]
SRCNN, X3 = get_spec("srcnn"), get_spec("srcnn-x3")
ENV = {"tensorrt": "11.4.0.106", "cuda": "13.0", "gpu": "NVIDIA L4", "compute_capability": "8.9",
       "plugin_library": "/x/libsr_trt_plugins.so", "plugin_sha256": "a" * 64}


# -- profiles ----------------------------------------------------------------------------------------
def test_profile_size_range_follows_scale_range():
    p = Profile(batch=(1, 2, 4), height=(8, 100, 300), width=(10, 120, 400), scale=(2.0, 2.5, 4.0))
    assert p.input_shapes() == ((1, 3, 8, 10), (2, 3, 100, 120), (4, 3, 300, 400))
    assert p.size_values() == ((16, 20), (250, 300), (1200, 1600))
    d = p.to_dict()
    assert d["size"] == [[16, 20], [250, 300], [1200, 1600]]
    assert Profile.from_dict(d) == p  # the sidecar round-trips


def test_default_profiles():
    assert default_profile(SRCNN).scale == (2.0, 3.0, 4.0)
    assert default_profile(X3).scale == (3.0, 3.0, 3.0)
    validate_profile(default_profile(SRCNN), SRCNN)
    validate_profile(default_profile(X3), X3)


@pytest.mark.parametrize("kwargs,msg", [
    (dict(batch=(2, 1, 4)), "MIN <= OPT <= MAX"),
    (dict(height=(0, 1, 4)), "integers >= 1"),
    (dict(width=(8, 8.5, 16)), "integers >= 1"),
    (dict(scale=(2.0, 3.0, 9.0)), "out of range"),
    (dict(scale=(1.0, 2.0, 3.0)), "out of range"),
    (dict(batch=(1, 1, 64), height=(8, 256, 4096), width=(8, 256, 4096), scale=(2, 3, 8)), "too large"),
])
def test_invalid_profiles_refused(kwargs, msg):
    with pytest.raises(PipelineError, match=msg):
        validate_profile(Profile(**kwargs), SRCNN)


def test_static_model_profile_needs_its_factor():
    with pytest.raises(PipelineError, match="fixed factor|out of range"):
        validate_profile(Profile(scale=(2.0, 3.0, 3.0)), X3)


def test_profile_strings_and_config(tmp_path):
    p = Profile.from_dict({"batch": "1,2,8", "height": "16", "scale": [2, 2, 3]})
    assert p.batch == (1, 2, 8) and p.height == (16, 16, 16) and p.scale == (2.0, 2.0, 3.0)
    with pytest.raises(PipelineError, match="MIN,OPT,MAX"):
        Profile.from_dict({"batch": "1,2"})
    with pytest.raises(PipelineError, match="unknown keys"):
        Profile.from_dict({"batchsize": 1})
    cfg = tmp_path / "profiles.json"
    big = {"batch": [1, 4, 8], "height": [256, 512, 512], "width": [256, 512, 512]}
    cfg.write_text(json.dumps({"profiles": [{"height": [8, 64, 128], "width": [8, 64, 128]}, big]}))
    ps = profiles_from_config(cfg, SRCNN)
    assert len(ps) == 2 and ps[1].batch == (1, 4, 8)
    cfg.write_text("{not json")
    with pytest.raises(PipelineError, match="not valid JSON"):
        profiles_from_config(cfg, SRCNN)
    with pytest.raises(PipelineError, match="cannot read"):
        profiles_from_config(tmp_path / "missing.json", SRCNN)


def test_profile_for_input_picks_first_fitting_and_names_limits():
    small = Profile(height=(8, 64, 128), width=(8, 64, 128))
    big = Profile(batch=(1, 1, 2), height=(128, 256, 512), width=(128, 256, 512))
    assert profile_for_input([small, big], 1, 100, 100, 300, 300) == 0
    assert profile_for_input([small, big], 2, 300, 300, 900, 900) == 1
    with pytest.raises(PipelineError, match="outside the engine's profiles.*tiling"):
        profile_for_input([small, big], 1, 600, 600, 1800, 1800)
    with pytest.raises(PipelineError, match="outside"):  # batch too large
        profile_for_input([small, big], 8, 100, 100, 300, 300)
    with pytest.raises(PipelineError, match="outside"):  # scale above the size range: output too big
        profile_for_input([small], 1, 128, 128, 128 * 5, 128 * 5)


# -- sidecar -----------------------------------------------------------------------------------------
def _sidecar(**over):
    env = {**ENV, **over}
    return make_sidecar(env, onnx_file=Path("m.onnx"), onnx_sha256="b" * 64, model="srcnn", precision="fp16",
                        ops="custom", profiles=[default_profile(SRCNN)])


def test_fresh_sidecar_has_no_problems():
    s = _sidecar()
    keys = ("tensorrt", "cuda", "gpu", "compute_capability", "plugin_sha256", "onnx_sha256", "profiles", "precision")
    for key in keys:
        assert key in s
    assert sidecar_problems(s, ENV, "b" * 64) == []


@pytest.mark.parametrize("key,value,msg", [
    ("tensorrt", "10.13.0", "TensorRT 10.13.0"),
    ("gpu", "NVIDIA A100", "GPU NVIDIA A100"),
    ("compute_capability", "8.0", "compute capability"),
    ("plugin_sha256", "c" * 64, "plugin library"),
])
def test_foreign_engines_detected(key, value, msg):
    problems = sidecar_problems(_sidecar(**{key: value}), ENV)
    assert len(problems) == 1 and msg in problems[0]


def test_changed_onnx_and_missing_sidecar_detected():
    assert sidecar_problems(_sidecar(), ENV, "d" * 64) == ["the ONNX file changed since the build"]
    assert "no readable sidecar" in sidecar_problems(None, ENV)[0]
    assert "sidecar version" in sidecar_problems({"sidecar_version": 99}, ENV)[0]


def test_check_engine_refuses_stale_with_rebuild_command(tmp_path):
    engine = tmp_path / "m.engine"
    with pytest.raises(PipelineError, match="engine not found"):
        check_engine(engine, ENV)
    engine.write_bytes(b"\0engine")
    with pytest.raises(PipelineError, match="no readable sidecar"):
        check_engine(engine, ENV)
    sidecar_path(engine).write_text(json.dumps(_sidecar(tensorrt="10.0.0")))
    assert read_sidecar(engine)["tensorrt"] == "10.0.0"
    stale = r"stale or foreign: TensorRT 10.0.0 \(built\) != 11.4.0.106.*python -m pipeline engine"
    with pytest.raises(PipelineError, match=stale):
        check_engine(engine, ENV)
    sidecar_path(engine).write_text(json.dumps(_sidecar()))
    assert check_engine(engine, ENV)["precision"] == "fp16"


def test_plan_engine_build_use_rebuild(tmp_path):
    from pipeline.engine import plan_engine

    engine, profiles = tmp_path / "m.engine", [default_profile(SRCNN)]
    assert plan_engine(engine, ENV, "b" * 64, profiles)[0] == "build"
    engine.write_bytes(b"x")
    sidecar_path(engine).write_text(json.dumps(_sidecar()))
    assert plan_engine(engine, ENV, "b" * 64, profiles)[0] == "use"
    assert plan_engine(engine, ENV, "e" * 64, profiles) == ("rebuild", "the ONNX file changed since the build")
    assert plan_engine(engine, {**ENV, "gpu": "NVIDIA H100"}, "b" * 64, profiles)[0] == "rebuild"
    wider = [Profile(height=(8, 256, 1024), width=(8, 256, 1024))]
    assert plan_engine(engine, ENV, "b" * 64, wider) == ("rebuild", "profiles changed")


def _onnx(path, **meta):
    import onnx
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Identity", ["input"], ["output"])], "g",
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 4, 4])],
                          [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 3, 4, 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    helper.set_model_props(m, meta)
    onnx.save(m, str(path))


def test_engine_all_selects_custom_graphs_and_baselines(tmp_path):
    import argparse

    from pipeline.cli import engine as engine_cli

    d = tmp_path / "onnx"
    d.mkdir()
    _onnx(d / "srcnn.custom.fp32.onnx", model="srcnn", ops="custom", precision="fp32")
    _onnx(d / "srcnn.custom.fp16.onnx", model="srcnn", ops="custom", precision="fp16")
    _onnx(d / "srcnn.standard.fp32.onnx", model="srcnn", ops="standard", precision="fp32")
    p = argparse.ArgumentParser()
    engine_cli.add_arguments(p)
    args = p.parse_args(["--all", "--onnx-dir", str(d), "--output-dir", str(tmp_path / "e")])
    jobs = engine_cli._jobs(args)
    assert [j[0].name for j in jobs] == ["srcnn.custom.fp16.onnx", "srcnn.custom.fp32.onnx"]
    assert jobs[0][1] == tmp_path / "e" / "srcnn.custom.fp16.engine"
    args = p.parse_args(["--all", "--onnx-dir", str(d), "--baseline", "--precision", "fp32"])
    assert [j[0].name for j in engine_cli._jobs(args)] == ["srcnn.custom.fp32.onnx", "srcnn.standard.fp32.onnx"]
    with pytest.raises(PipelineError, match="no matching ONNX"):
        engine_cli._jobs(p.parse_args(["--all", "--onnx-dir", str(tmp_path)]))
    with pytest.raises(PipelineError, match="give --onnx FILE"):
        engine_cli._jobs(p.parse_args([]))
    spec_args = p.parse_args(["--batch", "1,2,8", "--scale", "2,2.5,3"])
    (prof,) = engine_cli.profiles_from_args(spec_args, SRCNN)
    assert prof.batch == (1, 2, 8) and prof.scale == (2.0, 2.5, 3.0) and prof.height == (8, 256, 512)
    with pytest.raises(PipelineError, match="MIN <= OPT <= MAX"):
        engine_cli.profiles_from_args(p.parse_args(["--batch", "4,1,1"]), SRCNN)


# -- no GPU / no TensorRT ------------------------------------------------------------------------------
def _run_cli(*args):
    return subprocess.run([sys.executable, "-m", "pipeline", "engine", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=300)


def test_engine_stage_without_tensorrt_is_one_line():
    problem = tensorrt_problem()
    if problem is None:
        pytest.skip("TensorRT and a GPU are present: the refusal path does not apply")
    r = _run_cli("--all", "--onnx-dir", "outputs/onnx", "--output-dir", "outputs/engines")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: TensorRT engines need"), r.stderr
    assert "Traceback" not in r.stderr and install_command("gpu") in lines[0]  # in a checkout: make setup ORT=gpu


def test_engine_stage_bad_profile_flags_rejected_or_refused():
    # With TensorRT missing the environment is reported first; either way one line, exit 2.
    r = _run_cli("--onnx", "nope.onnx", "--output", "x.engine", "--batch", "4,1,1")
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.gpu
def test_build_engine_and_sidecar(tmp_path):
    problem = tensorrt_problem()
    if problem:
        pytest.skip(problem)
    from pipeline.engine import build_engine, current_environment
    from pipeline.export.cached import onnx_for

    onnx_file = onnx_for("srcnn", "fp32")
    engine = tmp_path / "srcnn.engine"
    sidecar = build_engine(onnx_file, engine, [Profile(height=(8, 64, 128), width=(8, 64, 128))],
                           timing_cache=tmp_path / "tc.cache")
    assert engine.stat().st_size > 0 and (tmp_path / "tc.cache").is_file()
    assert check_engine(engine, current_environment())["onnx_sha256"] == sidecar["onnx_sha256"]
