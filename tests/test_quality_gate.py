"""The quality gate holds for what runs (pipeline.quality): records keyed by the file the backend runs at
the run's scale and by the machine, checked on read and measured again when damaged; `--precision auto`'s stored
pick; int8 files verified before use and made by one process at a time (pipeline.export.quantize). Calibration uses
one crop per training image here (quantize.CROPS): these tests check the gate, not the recipe's quality."""
from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import onnx
import pytest

from pipeline import precisions, quality
from pipeline.artifacts.onnx_file import FOLDED_SHA_KEY, folded_problem, folded_variants
from pipeline.artifacts.stamp import file_sha256, stamp_path
from pipeline.backends import create_named, select
from pipeline.errors import PipelineError
from pipeline.export import quantize
from pipeline.export.cached import onnx_for
from pipeline.quality import loss

ov = pytest.importorskip("openvino", reason="OpenVINO is not installed")


class Bars:
    """A progress-bar factory (Console.bar's signature) that keeps what each bar was told."""

    def __init__(self):
        self.made: list[dict] = []

    def __call__(self, total, unit="img", desc=None):
        bar = {"total": total, "unit": unit, "desc": desc, "n": 0, "closed": False}
        self.made.append(bar)

        class Bar:
            def update(self, n=1):
                bar["n"] += n

            def close(self):
                bar["closed"] = True

        return Bar()


def _image(folder):
    import cv2

    folder.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(folder / "a.png"), (np.random.default_rng(0).random((40, 50, 3)) * 255).astype(np.uint8))
    return folder / "a.png"


def test_a_record_of_the_wrong_shape_or_for_something_else_is_refused():
    ident = {"model": "m", "backend": "openvino", "precision": "int8", "scale": 3.0, "file_sha256": "ab",
             "machine": {"cpu": "x"}}
    good = {**ident, "images": 4, "psnr": 30.0, "psnr_fp32": 30.1, "psnr_loss_db": 0.1, "ssim": 0.9,
            "ssim_fp32": 0.901, "ssim_loss": 0.001, "psnr_bicubic": 29.5, "ssim_bicubic": 0.89,
            "fidelity_db": [50.0, 48.0, 52.0, 50.0], "fidelity_mean_db": 50.0, "fidelity_worst_db": 48.0,
            "fidelity_ssim": [0.999, 0.998, 0.999, 0.999], "fidelity_ssim_worst": 0.998}
    assert quality.record_problem(good, ident) is None
    for bad in ([], {}, "0.05", None, {**good, "psnr_loss_db": "0.05"}, {**good, "images": True},
                {**good, "ssim_loss": float("nan")}, {**good, "scale": 4.0}, {**good, "file_sha256": "cd"},
                {**good, "machine": {"cpu": "y"}}, {**good, "psnr_loss_db": 0.05}, {**good, "ssim_loss": 0.0},
                {**good, "fidelity_mean_db": 51.0}, {**good, "fidelity_worst_db": 50.0},
                {**good, "fidelity_db": [50.0]}, {k: v for k, v in good.items() if k != "fidelity_db"},
                {k: v for k, v in good.items() if k != "fidelity_ssim"}, {**good, "fidelity_ssim_worst": 0.999},
                {k: v for k, v in good.items() if k != "ssim_bicubic"}, {**good, "psnr_bicubic": float("inf")}):
        assert quality.record_problem(bad, ident) is not None, bad


def test_a_damaged_record_is_measured_again_once_and_a_damaged_pick_never_breaks_sr(int8_cache, tmp_path, capsys,
                                                                                   monkeypatch):
    from pipeline.cli import main

    b = create_named("openvino", "srcnn-x3", "int8", threads=1)
    first = quality.precision_loss(b)
    path = loss._store(quality.identity(b, 3.0))
    assert json.loads(path.read_text()) == first and first["scale"] == 3.0
    assert first["file_sha256"] == file_sha256(b.run_file(3.0))  # the folded graph's Q/DQ file: what runs at x3
    assert b.run_file(3.0) != b.model_file() and b.run_file(3.0).name.startswith(b.variants[3].stem)
    path.write_text(json.dumps({**first, "psnr_loss_db": "0.01"}))  # other shapes: the test above
    assert quality.stored(b) is None
    said: list[str] = []
    bars = Bars()
    again = quality.precision_loss(b, log=said.append, progress=bars)
    assert again["psnr_loss_db"] == first["psnr_loss_db"] and json.loads(path.read_text()) == again
    assert [(m["desc"], m["n"], m["total"], m["closed"]) for m in bars.made] == [("measuring int8's loss", 8, 8, True)]
    assert len(said) == 1 and "the stored record is not used: its losses are not numbers" in said[0]
    # a pick store of the wrong shape: plain fp32 runs and `--precision auto` (which times again) both exit 0
    src, out = _image(tmp_path / "in"), tmp_path / "out"
    (int8_cache / "quality").mkdir(exist_ok=True)
    pick = select._pick_store("srcnn-x3", "auto", 3.0, {})
    for damaged in ("[]", '{"precision": "int8", "ms": "x"}'):
        pick.write_text(damaged)
        assert main(["sr", str(src), str(out / "a.png"), "--model", "srcnn-x3", "--threads", "1"]) == 0
    assert "hint:" not in capsys.readouterr().err
    auto = ["sr", str(src), str(out / "b.png"), "--model", "srcnn-x3", "--precision", "auto", "--threads", "1"]
    assert main(auto) == 0
    assert "reused" not in capsys.readouterr().err and isinstance(json.loads(pick.read_text()), dict)
    assert main(auto) == 0  # nothing changed: the stored pick and its timings, said so
    said = " ".join(capsys.readouterr().err.split())  # the reason's lines are wrapped (issue 67)
    assert "reused: same file, scale and machine" in said
    # a new int8 recipe (any artifact version) times the candidates again, whichever one the stored pick ran
    bumped = dataclasses.replace(precisions.ARTIFACTS["qdq"], version=precisions.version("qdq") + 1)
    monkeypatch.setitem(precisions.ARTIFACTS, "qdq", bumped)
    assert select._pick_store("srcnn-x3", "auto", 3.0, {}) != pick
    assert main(auto) == 0
    assert "reused" not in capsys.readouterr().err


def _bundle(folder, fp32, change_sibling: bool, record_sha: bool = True):
    """A copy of an SRCNN export with its folded x3 sibling, the sibling's last bias moved by `change_sibling`
    (a different file of the same model), the main file's metadata naming the sibling's SHA-256 when `record_sha`."""
    folder.mkdir()
    main = onnx.load(str(fp32))
    sibling = folded_variants(fp32)[3]
    folded = onnx.load(str(sibling))
    if change_sibling:
        bias = next(t for t in reversed(folded.graph.initializer) if len(t.dims) == 1)
        values = onnx.numpy_helper.to_array(bias) + np.float32(0.01)
        bias.CopyFrom(onnx.numpy_helper.from_array(values.astype(np.float32), bias.name))
    onnx.save(folded, str(folder / sibling.name))
    meta = {p.key: p for p in main.metadata_props}
    variants = meta["folded_variants"].value.split(",")
    meta["folded_variants"].value = next(v for v in variants if v.startswith("3:"))
    sha = f"3:{file_sha256(folder / sibling.name)}" if record_sha else "3:" + "0" * 64
    meta[FOLDED_SHA_KEY].value = sha
    onnx.save(main, str(folder / fp32.name))
    return folder / fp32.name


def test_a_changed_folded_sibling_is_measured_again_and_a_foreign_one_refused(int8_cache, tmp_path):
    fp32 = onnx_for("srcnn-x3")
    records, said = [], []
    for n, changed in enumerate((False, True)):
        b = create_named("openvino", None, "int8", onnx=_bundle(tmp_path / f"b{n}", fp32, changed), threads=1)
        said.clear()
        records.append(quality.precision_loss(b, log=said.append))
    assert said and said[0].startswith("measuring what int8 costs on the held-out images at x3")
    assert records[0]["file_sha256"] != records[1]["file_sha256"]  # the folded graph differs: its own record
    foreign = _bundle(tmp_path / "foreign", fp32, True, record_sha=False)
    with pytest.raises(PipelineError, match="folded variant .* is not the file exported with"):
        create_named("openvino", None, "int8", onnx=foreign, threads=1)
    with pytest.raises(PipelineError, match="folded variant .* is not the file exported with"):
        create_named("ort-folded", None, "fp32", onnx=foreign, threads=1)


def test_deform_srcnn_at_x4_is_measured_at_x4_and_auto_holds_it_to_its_budget(int8_cache, monkeypatch):
    """The loss at x4 is its own record (the default scale's is not used for it), and `--precision auto` at x4
    weighs int8 by it: with the budget just below x4's loss, int8 is not picked and the line cites x4's loss."""
    b = create_named("openvino", "deform-srcnn", "int8", threads=1)
    x4 = quality.precision_loss(b, scale=4.0)
    assert x4["scale"] == 4.0 and quality.stored(b, 4.0) == x4
    assert quality.stored(b) is None  # the default scale (x3) was never measured: x4's record is not its
    monkeypatch.setitem(quality.BUDGET_DB, "int8", x4["psnr_loss_db"] - 1e-4)
    # the candidates timed once on 32x32 instead of 7 times on 256x256 (-> 1024x1024: most of this test's time);
    # what is held here is the budget, not which one is fastest
    timed = select.time_backend
    monkeypatch.setattr(select, "time_backend", lambda b, _size, **kw: timed(b, 32, **{**kw, "repeats": 1,
                                                                                      "warmup": 0}))
    best, why = select.pick_precision("openvino", "deform-srcnn", scale=4.0, threads=1)
    assert best.precision != "int8" and f"int8 not used: {quality.loss_line(x4, advice=False)}" in why


def test_a_truncated_foreign_or_linked_int8_file_is_made_again(int8_cache, tmp_path):
    fp32 = folded_variants(onnx_for("srcnn-x3"))[3]
    path = quantize.int8_file(fp32, 3)
    good = path.read_bytes()
    outside = tmp_path / "elsewhere.onnx"
    outside.write_bytes(fp32.read_bytes())
    damage = {"truncated": lambda: path.write_bytes(good[:len(good) // 2]),
              "foreign": lambda: path.write_bytes(fp32.read_bytes()),
              "linked": lambda: (path.unlink(), path.symlink_to(outside)),
              "unstamped": lambda: stamp_path(path).unlink()}
    for what, spoil in damage.items():
        spoil()
        said: list[str] = []
        bars = Bars()
        assert quantize.int8_file(fp32, 3, log=said.append, progress=bars) == path
        assert len(said) == 1 and "the cached one is not used" in said[0], what
        assert not path.is_symlink() and path.read_bytes() == good, what  # same recipe, same file
        (bar,) = bars.made  # one calibration pass, one tick per crop
        assert bar["desc"] == "int8 calibration" and bar["n"] == bar["total"] > 0 and bar["closed"]
    assert outside.read_bytes() == fp32.read_bytes()  # a link is replaced, never written through


MAKE_INT8 = """
import json, sys
from pipeline.export import quantize
quantize.CROPS = 1
said = []
path = quantize.int8_file(sys.argv[1], 3, log=said.append)
print(json.dumps([str(path), said]))
"""


def test_two_processes_asking_for_one_int8_file_make_it_once(int8_cache, tmp_path):
    """The second waits for the first's file lock, then reuses its file."""
    import subprocess
    import sys

    fp32 = folded_variants(onnx_for("srcnn-x3"))[3]
    env = {**os.environ, "SRDEPLOY_CACHE": str(tmp_path / "cache"), "PYTHONPATH": os.getcwd()}
    procs = [subprocess.Popen([sys.executable, "-c", MAKE_INT8, str(fp32)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    talk = [p.communicate(timeout=600) for p in procs]
    results = [json.loads(out) for out, _ in talk]
    assert [p.returncode for p in procs] == [0, 0]
    for _, err in talk:  # ONNX Runtime's quantizer says nothing on the terminal (issue 42: its talk is --verbose's)
        assert "Please consider" not in err and "Removing initializer" not in err and "WARNING" not in err, err
    assert results[0][0] == results[1][0]
    assert sum(len(said) for _, said in results) == 1  # made once
    onnx.checker.check_model(results[0][0])


def test_openvino_failures_keep_their_cause(tmp_path):
    """A truncated file says what OpenVINO found, not the source location it opens its message with."""
    from pipeline.backends.openvino_backend import openvino_cause

    bad = tmp_path / "bad.onnx"
    bad.write_bytes(onnx_for("srcnn-x3").read_bytes()[:4000])
    with pytest.raises(Exception) as e:
        ov.Core().read_model(str(bad))
    assert "core.cpp" in str(e.value)
    assert openvino_cause(e.value) == "FrontEnd API failed with GeneralFailure: Model can't be parsed"


@pytest.mark.parametrize("attrs,refusal", [
    ({"kernel_shape": [5, 5]}, "DeformConv2d kernel_shape [5, 5] does not match weight shape"),
    ({"strides": [0, 1]}, "stride/dilation must be positive and padding non-negative"),
    ({"pads": [-1, 0, 0, 0]}, "stride/dilation must be positive and padding non-negative")])
def test_openvino_refuses_the_deform_attributes_our_ort_op_refuses(tmp_path, cpu_kernels, attrs, refusal):
    from onnx import TensorProto, helper, numpy_helper

    from pipeline.backends.openvino_backend import openvino_cause
    from pipeline.native.openvino_ops import extensions
    from pipeline.native.ort_ops import run, session_with_sr_kernels

    attrs = {"strides": [1, 1], "pads": [0, 0, 0, 0], "dilations": [1, 1], "kernel_shape": [3, 3], "group": 1,
             "offset_group": 1, **attrs}
    node = helper.make_node("DeformConv2d", ["X", "W", "offset"], ["Y"], domain="sr", **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 2, 8, 8]),
                                            helper.make_tensor_value_info("offset", TensorProto.FLOAT, [1, 18, 6, 6])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.ones((2, 2, 3, 3), np.float32), "W")])
    model = helper.make_model(graph, ir_version=9, opset_imports=[helper.make_opsetid("", 19),
                                                                   helper.make_opsetid("sr", 1)])
    onnx.save(model, tmp_path / "m.onnx")
    with pytest.raises(PipelineError, match=refusal.replace("[", r"\[").replace("]", r"\]")):
        run(session_with_sr_kernels(model), {"X": np.zeros((1, 2, 8, 8), np.float32),
                                             "offset": np.zeros((1, 18, 6, 6), np.float32)})
    core = ov.Core()
    for ext in extensions():
        core.add_extension(ext)
    with pytest.raises(Exception) as e:
        core.compile_model(core.read_model(str(tmp_path / "m.onnx")), "CPU")
    assert openvino_cause(e.value).startswith(refusal)


def test_a_cached_export_with_a_damaged_folded_sibling_or_linked_is_exported_again(tmp_path):
    cache = tmp_path / "onnx"
    path = onnx_for("srcnn-x3", cache=cache)
    sibling = folded_variants(path)[3]
    good = sibling.read_bytes()
    sibling.write_bytes(good[:len(good) // 2])
    said: list[str] = []
    assert onnx_for("srcnn-x3", cache=cache, log=said.append) == path
    assert len(said) == 1 and f"the folded variant {sibling.name} is not the file exported with" in said[0]
    assert folded_problem(path, folded_variants(path)) is None  # a whole sibling, the one its metadata names
    elsewhere = tmp_path / "elsewhere.onnx"
    path.rename(elsewhere)
    path.symlink_to(elsewhere)
    said.clear()
    assert onnx_for("srcnn-x3", cache=cache, log=said.append) == path
    assert len(said) == 1 and "is a link" in said[0] and not path.is_symlink() and elsewhere.is_file()


def test_the_quantizers_talk_goes_to_chatter_only(capsys):
    import logging
    import warnings

    lines: list[str] = []
    with quantize.quiet_libraries(lines.append):
        logging.getLogger().warning("Please consider to run pre-processing before quantization.")
        print("Collecting tensor data and making histogram ...")
        warnings.warn("a library warning", UserWarning, stacklevel=1)
    out, err = capsys.readouterr()
    assert out == "" and err == ""
    assert any("Please consider" in ln for ln in lines) and any("Collecting" in ln for ln in lines)
    assert any("a library warning" in ln for ln in lines)
    with quantize.quiet_libraries(None):  # without --verbose: nowhere
        print("Collecting tensor data and making histogram ...")
    assert capsys.readouterr() == ("", "")


def test_external_data_is_read_beside_the_model_whatever_the_working_folder(int8_cache, tmp_path, monkeypatch):
    folded = onnx.load(str(folded_variants(onnx_for("srcnn-x3"))[3]))
    (tmp_path / "model").mkdir()
    path = tmp_path / "model" / "ext.onnx"
    onnx.save(folded, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location="ext.bin",
              size_threshold=0)
    assert (tmp_path / "model" / "ext.bin").is_file()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    q = onnx.load(str(quantize.int8_file(path, 3)))
    assert "DequantizeLinear" in {n.op_type for n in q.graph.node} and not any(
        t.data_location == onnx.TensorProto.EXTERNAL for t in q.graph.initializer)


def test_the_sr_line_comes_first_on_a_first_auto_run_and_a_reused_pick_says_its_age_and_size(int8_cache, tmp_path,
                                                                                              capsys):
    """What choosing says (each precision's measurement here) comes after the sr: line; the next run's pick is
    labelled as an earlier run's, with its age and the size it was timed at."""
    from pipeline.cli import main

    for old in (int8_cache / "quality").glob("srcnn-x3-*.json"):
        old.unlink()  # measured again: lines said while choosing
    select._pick_store("srcnn-x3", "auto", 3.0, {}).unlink(missing_ok=True)
    src = _image(tmp_path / "in")
    auto = ["sr", str(src), str(tmp_path / "out"), "--model", "srcnn-x3", "--precision", "auto", "--threads", "1"]
    assert main(auto) == 0
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("sr: srcnn-x3 x3 on ") and any(ln.startswith("measuring what") for ln in lines[1:])
    assert main(auto[:2] + [str(tmp_path / "out2")] + auto[3:]) == 0
    first = capsys.readouterr().err.splitlines()[0]
    assert "fastest within budget; stored pick of " in first and " ago, timed at 256x256 by an earlier run" in first
