"""Choosing loads nothing when the facts are stored: a named backend at a fixed precision names its files from the
cache (Backend.planned_files: exactly what a loaded one's `files(scale)` returns), and `load(choice)` is the one
load."""
from __future__ import annotations

from pathlib import Path

import pytest

from pipeline import backends
from pipeline.backends import BackendRequest, registry
from pipeline.backends.openvino_backend import OpenVinoBackend
from pipeline.backends.ort_backend import OrtBackend
from pipeline.backends.ort_folded_backend import OrtFoldedBackend
from pipeline.backends.stand_in_backend import StandInBackend
from pipeline.backends.torch_backend import TorchBackend
from pipeline.native import cpu

RUNS = [("ort", "fp32"), ("ort-folded", "fp32"), ("openvino", "fp32"), ("openvino", "int8"), ("torch", "fp32")]


def _count_loads(monkeypatch, classes) -> list:
    """Every load() of these real backend classes from now on (each still loads: only counted)."""
    loads: list = []
    for cls in classes:
        real = cls.load

        def counted(self, real=real):
            loads.append(f"{self.name} {self.precision}")
            return real(self)

        monkeypatch.setattr(cls, "load", counted)
    return loads


@pytest.mark.parametrize("scale", [3.0, 2.5])  # a folded sibling's integer scale, and one the model's graph runs
def test_the_planned_files_are_the_files_a_loaded_backend_runs(int8_cache, monkeypatch, scale):
    monkeypatch.setenv(cpu.BF16_ENV, "0")  # int8's float parts the same on every CPU
    for name, precision in RUNS:
        opts = {"threads": 1}
        loaded = backends.create(name, "srcnn", precision, scale=scale, **opts)  # its files made now, if missing
        planned = registry.backend_class(name).planned_files("srcnn", precision, scale, opts)
        assert planned == loaded.files(scale), (name, precision)
        assert loaded.run_file(scale) in planned or name == "ort-folded"  # its folded sibling travels beside it
    stand_in = registry.stand_in("srcnn")
    assert StandInBackend.planned_files("srcnn", "fp32", scale, {}) == stand_in.files(scale) == []
    assert TorchBackend.planned_files("srcnn", "fp32", scale, {})[0].name == "srcnn.pt"  # Ray ships the weights


def test_a_fixed_precision_choose_on_a_warm_cache_loads_nothing_and_load_loads_once(int8_cache, monkeypatch):
    monkeypatch.setenv(cpu.BF16_ENV, "0")
    for name, precision in RUNS:
        backends.create(name, "srcnn", precision, threads=1)  # warm: every file cached
    loads = _count_loads(monkeypatch, (OrtBackend, OrtFoldedBackend, OpenVinoBackend, TorchBackend))
    choices = [backends.choose(BackendRequest(name, precision, threads=1), "srcnn") for name, precision in RUNS]
    assert loads == []
    for choice in choices:
        loaded = backends.load(choice)
        assert loads[-1] == choice.runs and loaded.selection_reason == choice.why == f"requested: {choice.backend}"
        assert backends.given(loaded, choice.scale, {"threads": 1}) == choice  # the Choice the loaded one is
    assert loads == [f"{n} {p}" for n, p in RUNS]  # each once (ort-folded loads its plain graph on first use)
    assert choices[3].float_parts == "f32" and choices[0].provider == OrtBackend.settles("fp32", {})["provider"]


def test_a_file_to_make_is_made_by_loading_and_handed_to_load(tmp_path, monkeypatch):
    """Nothing cached: choose loads to make the file (the export), and the next load of that Choice takes that
    backend rather than loading again."""
    from pipeline.backends import choice as choice_module

    monkeypatch.setenv("SRDEPLOY_CACHE", str(tmp_path))
    assert OrtBackend.planned_files("srcnn", "fp32", 3.0, {}) is None
    loads = _count_loads(monkeypatch, (OrtBackend,))
    choice = backends.choose(BackendRequest("ort", threads=1), "srcnn")
    assert loads == ["ort fp32"] and choice_module._JUST_LOADED._slot is not None
    backends.load(choice)
    assert loads == ["ort fp32"] and choice_module._JUST_LOADED._slot is None
    assert OrtBackend.planned_files("srcnn", "fp32", 3.0, {}) == [Path(choice.files[0].path)]  # made now
