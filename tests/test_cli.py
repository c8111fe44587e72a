"""The CLI dispatcher and the shared option groups: every bad argument is one line and exit 2, checked
before any work, and each option has one default across commands."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from models.spec import MODELS
from pipeline import backends
from pipeline.artifacts.cache import cache_dir
from pipeline.cli import STAGES, main, options
from pipeline.errors import PipelineError

REPO = Path(__file__).resolve().parents[1]


def _one_line_error(capsys, rc) -> str:
    cap = capsys.readouterr()
    lines = cap.err.strip().splitlines()
    assert rc == 2, cap
    assert len(lines) == 1 and lines[0].startswith("error: "), cap.err
    return lines[0]


# -- dispatcher ----------------------------------------------------------------------------------------
@pytest.fixture()
def failing_stage(tmp_path, monkeypatch):
    """A stage module whose run() raises what a bug would (the dispatcher is what is under test)."""
    (tmp_path / "failing_stage_mod.py").write_text(textwrap.dedent('''
        from pipeline.errors import PipelineError

        def add_arguments(p):
            p.add_argument("--kind", default="bug")

        def run(args):
            if args.kind == "bug":
                raise ValueError("no such thing\\nsecond line of detail")
            raise PipelineError("a user-facing problem")
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(STAGES, "failing", ("failing_stage_mod", "a stage that fails"))
    return "failing"


def test_unexpected_exception_is_one_line_with_type(failing_stage, capsys):
    line = _one_line_error(capsys, main([failing_stage]))
    assert line == "error: ValueError: no such thing (run with --debug for the traceback)"


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_prints_the_traceback(failing_stage, capsys, where):
    argv = ["--debug", failing_stage] if where == "before" else [failing_stage, "--debug"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "second line of detail" in err
    assert err.strip().splitlines()[-1] == "error: ValueError: no such thing"


def test_pipeline_error_stays_a_plain_line(failing_stage, capsys):
    assert _one_line_error(capsys, main([failing_stage, "--kind", "user"])) == "error: a user-facing problem"


@pytest.mark.parametrize("argv", [["no-such-stage"], ["bench", "--iters", "many"], ["compare", "--precisions", "fp8"],
                                  ["backends", "--unknown-flag"]])
def test_argparse_errors_are_one_line(capsys, argv):
    line = _one_line_error(capsys, main(argv))
    assert "--help" in line


def test_python_m_pipeline_exit_code_and_no_traceback():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run([sys.executable, "-m", "pipeline", "compare", "--model", "nope"], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip() == (f"error: unknown model 'nope' (known: {', '.join(MODELS)}, or a checkpoint "
                                "path, or package.module:factory)")


# -- one default per option ----------------------------------------------------------------------------
@pytest.mark.parametrize("stage", ["compare", "bench", "backends", "eval", "export", "triton", "sr", "demo", "doctor",
                                   "models"])
def test_model_is_none_unless_given_everywhere(stage):
    """One convention (cli/options.py): --model is None when not given, so a file's model is never overridden by a
    default; without a file the model is DEFAULT_MODEL."""
    import importlib

    p = argparse.ArgumentParser()
    importlib.import_module(STAGES[stage][0]).add_arguments(p)
    args = p.parse_args(["in", "out"] if stage == "sr" else ["--output", "x"] if stage == "triton" else [])
    assert args.model is None
    if stage not in ("demo", "doctor", "models"):  # their own defaults: the demo model, all, the listing
        assert options.model_from_args(args) == options.DEFAULT_MODEL == "srcnn"


def test_help_speaks_only_of_what_the_command_has(capsys):
    """`export`/`eval` have no --onnx, so their --model help must not offer one; `sr`'s summary says it does video."""
    for stage in ("export", "eval"):
        with pytest.raises(SystemExit):
            main([stage, "--help"])
        assert "--onnx" not in capsys.readouterr().out
    main(["--help"])
    (sr_line,) = [ln for ln in capsys.readouterr().out.splitlines() if ln.split()[:1] == ["sr"]]
    assert "images and videos" in sr_line


def test_model_all_only_where_allowed():
    assert options.models_from_args(argparse.Namespace(model="all"), allow_all=True) == \
        ["srcnn", "srcnn-x3", "deform-srcnn"]
    with pytest.raises(PipelineError, match="unknown model 'all' .*known: srcnn"):
        options.models_from_args(argparse.Namespace(model="all"))


# -- checks before any work ----------------------------------------------------------------------------
@pytest.mark.parametrize("stage", ["compare", "bench"])
def test_output_naming_an_existing_file_is_refused_before_work(tmp_path, capsys, stage):
    existing = tmp_path / "report.txt"
    existing.write_text("keep me")
    extra = ["--quick"] if stage == "bench" else ["--size", "16"]
    line = _one_line_error(capsys, main([stage, "--model", "srcnn-x3", "--output", str(existing), *extra]))
    assert str(existing) in line and "is a file" in line
    assert existing.read_text() == "keep me"  # nothing lost


def test_output_inside_a_file_is_refused(tmp_path, capsys):
    f = tmp_path / "f"
    f.write_text("x")
    line = _one_line_error(capsys, main(["compare", "--output", str(f / "sub"), "--size", "16"]))
    assert "inside" in line and str(f) in line


def test_eval_json_naming_a_folder_is_refused_before_work(tmp_path, capsys):
    line = _one_line_error(capsys, main(["eval", "--model", "srcnn-x3", "--scales", "3", "--images", "chelsea",
                                         "--json", str(tmp_path)]))
    assert "--json" in line and "is a folder" in line
    assert "PSNR" not in capsys.readouterr().out  # refused before evaluating


@pytest.mark.parametrize("stage", ["compare", "bench"])
def test_unknown_backend_names_the_valid_ones(capsys, stage):
    line = _one_line_error(capsys, main([stage, "--model", "srcnn-x3", "--backends", "ort", "nope"]))
    assert "unknown backend 'nope'" in line and all(n in line for n in backends.NAMES)


@pytest.mark.parametrize("stage", ["compare", "bench"])
def test_asking_for_nothing_that_can_run_is_an_error(capsys, stage):
    (trt,) = [s for s in backends.available("srcnn-x3") if s.name == "trt"]
    if trt.available:
        pytest.skip("TensorRT runs here")
    line = _one_line_error(capsys, main([stage, "--model", "srcnn-x3", "--backends", "trt"]))
    assert "none of --backends trt can run here" in line and trt.reason in line


@pytest.mark.parametrize("argv,expected", [
    (["--scales", "99"], "error: --scales: scale 99 is out of range for model 'srcnn' (allowed: (1, 8])"),
    (["--model", "all", "--scales", "2.5", "9"], "scale 9 is out of range for model 'srcnn'"),
    (["--model", "srcnn-x3", "--scales", "2"], "'srcnn-x3' has a fixed scale, so there is no scale sweep"),
])
def test_bench_scales_it_cannot_use_are_refused_before_work(tmp_path, capsys, argv, expected):
    """Not dropped without a word (a 30 s run with no scale sweep in its report): one line, exit 2, no report."""
    out = tmp_path / "bench"
    line = _one_line_error(capsys, main(["bench", "--quick", "--output", str(out), *argv]))
    assert expected in line and not out.exists()


def test_single_backend_option():
    p = argparse.ArgumentParser()
    options.add_backend_args(p)
    assert options.backend_from_args(p.parse_args([])) == "auto"
    assert options.backend_from_args(p.parse_args(["--backend", "ort-folded"])) == "ort-folded"
    with pytest.raises(PipelineError, match="unknown backend 'ort-foldd' .*choose from: auto, torch"):
        options.backend_from_args(p.parse_args(["--backend", "ort-foldd"]))


def test_missing_weights_is_one_line(tmp_path, capsys):
    line = _one_line_error(capsys, main(["compare", "--weights", str(tmp_path / "none.pt")]))
    assert line == f"error: weights file not found: {tmp_path / 'none.pt'}"


def test_output_file_checks(tmp_path):
    assert options.check_output_file(tmp_path / "new" / "a.json", "--json") == tmp_path / "new" / "a.json"
    (tmp_path / "file").write_text("")
    with pytest.raises(PipelineError, match="a.json: its folder is a file"):
        options.check_output_file(tmp_path / "file" / "a.json", "--json")


def test_tests_never_use_the_users_cache(session_cache):
    assert cache_dir() == session_cache
    assert Path.home() / ".cache" / "srdeploy" not in (cache_dir(), *cache_dir().parents)
