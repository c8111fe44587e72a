"""Backends as data (issue 43): each backend's descriptor is what the registry, the expected order, `--precision auto`'s
candidates, the CLI and `backends` read; precisions are one table; selection lives only under pipeline/backends."""
from __future__ import annotations

import ast
import dataclasses
import inspect
import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from pipeline import backends, precisions
from pipeline.backends import BackendStatus, registry
from pipeline.backends.descriptor import HOOKS, Descriptor, Runs
from pipeline.cli import main
from pipeline.errors import PipelineError

ROOT = Path(__file__).resolve().parents[1]
PIPELINE = ROOT / "pipeline"


def _literals_naming_precisions(tree: ast.AST):
    """(line, names) of every tuple, list, set or dict-keys literal that names two or more precisions."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            elts = node.elts
        elif isinstance(node, ast.Dict):
            elts = [k for k in node.keys if k is not None]
        else:
            continue
        names = [e.value for e in elts if isinstance(e, ast.Constant) and e.value in precisions.NAMES]
        if len(names) >= 2:
            yield node.lineno, names


def test_precision_names_are_listed_in_one_module():
    """A list of precision names anywhere but pipeline/precisions.py is a second place to keep in step (the
    descriptors name each precision a backend runs in its own Runs entry, never as a list)."""
    found = [f"{path.relative_to(ROOT)}:{line}: {names}" for path in sorted(PIPELINE.rglob("*.py"))
             if path != PIPELINE / "precisions.py"
             for line, names in _literals_naming_precisions(ast.parse(path.read_text()))]
    assert found == []


def test_the_precision_scan_finds_a_list():
    # the scan above can fail: a module with a list of names is caught
    assert list(_literals_naming_precisions(ast.parse('X = ("fp32", "bf16")\nY = {"int8": 1, "fp16": 2}'))) == [
        (1, ["fp32", "bf16"]), (2, ["int8", "fp16"])]


def test_no_backend_timing_or_choosing_outside_backends():
    """Timing backends and choosing one are pipeline/backends' (auto, select); analysis, bench's sweeps and the CLI
    ask it. Names that time or choose are not called elsewhere in pipeline/ (bench measures throughput of what it is
    given, and its `--precision auto` row asks backends.create)."""
    choosers = {"time_backend", "pick_precision", "expected_order", "create_fixed", "measure_candidates",
                "choose_loaded", "of_loaded"}
    found = []
    for path in sorted(PIPELINE.rglob("*.py")):
        if PIPELINE / "backends" in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
            if name in choosers:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}")
    assert found == []


def test_every_backend_constructor_takes_exactly_its_declared_options():
    """The typed options are the constructor's keywords, with the same defaults: the declaration cannot drift."""
    for cls in registry.CLASSES.values():
        desc = cls.DESCRIPTOR
        assert isinstance(desc, Descriptor) and cls.name == desc.name
        params = inspect.signature(cls.__init__).parameters
        for field in dataclasses.fields(desc.options):
            assert field.name in params, f"{desc.name}: option {field.name} is not a constructor keyword"
            assert params[field.name].kind is inspect.Parameter.KEYWORD_ONLY
            assert params[field.name].default == field.default, f"{desc.name}.{field.name}: defaults differ"
        assert set(desc.precisions) <= set(precisions.NAMES)
        assert all(r.artifact in precisions.ARTIFACTS for r in desc.runs)


def test_a_descriptor_refuses_an_unknown_artifact():
    with pytest.raises(ValueError, match="unknown artifact 'plan'"):
        Descriptor("x", "cpu", runs=(Runs("fp32", "plan"),), options=object, summary="")


def test_typed_options_are_checked_and_may_be_given_as_one_value():
    from pipeline.backends.descriptor import OrtOptions, TorchOptions

    with pytest.raises(PipelineError, match="option 'threads' of backend 'ort' takes int | None, got '2'"):
        backends.create_named("ort", "srcnn", threads="2")
    with pytest.raises(PipelineError, match="option 'tf32' of backend 'ort' takes bool, got 1"):
        backends.create_named("ort", "srcnn", tf32=1)
    b = backends.create("ort", "srcnn", options=OrtOptions(threads=1))
    assert b.threads == 1 and b.name == "ort"
    with pytest.raises(PipelineError, match="backend 'ort' takes OrtOptions, not TorchOptions"):
        backends.create("ort", "srcnn", options=TorchOptions())
    with pytest.raises(PipelineError, match="with backend 'auto' give keywords"):
        backends.create("auto", "srcnn", options=OrtOptions())


def test_create_refuses_an_option_the_backend_does_not_declare_and_passes_hooks_on():
    with pytest.raises(PipelineError, match="option 'cuda_graph' does not apply to backend 'ort'"):
        backends.create_named("ort", "srcnn", cuda_graph=True)
    lines = []
    b = backends.create_named("torch", "srcnn", "fp32", log=lines.append, device="cpu")  # torch takes no log: dropped
    assert b.name == "torch" and set(HOOKS) == {"log", "progress", "chatter"}


def test_expected_order_comes_from_the_ranks():
    ds = {d.name: d for d in backends.descriptors()}
    for precision in precisions.NAMES:
        for gpu in (False, True):
            order = backends.expected_order(precision, gpu)
            assert all(precision in ds[n].precisions for n in order)
            cpu = [n for n in order if ds[n].cpu_rank is not None and (not gpu or ds[n].gpu_rank is None)]
            assert cpu == sorted(cpu, key=lambda n: ds[n].cpu_rank)
    assert backends.expected_order("int8", False) == ("openvino",)


def _status(name: str) -> BackendStatus:
    return BackendStatus(name, True, "here")


def test_precision_bf16_with_backend_auto_picks_the_fastest_bf16_backend(monkeypatch):
    """bf16 ranks openvino before torch on a CPU (no more openvino hard-coded in quality), and torch on a GPU first."""
    statuses = [_status("torch"), _status("openvino")]
    monkeypatch.setattr(backends.auto, "measured", lambda model, precision: None)  # the expected order, not a
    monkeypatch.setattr(backends.auto, "gpu_visible", lambda: (False, "no GPU"))   # measurement of this machine
    assert backends.pick_auto("srcnn", "bf16", statuses).name == "openvino"
    monkeypatch.setattr(backends.auto, "gpu_visible", lambda: (True, "a GPU"))
    assert backends.pick_auto("srcnn", "bf16", statuses).name == "torch"


def test_precision_auto_candidates_come_from_the_descriptors():
    assert backends.candidates("auto") == [("auto", "fp32"), ("auto", "bf16"), ("auto", "int8")]
    assert backends.candidates("openvino") == [("openvino", "fp32"), ("openvino", "bf16"), ("openvino", "int8")]
    assert backends.candidates("ort-folded") == [("ort-folded", "fp32")]


def test_create_with_an_engine_refuses_precision_auto(tmp_path):
    with pytest.raises(PipelineError, match="an engine has one"):
        backends.create("auto", None, "auto", engine=tmp_path / "x.engine")


def test_backends_lists_what_each_backend_runs(capsys):
    assert main(["backends", "--model", "srcnn"]) == 0
    out = capsys.readouterr().out
    rows = {ln.split()[0]: ln for ln in out.split("\n\n")[0].splitlines()[2:] if ln.startswith("  ")}
    assert set(rows) == set(backends.NAMES)
    assert "int8 (qdq v" in rows["openvino"] and rows["ort-folded"].split()[1] == "cpu"


@pytest.mark.slow
def test_create_auto_auto_loads_what_sr_precision_auto_loads(tmp_path, capsys):
    """`backends.create("auto", "srcnn-x3", "auto")` from Python and `sr --precision auto` pick alike (the second
    reuses the first's stored pick: same file, scale and machine)."""
    loaded = backends.create("auto", "srcnn-x3", "auto", threads=1)
    assert loaded.selection_reason.startswith("precision auto: ")
    img = tmp_path / "in.png"
    assert cv2.imwrite(str(img), np.random.default_rng(0).integers(0, 256, (32, 40, 3), dtype=np.uint8))
    summary = tmp_path / "s.json"
    code = main(["sr", str(img), str(tmp_path / "out.png"), "--model", "srcnn-x3", "--precision", "auto",
                 "--threads", "1", "--quiet", "--summary", str(summary)])
    assert code == 0
    ran = json.loads(summary.read_text())
    assert ran["backend"].startswith(f"{loaded.name} ") and f"{loaded.precision}" in ran["backend"]


# -- artifact versions: a maker's code changes only with a decision about its version ------------------------------
# The modules whose output a cached artifact of that kind is (its version is part of the cached file's name or
# stamp). Their code's fingerprint (the syntax tree without docstrings: comments and wording do not count) is pinned
# here per version: a change fails this test until someone decides whether older files are still good, and either
# bumps the version in pipeline/precisions.py or re-pins the fingerprint for the same version.
MAKERS = {"qdq": ("pipeline/export/quantize.py", "pipeline/export/phases.py", "pipeline/export/rounding.py",
                  "pipeline/export/equalize.py"),
          "bf16-graph": ("pipeline/export/fp16.py",)}
# qdq 9 re-pinned without a bump: quantize.int8_cached took int8_file's cache check out as it was (same files made)
PINNED = {("qdq", 9): "1bf63c6a706eed80+19a491e042ab56cc+7439813f1dcb7558+91af5bdf784cbe66",
          ("bf16-graph", 2): "9995de6590fe4a38"}


def code_fingerprint(path: Path) -> str:
    import hashlib

    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]
    return hashlib.sha256(ast.dump(tree).encode()).hexdigest()[:16]


def test_an_artifact_makers_code_changes_only_with_a_decision_about_its_version():
    for artifact, paths in MAKERS.items():
        version = precisions.version(artifact)
        got = "+".join(code_fingerprint(ROOT / path) for path in paths)
        path = " and ".join(paths)
        assert PINNED.get((artifact, version)) == got, (
            f"{path} changed (fingerprint {got}): if what it makes changes, bump ARTIFACTS[{artifact!r}] in "
            f"pipeline/precisions.py so older cached files are made again; then pin ({artifact!r}, <version>): "
            f"{got!r} in PINNED here")


def test_the_fingerprint_ignores_wording_but_not_code(tmp_path):
    a, b, c = tmp_path / "a.py", tmp_path / "b.py", tmp_path / "c.py"
    a.write_text('def f(x):\n    """Doc."""\n    return x + 1  # one\n')
    b.write_text('def f(x):\n    """Other words."""\n\n    return x + 1  # two\n')
    c.write_text('def f(x):\n    """Doc."""\n    return x + 2\n')
    assert code_fingerprint(a) == code_fingerprint(b) != code_fingerprint(c)
