"""Artifact cache: keys, location, atomic creation, reuse."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from models.registry import get_spec
from pipeline.artifacts import cache as artifacts
from pipeline.errors import PipelineError
from pipeline.export.cached import onnx_for


@pytest.fixture
def weights(tmp_path):
    torch.manual_seed(0)
    path = tmp_path / "srcnn.pt"
    torch.save(get_spec("srcnn").build().state_dict(), path)
    return path


def test_cache_dir_env(monkeypatch, tmp_path):
    monkeypatch.setenv("SRDEPLOY_CACHE", str(tmp_path / "c"))
    assert artifacts.cache_dir() == tmp_path / "c"
    monkeypatch.delenv("SRDEPLOY_CACHE")
    assert artifacts.cache_dir() == Path.home() / ".cache" / "srdeploy"


def test_every_key_part_changes_the_name():
    base = dict(model="srcnn", weights_sha="0" * 64, precision="fp32", ops="custom", exporter="dynamo", io_dtype="fp32")
    names = {artifacts.onnx_name(**base)}
    for key, value in [("model", "deform-srcnn"), ("weights_sha", "1" * 64), ("precision", "fp16"),
                       ("ops", "standard"), ("exporter", "torchscript"), ("io_dtype", "fp16")]:
        names.add(artifacts.onnx_name(**{**base, key: value}))
    assert len(names) == 7
    p1 = {"profiles": [{"batch": [1, 1, 4]}]}
    p2 = {"profiles": [{"batch": [1, 1, 8]}]}
    assert artifacts.engine_name("a.onnx", p1) != artifacts.engine_name("a.onnx", p2)
    assert artifacts.engine_name("a.onnx", p1) == artifacts.engine_name("a.onnx", {"profiles": [{"batch": [1, 1, 4]}]})
    with pytest.raises(PipelineError, match="unknown precision"):
        artifacts.onnx_name("srcnn", "0" * 64, precision="int8")


def test_onnx_for_exports_once_then_reuses(tmp_path, weights, monkeypatch):
    monkeypatch.setenv("SRDEPLOY_CACHE", str(tmp_path / "cache"))
    p = onnx_for("srcnn", weights=weights)
    assert p.is_file() and p.parent == tmp_path / "cache" / "onnx"
    assert artifacts.weights_sha256("srcnn", weights)[:16] in p.name
    import onnx

    meta = {m.key: m.value for m in onnx.load(str(p)).metadata_props}
    assert meta["model"] == "srcnn" and meta["precision"] == "fp32" and meta["ops"] == "custom"
    mtime = p.stat().st_mtime_ns
    assert onnx_for("srcnn", weights=weights) == p and p.stat().st_mtime_ns == mtime
    # No temp leftovers: the file and exactly the siblings its metadata names (folded variants, references).
    named = [n.partition(":")[2] for n in meta["folded_variants"].split(",")] + [meta["reference"]]
    assert sorted(x.name for x in p.parent.iterdir()) == sorted([p.name, *named])
    assert all(not n.startswith(".") for n in named) and len(named) == 4  # x2, x3, x4 + reference


def test_new_weights_give_a_new_artifact(tmp_path, weights, monkeypatch):
    monkeypatch.setenv("SRDEPLOY_CACHE", str(tmp_path / "cache"))
    torch.manual_seed(1)
    other = tmp_path / "other.pt"
    torch.save(get_spec("srcnn").build().state_dict(), other)
    a = onnx_for("srcnn", weights=weights, verify=False)
    b = onnx_for("srcnn", weights=other, verify=False)
    assert a != b and a.is_file() and b.is_file()


def test_failed_export_leaves_cache_clean(tmp_path, weights, monkeypatch):
    """The cache's own contract (atomic creation), with the exporter failing half way through."""
    import pipeline.export.core as export

    def half_then_fail(model, output, **kw):
        Path(output).write_bytes(b"partial")
        raise PipelineError("exporter crashed")

    monkeypatch.setattr(export, "export_model", half_then_fail)
    monkeypatch.setenv("SRDEPLOY_CACHE", str(tmp_path / "cache"))
    with pytest.raises(PipelineError, match="exporter crashed"):
        onnx_for("srcnn", weights=weights)
    assert list((tmp_path / "cache" / "onnx").iterdir()) == []


def test_missing_weights_and_unknown_model(tmp_path):
    with pytest.raises(PipelineError, match="weights file not found"):
        onnx_for("srcnn", weights=tmp_path / "none.pt")
    with pytest.raises(PipelineError, match="unknown model"):
        artifacts.weights_path("nope")
