"""export_model / CLI: metadata, the scale-input flavour, `--all`, atomic writes and one-line errors."""
import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

pytest.importorskip("onnxscript", reason="these tests export with torch.onnx, which needs onnxscript (export extra)")
from test_export_exporters import make_weights  # noqa: E402

import models.registry as registry  # noqa: E402
import models.spec  # noqa: E402
from models.registry import file_sha256, load_model  # noqa: E402
from models.spec import OWN_MODELS  # noqa: E402
from pipeline.cli import main  # noqa: E402
from pipeline.errors import PipelineError  # noqa: E402
from pipeline.export import verify as verify_mod  # noqa: E402
from pipeline.export.core import ExportResult, export_model, onnx_filename  # noqa: E402
from pipeline.export.verify import sample_batch  # noqa: E402


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    d = tmp_path_factory.mktemp("weights")
    for name in OWN_MODELS:
        make_weights(d / registry.get_spec(name).weights_file, name)
    return d


@pytest.fixture(scope="module")
def srcnn_ts(tmp_path_factory, weights):
    return export_model("srcnn", tmp_path_factory.mktemp("o") / "srcnn.onnx", exporter="torchscript",
                        weights=weights / "srcnn.pt")


def test_result_and_metadata(srcnn_ts, weights):
    r = srcnn_ts
    assert isinstance(r, ExportResult) and r.path.is_file()
    assert (r.model, r.exporter, r.ops, r.precision, r.io_dtype, r.opset) == ("srcnn", "torchscript", "custom",
                                                                            "fp32", "fp32", 20)
    assert 0 <= r.max_abs_error <= 1e-4 and r.seconds > 0
    meta = {p.key: p.value for p in onnx.load(r.path).metadata_props}
    assert meta["model"] == "srcnn"
    assert meta["weights_sha256"] == file_sha256(weights / "srcnn.pt") == r.weights_sha256
    assert (meta["scale_min"], meta["scale_max"], meta["default_scale"]) == ("1", "8", "3")
    assert (meta["exporter"], meta["ops"], meta["precision"], meta["opset"]) == ("torchscript", "custom", "fp32", "20")
    assert meta["sr_op_versions"] == "sr.DynamicResize=1"
    assert meta["size_input"] == "size"


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_scale_input_flavour_is_resize_with_runtime_scales(tmp_path, weights, exporter):
    r = export_model("srcnn", tmp_path / "s.onnx", exporter=exporter, ops="standard", size_input="scale",
                     weights=weights / "srcnn.pt")
    m = onnx.load(r.path)
    assert [i.name for i in m.graph.input] == ["input", "scale"]
    (resize,) = [n for n in m.graph.node if n.op_type == "Resize"]
    assert resize.input[2] and (len(resize.input) < 4 or not resize.input[3])  # scales, not sizes
    x = sample_batch()
    scale = torch.tensor([2.5, 2.5])
    got = ort.InferenceSession(str(r.path)).run(None, {"input": x.numpy(), "scale": scale.numpy()})[0]
    with torch.no_grad():
        ref = load_model("srcnn", weights / "srcnn.pt")(x, scale).numpy()
    assert got.shape == ref.shape == (2, 3, math.floor(23 * 2.5), math.floor(29 * 2.5))
    np.testing.assert_allclose(got, ref, atol=1e-4)


def test_cli_single_file_prints_one_line(tmp_path, weights, capsys):
    out = tmp_path / "sub" / "x3.onnx"  # missing parent directories are created
    rc = main(["export", "--model", "srcnn-x3", "--output", str(out), "--exporter", "torchscript",
               "--weights", str(weights / "srcnn-x3.pt")])
    lines = capsys.readouterr().out.strip().splitlines()
    assert rc == 0 and out.is_file()
    assert len(lines) == 1 and str(out) in lines[0] and "max|ORT-PyTorch|" in lines[0]


def test_cli_all_writes_every_model_ops_precision(tmp_path, weights, monkeypatch, capsys):
    monkeypatch.setattr(models.spec, "WEIGHTS_DIR", weights)  # the "shipped" weights for this test
    rc = main(["export", "--all", "--output-dir", str(tmp_path), "--exporter", "torchscript"])
    lines = capsys.readouterr().out.strip().splitlines()
    expected = {onnx_filename(m, exporter="torchscript", ops=o, precision=p)
                for m in OWN_MODELS for o in ("custom", "standard") for p in ("fp32", "fp16")}
    assert rc == 0
    onnx_files = {p.name for p in tmp_path.iterdir() if p.suffix == ".onnx" and ".folded-x" not in p.name}
    assert onnx_files == expected and len(expected) == 12
    # Beside each: its reference outputs; beside each fp32 SRCNN: folded variants (named in its metadata).
    siblings = {p.name for p in tmp_path.iterdir()} - expected
    assert {n.replace(".onnx", ".reference.npz") for n in expected} <= siblings
    assert "srcnn.custom.fp32.torchscript.folded-x4.onnx" in siblings
    assert not any(n.startswith("deform-srcnn") and "folded" in n for n in siblings)
    assert len(lines) == 12 and all("max|ORT-PyTorch|" in line for line in lines)
    assert "deform-srcnn.custom.fp16.torchscript.onnx" in expected


def test_cli_all_rejects_single_model_options(tmp_path, capsys):
    rc = main(["export", "--all", "--output-dir", str(tmp_path), "--weights", "w.pt"])
    assert rc == 2 and "use --model, not --all" in capsys.readouterr().err


def test_cli_all_reports_missing_weights(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(models.spec, "WEIGHTS_DIR", tmp_path / "none")
    rc = main(["export", "--all", "--output-dir", str(tmp_path / "o"), "--exporter", "torchscript"])
    err = capsys.readouterr()
    assert rc == 2
    assert "12 of 12 exports failed" in err.err
    assert "weights file not found" in err.out


@pytest.mark.parametrize("argv,message", [
    (["--model", "nope"], "unknown model 'nope'"),
    (["--model", "srcnn", "--scale", "0.5"], "scale 0.5 is out of range"),
    (["--model", "srcnn", "--scale", "1"], "scale 1 is out of range"),
    (["--model", "srcnn", "--scale", "1e6"], "out of range"),
    (["--model", "srcnn", "--scale", "nan"], "out of range"),
    (["--model", "srcnn-x3", "--scale", "2"], "allowed: exactly 3"),
    (["--model", "srcnn", "--opset", "18"], "opset 18 is too old"),
    (["--model", "srcnn", "--opset", "21", "--exporter", "torchscript"], "too new"),
    (["--model", "srcnn", "--size-input", "scale"], "only with --ops standard"),
    (["--model", "srcnn", "--io-dtype", "fp16"], "needs --precision fp16"),
    (["--model", "srcnn", "--weights", "/nonexistent/w.pt"], "weights file not found"),
    (["--model", "srcnn", "--exporter", "all"], "works with --all"),
])
def test_bad_input_is_one_clear_line(tmp_path, weights, capsys, argv, message):
    out = tmp_path / "m.onnx"
    if "--weights" not in argv:
        argv = argv + ["--weights", str(weights / "srcnn.pt")]
    extra = [] if "--exporter" in argv else ["--exporter", "torchscript"]
    rc = main(["export", *argv, "--output", str(out), *extra])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["out.txt", "out", "out.onnx.part"])
def test_output_must_be_named_onnx(tmp_path, capsys, name):
    """Not an ONNX file named .txt with `out.folded-x*.onnx` beside it: refused before any export."""
    rc = main(["export", "--model", "srcnn", "--output", str(tmp_path / name)])
    assert rc == 2 and capsys.readouterr().err.strip() == \
        f"error: --output {tmp_path / name}: an ONNX file's name must end in .onnx"
    assert list(tmp_path.iterdir()) == []


def test_unwritable_output_path(tmp_path, weights):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(PipelineError, match="cannot create output directory"):
        export_model("srcnn", blocker / "m.onnx", weights=weights / "srcnn.pt")
    with pytest.raises(PipelineError, match="is a directory"):
        export_model("srcnn", tmp_path, weights=weights / "srcnn.pt")


def test_failed_verification_leaves_nothing_behind(tmp_path, weights, monkeypatch):
    out = tmp_path / "m.onnx"
    out.write_bytes(b"previous file")
    monkeypatch.setitem(verify_mod.TOLERANCE, "fp32", -1.0)  # any real error now exceeds it
    with pytest.raises(PipelineError, match="verification failed"):
        export_model("srcnn", out, exporter="torchscript", weights=weights / "srcnn.pt")
    assert out.read_bytes() == b"previous file"  # not overwritten
    assert [p.name for p in tmp_path.iterdir()] == ["m.onnx"]  # no temp file left


def test_weights_that_do_not_fit(tmp_path, weights):
    with pytest.raises(PipelineError, match="does not fit model 'srcnn'"):
        export_model("srcnn", tmp_path / "m.onnx", weights=weights / "deform-srcnn.pt")


def test_no_verify_still_writes_a_checked_file(tmp_path, weights, capsys):
    out = tmp_path / "nv.onnx"
    rc = main(["export", "--model", "srcnn", "--output", str(out), "--exporter", "torchscript", "--no-verify",
               "--weights", str(weights / "srcnn.pt")])
    assert rc == 0 and "not verified" in capsys.readouterr().out
    onnx.checker.check_model(onnx.load(out), full_check=True)
