"""One backend request in, one frozen choice out: what `choose` names, what `load` makes of it elsewhere, the
argument group that builds the request, and `backends --precision auto`'s one line."""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import pickle
from pathlib import Path

import numpy as np
import pytest

from models import spec as model_spec
from models.lookup import get_spec
from pipeline import backends
from pipeline.backends import BackendRequest
from pipeline.backends import choice as choice_module
from pipeline.cli import main
from pipeline.cli.options import BackendArgs
from pipeline.errors import PipelineError
from pipeline.native import cpu
from pipeline.native.cuda_driver import gpu_visible


def test_a_choice_names_its_files_travels_as_a_value_and_loads_the_same_backend(session_cache):
    choice = backends.choose(BackendRequest("ort", threads=1), "srcnn", 2.0)
    assert (choice.backend, choice.precision, choice.model, choice.scale) == ("ort", "fp32", "srcnn", 2.0)
    assert choice.why == "requested: ort" and dict(choice.options) == {"threads": 1}
    rels = [f.rel for f in choice.files]
    assert rels[0].startswith("onnx/srcnn-fp32-custom") and any(".folded-x2." in r for r in rels)  # siblings too
    for f in choice.files:
        assert f.sha256 == hashlib.sha256(Path(f.path).read_bytes()).hexdigest()
        assert Path(f.path) == session_cache / f.rel
    again = pickle.loads(pickle.dumps(choice))  # what a Ray actor receives
    assert again == choice and dataclasses.is_dataclass(again)
    with pytest.raises(dataclasses.FrozenInstanceError):
        choice.precision = "int8"
    x = np.random.default_rng(0).random((1, 3, 12, 14), dtype=np.float32)
    loaded = backends.load(again)
    assert (loaded.name, loaded.precision, loaded.selection_reason) == ("ort", "fp32", "requested: ort")
    assert np.array_equal(loaded.infer(x, 2.0), backends.create("ort", "srcnn", threads=1).infer(x, 2.0))


def test_the_backend_choose_loaded_is_handed_to_the_next_load_of_that_choice_once(session_cache):
    """`--backend auto` loads its pick to decide; the next load of that Choice takes it (the local run loads once), a
    later load makes its own (two callers never share one), and another Choice never gets it."""
    choice = backends.choose(BackendRequest("auto", threads=1), "srcnn", 2.0)
    held = choice_module._JUST_LOADED._slot[1]
    first, second = backends.load(choice), backends.load(choice)
    assert first is held and second is not held and second.selection_reason == choice.why
    other = backends.choose(BackendRequest("auto", threads=2), "srcnn", 2.0)
    kept = choice_module._JUST_LOADED._slot[1]
    assert backends.load(choice) is not kept
    assert backends.load(other) is kept and kept.threads == 2
    assert not hasattr(backends, "choose_loaded") and not hasattr(backends, "of_loaded")


def test_the_choice_names_the_provider_this_machine_settled_and_every_load_runs_it(session_cache):
    """ONNX Runtime's provider is the Choice's, not each node's own pick at load: a node that cannot run it refuses
    in one line (no silent fallback); it keys the outputs. OpenVINO's int8 float parts are an option of int8 only."""
    choice = backends.choose(BackendRequest("ort", threads=1), "srcnn", 2.0)
    loaded = backends.load(choice)
    assert choice.provider == loaded.provider and choice.key()["provider"] == choice.provider
    assert choice.float_parts is None and "float_parts" not in choice.key()
    if not gpu_visible()[0]:
        assert choice.provider == "cpu"
        with pytest.raises(PipelineError, match="CUDAExecutionProvider"):
            backends.load(dataclasses.replace(choice, provider="cuda"))
    with pytest.raises(PipelineError, match="float_parts applies to openvino int8 only"):
        backends.create("openvino", "srcnn", float_parts="f32")
    with pytest.raises(PipelineError, match="unknown int8 float parts 'f16'"):
        backends.create("openvino", "srcnn", "int8", float_parts="f16")


def test_a_given_file_is_named_and_moved_to_where_a_node_has_it(tmp_path, session_cache):
    exported = backends.choose(BackendRequest("ort"), "srcnn").files[0]
    given = tmp_path / "mine.onnx"
    given.write_bytes(Path(exported.path).read_bytes())
    choice = backends.choose(BackendRequest("ort", onnx=given), None)
    [mine] = [f for f in choice.files if f.path == str(given)]
    assert mine.rel.startswith("shared/") and mine.rel.endswith("/mine.onnx")
    moved = choice.moved({str(given): "/node/cache/" + mine.rel})
    assert dict(moved.options)["onnx"] == "/node/cache/" + mine.rel and moved.files == choice.files


def test_an_onnx_files_external_data_travels_with_it_and_keys_the_choice(tmp_path, session_cache):
    """A node gets the weights an --onnx file keeps beside it (w.bin), where the file names them; swapping them
    changes the Choice's key (what video segments are keyed by)."""
    import onnx

    model = onnx.load(backends.choose(BackendRequest("ort"), "srcnn").files[0].path)
    keep = [p for p in model.metadata_props if not p.key.startswith("folded")]  # no siblings: the file runs
    del model.metadata_props[:]
    model.metadata_props.extend(keep)
    onnx.save(model, str(tmp_path / "m.onnx"), save_as_external_data=True, location="w.bin", size_threshold=0)
    choice = backends.choose(BackendRequest("ort", onnx=tmp_path / "m.onnx"), None)
    rels = {Path(f.path).name: f.rel for f in choice.files}
    assert Path(rels["w.bin"]).parent == Path(rels["m.onnx"]).parent  # beside it on the node too
    data = bytearray((tmp_path / "w.bin").read_bytes())
    data[-4:] = bytes(4)
    (tmp_path / "w.bin").write_bytes(bytes(data))
    assert backends.choose(BackendRequest("ort", onnx=tmp_path / "m.onnx"), None).key() != choice.key()


@pytest.mark.skipif(gpu_visible()[0], reason="a machine with a CUDA GPU loads a GPU backend to choose it")
def test_a_gpu_backend_is_chosen_by_name_on_a_machine_without_a_gpu():
    choice = backends.choose(BackendRequest("ort-cuda"), "srcnn")
    assert choice.runs == "ort-cuda fp32" and "loaded on the nodes with a GPU" in choice.why
    assert choice.files[0].rel.startswith("onnx/srcnn-fp32-custom")  # the graph it is built from, shipped


def test_the_backend_argument_group_adds_and_parses_one_request(tmp_path):
    group = BackendArgs("one", "auto", files=("onnx", "engine", "weights"), threads=True, check_files=False)
    parser = argparse.ArgumentParser()
    group.add_parser_arguments(parser)
    args = parser.parse_args(["--backend", "openvino", "--precision", "int8", "--threads", "2", "--onnx", "m.onnx"])
    assert group.parse(args) == BackendRequest("openvino", "int8", onnx=Path("m.onnx"), threads=2)
    with pytest.raises(PipelineError, match="unknown backend 'nope'"):
        group.parse(parser.parse_args(["--backend", "nope"]))
    checked = BackendArgs(files=("weights",))
    parser = argparse.ArgumentParser()
    checked.add_parser_arguments(parser)
    with pytest.raises(PipelineError, match="weights file not found"):
        checked.parse(parser.parse_args(["--weights", str(tmp_path / "missing.pt")]))


def test_backends_precision_auto_says_in_one_line_what_runs_and_why(capsys, monkeypatch):
    monkeypatch.setenv(cpu.BF16_ENV, "0")  # the same candidates on every CPU
    assert main(["backends", "--model", "srcnn-x3", "--precision", "auto"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("auto: ")
    if "stored pick of" not in out:  # nothing chosen in this cache yet: what the first run weighs
        assert "first run times " in out and "openvino int8" in out and " fp32" in out, out
    backends.create("torch", "srcnn", "auto", threads=1)  # a pick stored: torch fp32 (bf16 off)
    line = backends.auto_line("torch", "srcnn", threads=1)
    assert line.startswith("auto: torch fp32 (stored pick of ") and "fastest within budget" in line, line


def _counting_loads(monkeypatch, cls) -> list:
    """Every load() of the real backend class `cls` from now on (it still loads: only counted)."""
    loads: list = []
    real = cls.load

    def counted(self):
        loads.append(self.precision)
        return real(self)

    monkeypatch.setattr(cls, "load", counted)
    return loads


def test_a_stored_auto_pick_is_chosen_from_the_stores_alone_and_loaded_once(monkeypatch, tmp_path, session_cache):
    """A reused `--precision auto` pick: choose loads nothing, load(choice) loads once, and it is the Choice the
    loaded backend is; a record of an older version (no files), one naming a file outside the cache, or the model's
    weights changed: timed again."""
    from pipeline.backends import select
    from pipeline.backends.torch_backend import TorchBackend

    monkeypatch.setenv(cpu.BF16_ENV, "0")  # the same candidates on every CPU
    request = BackendRequest("torch", "auto", threads=1)
    backends.create("torch", "srcnn", "auto", threads=1)  # a pick stored (or reused)
    loads = _counting_loads(monkeypatch, TorchBackend)
    choice = backends.choose(request, "srcnn")
    assert loads == [] and "reused: same file, scale and machine" in choice.why, choice.why
    loaded = backends.load(choice)
    assert len(loads) == 1 and loaded.selection_reason == choice.why
    assert choice == backends.given(loaded, choice.scale, {"threads": 1})
    store = select._pick_store("srcnn", "torch", choice.scale, {"threads": 1})
    record = json.loads(store.read_text())
    outside = tmp_path / "elsewhere.pt"
    outside.write_bytes(Path(record["run_file"]).read_bytes())
    store.write_text(json.dumps({**record, "run_file": str(outside)}))
    assert select.stored_pick("torch", "srcnn", "auto", None, {"threads": 1}) is None
    store.write_text(json.dumps({k: v for k, v in record.items() if k != "files"}))  # an older version's
    again = backends.choose(request, "srcnn")
    assert len(loads) > 1 and "reused" not in again.why and "files" in json.loads(store.read_text())
    assert select.stored_pick("torch", "srcnn", "auto", None, {"threads": 1}) is not None
    mine = tmp_path / "weights"
    mine.mkdir()
    data = bytearray(get_spec("srcnn").weights_path.read_bytes())
    data[-1] ^= 1  # other weights, as a re-run `make weights` leaves
    (mine / get_spec("srcnn").weights_file).write_bytes(bytes(data))
    monkeypatch.setattr(model_spec, "WEIGHTS_DIR", mine)
    assert select.stored_pick("torch", "srcnn", "auto", None, {"threads": 1}) is None
