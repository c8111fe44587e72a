"""Cached files keyed by every byte they come from, and the gate's two criteria (issue 48 items 2 and 3): an int8 file
of an --onnx model whose weights live in external data follows a swap of that data; an edited or linked quality
record is measured again; a new cache is owner-only; a lower precision within its ground-truth budget but below
its fidelity floor is not picked; compare's report carries `fidelity` for every lower precision."""
from __future__ import annotations

import json
import os
import stat

import numpy as np
import onnx
import pytest

from pipeline import quality
from pipeline.artifacts import cache
from pipeline.artifacts.stamp import content_sha256, file_sha256
from pipeline.backends import create_named, select
from pipeline.export.cached import onnx_for
from pipeline.quality import loss

pytest.importorskip("openvino", reason="OpenVINO is not installed")


def _external_copy(folder, weights_scale: float = 1.0):
    """srcnn-x3's fp32 export saved as `model.onnx` + `w.bin` (every initializer external), without its folded
    siblings (so the file itself runs), its weights multiplied by `weights_scale`."""
    model = onnx.load(str(onnx_for("srcnn-x3")))
    keep = [p for p in model.metadata_props if not p.key.startswith("folded")]
    del model.metadata_props[:]
    model.metadata_props.extend(keep)
    for t in model.graph.initializer:
        if t.data_type == onnx.TensorProto.FLOAT and len(t.dims) == 4:
            t.CopyFrom(onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(t) * np.float32(weights_scale), t.name))
    folder.mkdir(exist_ok=True)
    onnx.save(model, str(folder / "model.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
              location="w.bin", size_threshold=0)
    return folder / "model.onnx"


def _rms(a, b) -> float:
    return float(np.sqrt(np.mean((np.clip(a, 0, 1) * 255 - np.clip(b, 0, 1) * 255) ** 2)))


def test_swapping_external_data_rebuilds_the_int8_file_and_follows_the_new_weights(int8_cache, tmp_path):
    path = _external_copy(tmp_path / "m")
    x = np.random.default_rng(3).random((1, 3, 24, 24), dtype=np.float32)
    b = create_named("openvino", None, "int8", onnx=path, threads=1)
    old = b.infer(x, 3.0)
    record = quality.precision_loss(b)
    onnx_bytes = path.read_bytes()
    _external_copy(tmp_path / "new", weights_scale=0.5)
    os.replace(tmp_path / "new" / "w.bin", tmp_path / "m" / "w.bin")  # the same .onnx bytes, other weights
    assert path.read_bytes() == onnx_bytes and content_sha256(path) != file_sha256(path)
    said: list[str] = []
    b2 = create_named("openvino", None, "int8", onnx=path, threads=1, log=said.append)
    assert any("the cached one is not used: its source's external data changed since it was made (w.bin)" in s
               for s in said), said
    new = b2.infer(x, 3.0)
    fp32_new = create_named("openvino", None, "fp32", onnx=path, threads=1).infer(x, 3.0)
    assert _rms(new, fp32_new) < 2.0 < _rms(old, fp32_new)  # int8 follows the new weights
    assert quality.stored(b2) is None or quality.stored(b2) != record  # the old record is not this file's
    assert quality.precision_loss(b2)["file_sha256"] != record["file_sha256"]


def _measured(backend, said):
    return quality.precision_loss(backend, log=said.append)


def test_an_edited_or_linked_quality_record_is_measured_again(int8_cache, tmp_path):
    b = create_named("openvino", "srcnn-x3", "int8", threads=1)
    first = quality.precision_loss(b)
    ident = loss.identity(b, 3.0)
    store = loss._store(ident)
    edits = {
        "loss edited": lambda r: {**r, "psnr_loss_db": 0.0},
        "fidelity edited": lambda r: {**r, "fidelity_worst_db": r["fidelity_worst_db"] + 5},
        "no fidelity (older version)": lambda r: {k: v for k, v in r.items() if not k.startswith("fidelity")},
    }
    for what, edit in edits.items():
        store.write_text(json.dumps(edit(first)))
        said: list[str] = []
        again = _measured(b, said)
        assert len(said) == 1 and "the stored record is not used" in said[0], what
        assert again["psnr_loss_db"] == first["psnr_loss_db"], what
    outside = tmp_path / "record.json"
    outside.write_text(json.dumps(first))
    store.unlink()
    store.symlink_to(outside)
    said = []
    assert _measured(b, said)["fidelity_db"] == first["fidelity_db"]
    assert "it is a link or not a regular file inside the cache" in said[0]
    assert store.is_file() and not store.is_symlink() and outside.read_text() == json.dumps(first)


def test_a_new_cache_is_owner_only_and_a_shared_one_is_warned_about_once(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SRDEPLOY_CACHE", str(tmp_path / "new" / "cache"))
    root = cache.cache_dir()
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv("SRDEPLOY_CACHE", str(shared))
    cache.cache_dir()
    cache.cache_dir()
    err = capsys.readouterr().err
    assert err.count("is writable by other users (mode 777)") == 1 and f"chmod go-w {shared}" in err


def test_within_budget_but_below_the_fidelity_floor_is_not_picked(int8_cache, monkeypatch):
    """int8's ground-truth drop is within its budget; with the floor above its worst image's fidelity, `auto` does not
    pick it and says why (the gain kept not weighed here: int8 calibrated on one crop per image, as this module's
    cache makes it, is not the shipped file the gain rule is held to in tests/test_quantize_quality.py)."""
    b = create_named("openvino", "srcnn-x3", "int8", threads=1)
    record = quality.precision_loss(b)
    monkeypatch.setattr(quality.gain, "GAIN_KEPT_MIN", 0.0)
    assert quality.loss.within_loss(record) and quality.within_budget(record)
    assert 38 <= record["fidelity_worst_db"] <= record["fidelity_mean_db"] < 100
    monkeypatch.setitem(quality.fidelity.FIDELITY_FLOOR_DB, "int8", record["fidelity_worst_db"] + 0.5)
    assert quality.loss.within_loss(record) and not quality.within_budget(record)
    line = quality.loss_line(record, advice=False)
    assert "BELOW its fidelity floor" in line and "OVER" not in line
    best, why = select.pick_precision("openvino", "srcnn-x3", threads=1)
    assert best.precision != "int8" and f"int8 not used: {line}" in why


def test_compare_report_carries_fidelity_for_every_lower_precision(int8_cache, tmp_path):
    from pipeline.analysis.compare import compare_model
    from pipeline.report import environment, write_compare

    section = compare_model("srcnn-x3", size=32, precisions=("fp32", "fp16", "int8"), backends=["ort", "openvino"],
                            log=lambda _m: None)
    doc = {"kind": "compare", "environment": environment(), "models": [section]}
    paths = write_compare(doc, tmp_path)
    rows = {(r["backend"], r["precision"]): r for r in json.loads(paths["json"].read_text())["models"][0]["rows"]
            if r["status"] in ("pass", "fail")}
    assert rows[("ort", "fp32")]["fidelity"] is None
    for key in (("ort", "fp16"), ("openvino", "int8")):
        f = rows[key]["fidelity"]
        assert f["worst_db"] <= f["mean_db"] and f["floor_db"] == quality.fidelity.floor(key[1]) and f["images"] >= 1
    assert rows[("openvino", "int8")]["fidelity"]["on"] == "held-out"
    assert "fidelity dB (worst)" in paths["md"].read_text() and "fidelity" in paths["html"].read_text()
