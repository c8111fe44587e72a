"""`python -m pipeline triton`: every config.pbtxt is parsed with Triton's own ModelConfig protobuf (shipped in
tritonclient) and checked against the model's ONNX inputs/outputs and the engine's profiles. No Triton server
runs here; the ONNX Runtime repository's model file is run with the inputs its config declares."""
import hashlib
import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from models.lookup import get_spec
from models.spec import output_size
from pipeline.cli import main
from pipeline.engine import Profile, make_sidecar, sidecar_path, tensorrt_problem
from pipeline.errors import PipelineError
from pipeline.export.cached import onnx_for
from pipeline.serve import write_repository
from pipeline.serve.triton_config import PLATFORMS, SERVED, served_backend

model_config_pb2 = pytest.importorskip("tritonclient.grpc.model_config_pb2",
                                       reason="tritonclient is not installed (pip install -e '.[cluster]')")
text_format = pytest.importorskip("google.protobuf.text_format")

TRITON_DTYPE = {onnx.TensorProto.FLOAT: "TYPE_FP32", onnx.TensorProto.FLOAT16: "TYPE_FP16",
                onnx.TensorProto.INT64: "TYPE_INT64"}


def _parse(repo: Path, name: str):
    cfg = model_config_pb2.ModelConfig()
    text_format.Parse((repo / name / "config.pbtxt").read_text(), cfg)
    return cfg


def _dtype_name(value: int) -> str:
    return model_config_pb2.DataType.Name(value)


def _onnx_io(path: Path):
    g = onnx.load(str(path), load_external_data=False).graph
    def dims(v):
        return [d.dim_value if d.dim_value > 0 else -1 for d in v.type.tensor_type.shape.dim]
    return ({v.name: (TRITON_DTYPE[v.type.tensor_type.elem_type], dims(v)) for v in g.input},
            {v.name: (TRITON_DTYPE[v.type.tensor_type.elem_type], dims(v)) for v in g.output})


def _check_io(cfg, onnx_file: Path) -> None:
    """Config tensors = ONNX tensors: names, types, dims (minus the batch dimension when Triton batches)."""
    ins, outs = _onnx_io(onnx_file)
    for tensors, expect in ((cfg.input, ins), (cfg.output, outs)):
        assert [t.name for t in tensors] == list(expect)
        for t in tensors:
            dtype, dims = expect[t.name]
            assert _dtype_name(t.data_type) == dtype
            assert list(t.dims) == (dims[1:] if cfg.max_batch_size > 0 else dims)


def _params(cfg) -> dict:
    return {k: v.string_value for k, v in cfg.parameters.items()}


def test_ort_repository_runtime_factor_model(tmp_path, capsys):
    repo = tmp_path / "repo"
    assert main(["triton", "--model", "srcnn", "--output", str(repo), "--backend", "ort"]) == 0
    out = capsys.readouterr().out
    assert f"tritonserver --model-repository {repo.resolve()}" in out
    cfg = _parse(repo, "srcnn")
    onnx_file = onnx_for("srcnn")
    model_file = repo / "srcnn" / "1" / "model.onnx"
    assert model_file.read_bytes() == onnx_file.read_bytes()  # the exported file as is, function bodies included
    assert cfg.name == "srcnn" and cfg.backend == "onnxruntime"
    # `size` has no batch dimension: Triton must not batch, the batch rides in `input`'s first dimension.
    assert cfg.max_batch_size == 0
    _check_io(cfg, onnx_file)
    assert cfg.HasField("dynamic_batching")
    assert [(g.count, model_config_pb2.ModelInstanceGroup.Kind.Name(g.kind)) for g in cfg.instance_group] == \
        [(1, "KIND_CPU")]
    card = json.loads(get_spec("srcnn").weights_path.with_suffix(".json").read_text())
    params = _params(cfg)
    meta = {p.key: p.value for p in onnx.load(str(onnx_file), load_external_data=False).metadata_props}
    assert params["weights_sha256"] == card["weights_sha256"] == meta["weights_sha256"]
    gain = card["evaluation"]["scales"]["3"]["psnr_gain_db"]
    assert float(params["psnr_gain_db_x3"]) == pytest.approx(gain, abs=1e-3)
    assert params["precision"] == "fp32" and params["max_images_per_request"] == "4"
    # What Triton's ONNX Runtime backend would do with a request shaped by this config.
    feeds = {"input": np.random.default_rng(0).random((2, 3, 17, 23), dtype=np.float32),
             "size": np.array(output_size(17, 23, 2.5), dtype=np.int64)}
    (y,) = ort.InferenceSession(str(model_file), providers=["CPUExecutionProvider"]).run(None, feeds)
    assert y.shape == (2, 3, *output_size(17, 23, 2.5))


def test_ort_repository_fixed_factor_model_batches(tmp_path):
    repo = tmp_path / "repo"
    assert main(["triton", "--model", "srcnn-x3", "--output", str(repo), "--backend", "ort", "--name", "x3",
                 "--max-batch", "8", "--instances", "2", "--precision", "fp16"]) == 0
    cfg = _parse(repo, "x3")
    assert cfg.max_batch_size == 8 and list(cfg.dynamic_batching.preferred_batch_size) == [8]
    _check_io(cfg, repo / "x3" / "1" / "model.onnx")
    assert [t.name for t in cfg.input] == ["input"] and list(cfg.input[0].dims) == [3, -1, -1]
    assert cfg.instance_group[0].count == 2
    assert _params(cfg)["precision"] == "fp16"


def _engine(tmp_path: Path, model: str, profiles: list[Profile], plugin: Path, onnx_file: Path | None = None,
            io: dict | None = None) -> Path:
    """A hand-made engine file and sidecar (no GPU here: the bytes are opaque to the repository writer)."""
    engine = tmp_path / f"{model}.engine"
    engine.write_bytes(b"not a real plan: copied verbatim " + model.encode())
    env = {"tensorrt": "11.4.0", "cuda": "13.0", "gpu": "NVIDIA H100", "compute_capability": "9.0",
           "plugin_library": str(plugin), "plugin_sha256": hashlib.sha256(plugin.read_bytes()).hexdigest()}
    sidecar = make_sidecar(env, onnx_file=onnx_file or tmp_path / "gone.onnx", onnx_sha256="0" * 64, model=model,
                           precision="fp32", ops="custom", profiles=profiles, io=io)
    sidecar_path(engine).write_text(json.dumps(sidecar))
    return engine


@pytest.fixture
def plugin(tmp_path) -> Path:
    p = tmp_path / "libsr_trt_plugins.so"
    p.write_bytes(b"\x7fELF stand-in plugin library")
    return p


def test_trt_repository_from_engine_and_sidecar(tmp_path, plugin, capsys):
    profiles = [Profile(batch=(1, 2, 6), height=(8, 128, 256), width=(8, 128, 256), scale=(2.0, 3.0, 4.0))]
    engine = _engine(tmp_path, "srcnn", profiles, plugin, io={"inputs": ["input", "size"], "has_size_input": True})
    repo = tmp_path / "models"
    assert main(["triton", "--model", "srcnn", "--output", str(repo), "--engine", str(engine),
                 "--plugin-lib", str(plugin)]) == 0
    out = capsys.readouterr().out
    copied = tmp_path / "models-plugins" / plugin.name
    assert copied.read_bytes() == plugin.read_bytes()
    assert (f"tritonserver --model-repository {repo.resolve()} --backend-config=tensorrt,plugins={copied.resolve()}"
            in out)
    assert (repo / "srcnn" / "1" / "model.plan").read_bytes() == engine.read_bytes()
    # the plain model and the Python-backend sr model beside it, nothing else Triton would take for a model
    assert sorted(p.name for p in repo.iterdir()) == ["sr", "srcnn"]
    cfg = _parse(repo, "srcnn")
    assert cfg.backend == "tensorrt" and cfg.max_batch_size == 0
    # The sidecar's ONNX is gone: I/O from the sidecar must equal what the export writes.
    _check_io(cfg, onnx_for("srcnn"))
    size = next(t for t in cfg.input if t.name == "size")
    assert size.is_shape_tensor and _dtype_name(size.data_type) == "TYPE_INT64"
    assert not next(t for t in cfg.input if t.name == "input").is_shape_tensor
    params = _params(cfg)
    assert params["max_images_per_request"] == str(profiles[0].batch[2])
    assert params["gpu"] == "NVIDIA H100" and params["tensorrt"] == "11.4.0"
    assert model_config_pb2.ModelInstanceGroup.Kind.Name(cfg.instance_group[0].kind) == "KIND_GPU"


def test_trt_fixed_factor_batches_within_profiles(tmp_path, plugin):
    onnx_file = onnx_for("srcnn-x3")
    # Two profiles covering batch 1-3 and 4-5: Triton may send up to 5; 6+ would fit none.
    profiles = [Profile(batch=(1, 1, 3), scale=(3.0, 3.0, 3.0)), Profile(batch=(4, 4, 5), scale=(3.0, 3.0, 3.0)),
                Profile(batch=(7, 7, 9), scale=(3.0, 3.0, 3.0))]
    engine = _engine(tmp_path, "srcnn-x3", profiles, plugin, onnx_file=onnx_file,
                     io={"inputs": ["input"], "has_size_input": False})
    repo = tmp_path / "repo"
    assert main(["triton", "--model", "srcnn-x3", "--output", str(repo), "--engine", str(engine),
                 "--plugin-lib", str(plugin)]) == 0
    cfg = _parse(repo, "srcnn-x3")
    assert cfg.max_batch_size == 5
    _check_io(cfg, onnx_file)
    assert not any(t.is_shape_tensor for t in cfg.input)


@pytest.mark.parametrize("args, msg", [
    (["--backend", "trt"], "TensorRT engines need a CUDA GPU"),
    (["--backend", "ort", "--kind", "gpu", "--engine", "x.engine"], "--engine is a TensorRT engine"),
    (["--backend", "trt", "--kind", "cpu"], "GPU only"),
    (["--backend", "trt", "--max-batch", "2"], "--max-batch applies to --backend ort"),
    (["--backend", "ort", "--onnx", "missing.onnx"], "ONNX file not found"),
])
def test_bad_arguments_are_one_line(tmp_path, capsys, args, msg):
    if args == ["--backend", "trt"] and tensorrt_problem() is None:
        pytest.skip("TensorRT and a GPU are here: the engine would be built")
    assert main(["triton", "--model", "srcnn", "--output", str(tmp_path / "r"), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and msg in err and "\n" not in err
    assert not (tmp_path / "r").exists()


def test_the_served_backends_are_the_descriptors_that_name_a_triton_platform(tmp_path):
    """Which backends a plain model is written for, and on which platform, is read off their descriptors: each names
    a platform Triton's format knows; one runs engines (the TensorRT plan), one the exported file (ONNX Runtime)."""
    assert {name: d.triton for name, d in SERVED.items()} == {"ort": "onnxruntime", "trt": "tensorrt"}
    assert {d.triton for d in SERVED.values()} <= set(PLATFORMS)
    assert (served_backend(engine=True), served_backend(engine=False)) == ("trt", "ort")
    with pytest.raises(PipelineError, match=r"unknown Triton backend 'torch' \(choose from: ort, trt\)"):
        write_repository("srcnn", tmp_path / "r", backend="torch")
    assert not (tmp_path / "r").exists()


def test_names_beyond_ascii_are_written_as_utf8_and_overlong_names_are_one_line(tmp_path, capsys):
    repo = tmp_path / "repo"
    name = "sr\U0001F600x"
    assert main(["triton", "--model", "srcnn", "--output", str(repo), "--backend", "ort", "--name", name,
                 "--sr-name", "none"]) == 0
    text = (repo / name / "config.pbtxt").read_text(encoding="utf-8")
    assert f'name: "{name}"' in text and "\\ud83d" not in text
    assert _parse(repo, name).name == name
    long = "m" * 300
    assert main(["triton", "--model", "srcnn", "--output", str(tmp_path / "r2"), "--backend", "ort",
                 "--name", long]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --name 'mmmm") and "longer than a file name may be (255 bytes" in err
    assert "\n" not in err and "OSError" not in err and not (tmp_path / "r2").exists()


def test_default_backend_is_what_this_machine_can_serve(tmp_path, capsys):
    """Without TensorRT the default writes the ONNX Runtime model and says so; asking for trt names the way out."""
    problem = tensorrt_problem()
    if problem is None:
        pytest.skip("TensorRT and a GPU are here: the default is trt")
    repo = tmp_path / "repo"
    assert main(["triton", "--model", "srcnn", "--output", str(repo), "--sr-name", "none"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"writing the ONNX Runtime model (--backend ort): no TensorRT engine can be built here "
                          f"({problem})\n")
    assert _parse(repo, "srcnn").backend == "onnxruntime"
    assert main(["triton", "--model", "srcnn", "--output", str(tmp_path / "r2"), "--backend", "trt"]) == 2
    assert "write the ONNX Runtime model with --backend ort" in capsys.readouterr().err


def test_engine_refused_for_wrong_plugin_model_or_precision(tmp_path, plugin, capsys):
    engine = _engine(tmp_path, "srcnn", [Profile()], plugin, io={"inputs": ["input", "size"]})
    other = tmp_path / "other.so"
    other.write_bytes(b"another build")
    cases = [(["--model", "srcnn", "--plugin-lib", str(other)], "is not the one the engine was built with"),
             (["--model", "deform-srcnn", "--plugin-lib", str(plugin)], "was built for model 'srcnn'"),
             (["--model", "srcnn", "--precision", "fp16", "--plugin-lib", str(plugin)], "is a fp32 engine")]
    for args, msg in cases:
        assert main(["triton", "--output", str(tmp_path / "r"), "--engine", str(engine), *args]) == 2
        err = capsys.readouterr().err
        assert msg in err and err.count("\n") == 1
    assert not (tmp_path / "r").exists()
    sidecar_path(engine).unlink()
    assert main(["triton", "--model", "srcnn", "--output", str(tmp_path / "r"), "--engine", str(engine)]) == 2
    assert "srcnn.engine.json is missing" in capsys.readouterr().err


def test_client_scale_against_a_model_without_a_default_scale():
    """A served sr model whose config states no default_scale (someone else's repository): --scale runs, checked
    against the stated range; none is one line, not a TypeError later."""
    from pipeline.errors import PipelineError
    from pipeline.serve.protocol import Served, scale_parameters

    theirs = Served.from_parameters({"model": "theirs", "scale_min": "1", "scale_max": "4"})
    assert theirs.check_scale(2.5) == 2.5
    with pytest.raises(PipelineError, match="states no default scale: give --scale"):
        theirs.check_scale(None)
    with pytest.raises(PipelineError, match="outside the served model's range 1-4"):
        theirs.check_scale(6)
    assert Served.from_parameters({"default_scale": "3"}).check_scale(None) == 3.0  # no range: the server checks it
    ours = Served.from_parameters(scale_parameters(3, 1.5, 8))
    assert (ours.default_scale, ours.scale_range) == (3.0, (1.5, 8.0))
    with pytest.raises(PipelineError, match="default_scale 'x3' is not a number"):
        Served.from_parameters({"default_scale": "x3"})


def test_config_read_back_as_triton_parses_it(tmp_path):
    """server.py reads a repository's configs with pipeline.serve.pbtxt.top_level: the same top-level fields as
    Triton's own ModelConfig message, comments and nested messages skipped."""
    from pipeline.serve import pbtxt
    from pipeline.serve.python_repo import sr_config

    text, _ = sr_config("sr \"é\"", model_file="../m/1/model.onnx", backend="ort", env=None, instances=1, kind="cpu")
    text = "# written by a person\n" + text.replace("backend:", "# backend: \"no\"\nbackend:", 1)
    cfg = model_config_pb2.ModelConfig()
    text_format.Parse(text, cfg)
    got = pbtxt.top_level(text)
    assert (got["name"], got["backend"], int(got["max_batch_size"])) == (cfg.name, cfg.backend, cfg.max_batch_size)
    assert "parameters" not in got and "input" not in got
