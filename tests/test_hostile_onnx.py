"""Hostile ONNX files, sidecars and names (issue 24, issue 23 "Hostile files"): paths a file hands us never lead
outside its folder, and every command that takes --onnx refuses a bad file with one line, exit 2, nothing written.
Each test makes its own hostile files next to canary folders and checks nothing outside was written."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from pipeline.cli import main
from pipeline.export.cached import onnx_for

# (command line before --onnx, whether it needs an output folder flag)
ONNX_COMMANDS = {
    "backends": ["backends"],
    "compare": ["compare", "--output", "{out}"],
    "bench": ["bench", "--output", "{out}"],
    "triton": ["triton", "--backend", "ort", "--output", "{out}"],
    "engine": ["engine", "--output", "{out}/x.engine"],
    "sr": ["sr", "{img}", "{out}"],
}


def _snapshot(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(folder.rglob("*"))}


@pytest.fixture(scope="module")
def exported() -> Path:
    """The session cache's SRCNN export (folded variants and reference beside it)."""
    return onnx_for("srcnn")


@pytest.fixture
def place(tmp_path, exported):
    """A copy of the export with its siblings in tmp/model/, an outside folder with canaries, an input image."""
    model_dir, outside = tmp_path / "model", tmp_path / "outside"
    model_dir.mkdir()
    outside.mkdir()
    for f in exported.parent.glob(exported.stem + "*"):
        shutil.copy(f, model_dir / f.name)
    shutil.copy(exported, outside / "evil.onnx")  # a runnable model outside the folder
    (outside / "canary.txt").write_text("canary")
    img = tmp_path / "in.png"
    import cv2

    cv2.imwrite(str(img), np.full((12, 10, 3), 128, np.uint8))
    return {"onnx": model_dir / exported.name, "dir": model_dir, "outside": outside, "img": img,
            "out": tmp_path / "out", "tmp": tmp_path}


def _rewrite(path: Path, meta: dict | None = None, edit=None) -> Path:
    model = onnx.load(str(path), load_external_data=False)
    if meta:
        props = {p.key: p.value for p in model.metadata_props}
        props.update(meta)
        del model.metadata_props[:]
        for k, v in props.items():
            model.metadata_props.add(key=k, value=v)
    if edit:
        edit(model)
    onnx.save(model, str(path))
    return path


def _cli(capsys, argv: list[str]) -> tuple[int, str]:
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err.strip()
    return code, err


def _command(name: str, place: dict) -> list[str]:
    return [a.format(out=place["out"], img=place["img"]) for a in ONNX_COMMANDS[name]] + ["--onnx", place["onnx"]]


def _refused(capsys, place, name, *words) -> str:
    before = _snapshot(place["outside"])
    code, err = _cli(capsys, _command(name, place))
    assert code == 2, err
    assert err.startswith("error: ") and "\n" not in err, err
    for w in words:
        assert w in err, err
    assert not place["out"].exists() or not any(place["out"].rglob("*")), "something was written"
    assert _snapshot(place["outside"]) == before
    return err


# -- sibling files named in the metadata ------------------------------------------------------------------
@pytest.mark.parametrize("target", ["abs", "dotdot", "passwd"])
@pytest.mark.parametrize("command", ["sr", "backends", "compare"])
def test_folded_variant_outside_the_folder_is_refused(capsys, place, target, command):
    name = {"abs": str(place["outside"] / "evil.onnx"), "dotdot": "../outside/evil.onnx", "passwd": "/etc/passwd"}
    _rewrite(place["onnx"], {"folded_variants": f"3:{name[target]}"})
    _refused(capsys, place, command, "folded variant", "plain file name")


def test_backends_does_not_reveal_which_outside_paths_exist(capsys, place):
    errs = []
    for target in ("/etc/passwd", "/etc/no-such-file-here"):
        _rewrite(place["onnx"], {"folded_variants": f"3:{target}"})
        errs.append(_refused(capsys, place, "backends").replace(target, "T"))
    assert errs[0] == errs[1]


def test_folded_variant_fifo_in_the_folder_is_refused_without_hanging(capsys, place):
    os.mkfifo(place["dir"] / "pipe.onnx")
    _rewrite(place["onnx"], {"folded_variants": "3:pipe.onnx"})
    _refused(capsys, place, "sr", "not a regular file")


def test_folded_variant_link_leading_outside_is_refused(capsys, place):
    (place["dir"] / "link.onnx").symlink_to(place["outside"] / "evil.onnx")
    _rewrite(place["onnx"], {"folded_variants": "3:link.onnx"})
    _refused(capsys, place, "sr", "outside")


def test_folded_variants_that_do_not_parse_are_one_line(capsys, place):
    _rewrite(place["onnx"], {"folded_variants": "x:foo.onnx"})
    _refused(capsys, place, "backends", "folded_variants", "'x:foo.onnx'")


@pytest.mark.parametrize("command", ["compare", "sr"])
def test_reference_outside_the_folder_is_refused(capsys, place, command):
    shutil.copy(next(place["dir"].glob("*.reference.npz")), place["outside"] / "ref.npz")
    _rewrite(place["onnx"], {"reference": "../outside/ref.npz"})
    _refused(capsys, place, command, "reference outputs", "plain file name")


# -- external data ----------------------------------------------------------------------------------------
def _externalise(place: dict, location: str, data: bytes | None = None) -> None:
    """Move the largest initializer's bytes to external data at `location` (written when `data` is given)."""
    def edit(model):
        t = max(model.graph.initializer, key=lambda t: len(t.raw_data or b""))
        raw = numpy_helper.to_array(t).tobytes()
        if data is not None:
            (place["dir"] / location).write_bytes(raw)
        t.ClearField("raw_data")
        t.data_location = onnx.TensorProto.EXTERNAL
        del t.external_data[:]
        for k, v in (("location", location), ("offset", "0"), ("length", str(len(raw)))):
            t.external_data.add(key=k, value=v)
    _rewrite(place["onnx"], edit=edit)


@pytest.mark.parametrize("command", list(ONNX_COMMANDS))
@pytest.mark.parametrize("location", ["../../../../etc/passwd", "/etc/passwd"])
def test_external_data_outside_the_folder_is_refused_by_every_command(capsys, place, command, location):
    _externalise(place, location)
    _refused(capsys, place, command, "external data", "passwd")


def test_external_data_that_is_a_fifo_is_refused(capsys, place):
    os.mkfifo(place["dir"] / "weights.bin")
    _externalise(place, "weights.bin")
    _refused(capsys, place, "backends", "not a regular file")


def test_valid_external_data_is_accepted(capsys, place):
    _externalise(place, "weights.bin", data=b"")
    code, err = _cli(capsys, _command("backends", place))
    assert code == 0, err


# -- the file itself --------------------------------------------------------------------------------------
def test_empty_onnx_says_it_is_empty(capsys, place):
    place["onnx"].write_bytes(b"")
    for command in ONNX_COMMANDS:
        _refused(capsys, place, command, "is empty")


def test_onnx_that_is_a_fifo_does_not_hang(capsys, place):
    place["onnx"].unlink()
    os.mkfifo(place["onnx"])
    _refused(capsys, place, "sr", "not a regular file")


def test_huge_fixed_input_dimension_is_refused_up_front(capsys, place):
    def edit(model):
        model.graph.input[0].type.tensor_type.shape.dim[2].dim_value = 2**62
    _rewrite(place["onnx"], edit=edit)
    _refused(capsys, place, "sr", str(2**62))


def test_metadata_naming_another_registered_model_is_not_trusted(capsys, place):
    """srcnn weights (dynamic scale) whose metadata says srcnn-x3 (a fixed x3 model): the hash and the scale
    contract both disagree with srcnn-x3, so the registered spec is not applied to the file."""
    _rewrite(place["onnx"], {"model": "srcnn-x3"})
    _refused(capsys, place, "sr", "srcnn-x3", "weights")


def test_own_weights_under_a_registered_name_still_run(capsys, place):
    """A user's own weights exported as srcnn: another hash, same scale contract: accepted."""
    _rewrite(place["onnx"], {"weights_sha256": "0" * 64})
    code, err = _cli(capsys, _command("backends", place))
    assert code == 0, err


# -- names -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["../escape", "/tmp/abs", ".", "..", "a/b", ""])
def test_triton_name_must_be_one_plain_component(capsys, place, name):
    before = _snapshot(place["tmp"])
    code, err = _cli(capsys, ["triton", "--backend", "ort", "--output", place["out"], "--onnx", place["onnx"],
                              "--name", name])
    assert code == 2 and "--name" in err and "\n" not in err, err
    assert _snapshot(place["tmp"]) == before


def test_model_name_from_metadata_never_becomes_a_path(capsys, place, monkeypatch):
    cache = place["tmp"] / "cache"
    monkeypatch.setenv("SRDEPLOY_CACHE", str(cache))
    evil = f"../../../../{place['outside'].relative_to('/')}/evil"
    _rewrite(place["onnx"], {"model": evil})
    before = _snapshot(place["outside"])
    code, err = _cli(capsys, ["backends", "--onnx", place["onnx"], "--measure", "--size", "16", "--repeats", "1"])
    assert code == 0, err
    assert _snapshot(place["outside"]) == before
    written = [p for p in cache.rglob("*") if p.is_file()]
    assert written and all(cache in p.resolve().parents for p in written)
    assert all(".." not in p.relative_to(cache).parts for p in written)


# -- engine sidecars --------------------------------------------------------------------------------------
def _sidecar_engine(tmp: Path, sidecar) -> Path:
    engine = tmp / "m.engine"
    engine.write_bytes(b"opaque plan")
    Path(str(engine) + ".json").write_text(sidecar if isinstance(sidecar, str) else json.dumps(sidecar))
    return engine


@pytest.mark.parametrize("sidecar, words", [
    ([1, 2], "a JSON object"),
    ("\"text\"", "a JSON object"),
    ({"sidecar_version": 1, "model": "srcnn", "onnx_metadata": [1]}, "onnx_metadata"),
    ({"sidecar_version": 1, "model": ["srcnn"]}, "'model' field"),
    ("{not json", "not valid JSON"),
    (None, "missing"),
])
@pytest.mark.parametrize("command", ["sr", "triton"])
def test_malformed_sidecar_is_one_line_naming_it(capsys, place, sidecar, words, command):
    engine = _sidecar_engine(place["tmp"], sidecar if sidecar is not None else "")
    if sidecar is None:
        Path(str(engine) + ".json").unlink()
    argv = (["sr", place["img"], place["out"], "--engine", engine] if command == "sr" else
            ["triton", "--output", place["out"], "--engine", engine, "--plugin-lib", place["img"]])
    code, err = _cli(capsys, argv)
    assert code == 2 and "\n" not in err, err
    assert "m.engine.json" in err and words in err, err
    assert not place["out"].exists() or not any(place["out"].rglob("*"))


@pytest.mark.parametrize("where", ["/etc/passwd", "../outside/junk.onnx", "{outside}/junk.onnx"])
def test_sidecar_onnx_field_outside_the_engine_folder_is_not_opened(capsys, place, where):
    """An engine whose sidecar names an ONNX file outside its folder: the repository is written from the sidecar
    alone (junk there would be a parse error if it were opened)."""
    from pipeline.engine import Profile, current_environment  # noqa: F401  (the sidecar layout)
    from pipeline.engine.sidecar import make_sidecar

    (place["outside"] / "junk.onnx").write_bytes(b"not an onnx file")
    plugin = place["tmp"] / "libsr_trt_plugins.so"
    plugin.write_bytes(b"stand-in plugin")
    env = {"tensorrt": "11", "gpu": "G", "compute_capability": "9.0", "plugin_sha256":
           hashlib.sha256(plugin.read_bytes()).hexdigest()}
    profiles = [Profile(batch=(1, 1, 2), height=(8, 64, 128), width=(8, 64, 128), scale=(2.0, 3.0, 4.0))]
    sidecar = make_sidecar(env, onnx_file=Path(where.format(outside=place["outside"])), onnx_sha256="0" * 64,
                           model="srcnn", precision="fp32", ops="custom", profiles=profiles,
                           io={"inputs": ["input", "size"], "has_size_input": True})
    engine = _sidecar_engine(place["dir"], sidecar)
    code, err = _cli(capsys, ["triton", "--output", place["out"], "--engine", engine, "--plugin-lib", plugin])
    assert code == 0, err
    assert (place["out"] / "srcnn" / "1" / "model.plan").read_bytes() == engine.read_bytes()


def test_sidecar_onnx_field_in_the_engine_folder_must_be_a_regular_file(place):
    from pipeline.engine.sidecar import sidecar_onnx
    from pipeline.errors import PipelineError

    os.mkfifo(place["dir"] / "fifo.onnx")
    engine = _sidecar_engine(place["dir"], {"onnx": "fifo.onnx"})
    with pytest.raises(PipelineError, match="not a regular file"):
        sidecar_onnx(engine, {"onnx": "fifo.onnx"})
    assert sidecar_onnx(engine, {"onnx": str(place["onnx"])}) == place["onnx"]


# -- ONNX Runtime's own log lines -------------------------------------------------------------------------
def test_ort_load_failure_is_our_line_alone(capfd, place):
    """External data shorter than it claims passes ONNX's loader but fails ORT's initialisation, which logs a
    colour line on stderr before raising; only our one-line error may reach the user."""
    from pipeline.backends.ort_backend import OrtCpuBackend
    from pipeline.errors import PipelineError

    _externalise(place, "weights.bin", data=b"")
    (place["dir"] / "weights.bin").write_bytes(b"short")
    b = OrtCpuBackend(None, onnx=place["onnx"])  # the backend alone: the up-front file check would refuse it
    with pytest.raises(PipelineError, match="cannot load"):
        b.load()
    assert "onnxruntime" not in capfd.readouterr().err


def test_triton_ort_refuses_unknown_domain_op(capsys, place):
    def edit(model):
        model.graph.node.append(onnx.helper.make_node("Nope", ["input"], ["junk"], domain="evil.ops"))
        model.opset_import.append(onnx.helper.make_opsetid("evil.ops", 1))
    _rewrite(place["onnx"], edit=edit)
    _refused(capsys, place, "triton", "evil.ops")


def test_triton_ort_copies_external_data(capsys, place):
    import onnxruntime as ort

    _externalise(place, "weights.bin", data=b"")
    code, err = _cli(capsys, _command("triton", place))
    assert code == 0, err
    # The plain ORT model (the repository also holds the Python-backend `sr` model, which runs this one's file).
    (version,) = [p / "1" for p in place["out"].iterdir() if (p / "1" / "model.onnx").is_file()]
    assert (version / "weights.bin").read_bytes() == (place["dir"] / "weights.bin").read_bytes()
    ort.InferenceSession(str(version / "model.onnx"), providers=["CPUExecutionProvider"])  # loads as Triton would


def test_triton_copies_what_it_checked_even_if_a_link_is_swapped_in(capsys, place, monkeypatch):
    """The race of issue 27: external data checked, then swapped for a link to a file outside the folder before the
    copy (here, deterministically, right after the last check). The copy opens without following links: one line,
    exit 2, the outside file never reaches the repository."""
    from pipeline.serve import triton_repo

    _externalise(place, "weights.bin", data=b"")
    checked = triton_repo._check_ort_loads

    def check_then_swap(onnx_file):
        checked(onnx_file)
        (place["dir"] / "weights.bin").unlink()
        (place["dir"] / "weights.bin").symlink_to(place["outside"] / "canary.txt")

    monkeypatch.setattr(triton_repo, "_check_ort_loads", check_then_swap)
    code, err = _cli(capsys, _command("triton", place))
    assert code == 2, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: ") and "weights.bin" in last and "link" in last, err
    assert not [p for p in place["out"].rglob("*") if p.is_file() and p.read_bytes() == b"canary"]


def test_open_inside_never_follows_a_link_even_one_leading_inside(tmp_path):
    """The open itself refuses links (O_NOFOLLOW on every component), so a swap after any name check is caught."""
    from pipeline.artifacts.confine import open_inside
    from pipeline.errors import PipelineError

    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "data.bin").write_bytes(b"data")
    (tmp_path / "link.bin").symlink_to(tmp_path / "sub" / "data.bin")
    (tmp_path / "linkdir").symlink_to(tmp_path / "sub")
    with os.fdopen(open_inside(tmp_path, "sub/data.bin"), "rb") as f:
        assert f.read() == b"data"
    for rel in ("link.bin", "linkdir/data.bin"):
        with pytest.raises(PipelineError, match="without following a link"):
            open_inside(tmp_path, rel)


def test_sr_on_ray_runs_the_same_onnx_check_before_any_cluster(place):
    """The Ray run plans as the local one does (pipeline.sr.flow.plan): the file is refused before Ray starts."""
    from pipeline.cluster.runner import RayExecutor
    from pipeline.errors import PipelineError
    from pipeline.sr import RunOptions
    from pipeline.sr.flow import plan

    _externalise(place, "/etc/passwd")
    opts = RunOptions(place["img"], place["out"], onnx=place["onnx"])
    executor = RayExecutor(opts, "local", None)
    with pytest.raises(PipelineError, match="external data .*absolute"):
        plan(opts, executor)
    assert executor.cluster is None  # nothing was started
