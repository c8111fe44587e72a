"""Issue 67's bench, docs-site and CLI polish: each finding as it was seen, checked on the CLI or the function that
printed it."""
from __future__ import annotations

import pytest


def _cli(capsys, *argv) -> tuple[int, str, str]:
    from pipeline.cli import main

    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def _help(capsys, stage: str) -> str:
    from pipeline.cli import main

    with pytest.raises(SystemExit):
        main([stage, "--help"])
    return " ".join(capsys.readouterr().out.split())  # argparse's wrapping undone


def test_bare_command_prints_the_usage_and_exits_2(capsys):
    code, out, err = _cli(capsys)
    assert code == 2 and err.startswith("usage:") and "STAGE" in err and not out
    code, out, _err = _cli(capsys, "--help")  # asked for, the help is no error
    assert code == 0 and "--debug" in out


def test_a_short_flag_we_do_not_take_gets_the_long_one_it_meant(tmp_path, capsys):
    code, _out, err = _cli(capsys, "sr", tmp_path / "in", tmp_path / "out", "-q")
    assert code == 2 and err.strip().startswith("error: unrecognized arguments: -q (did you mean --quiet?)"), err
    code, _out, err = _cli(capsys, "sr", tmp_path / "in", tmp_path / "out", "-quiet")
    assert code == 2 and "(did you mean --quiet?)" in err
    code, _out, err = _cli(capsys, "sr", tmp_path / "in", tmp_path / "out", "-z")  # no long flag starts with z
    assert code == 2 and "did you mean" not in err


def test_help_says_the_defaults_and_debug(capsys):
    from models.spec import DEFAULT_MODEL, MODELS
    from pipeline.sr import TILE_MEMORY, TILE_MEMORY_ENV

    sr = _help(capsys, "sr")
    assert "from free memory" not in sr  # the budget the docs describe, from the constant the run uses
    assert f"fit a {TILE_MEMORY / 2**30:g} GiB budget ({TILE_MEMORY_ENV})" in sr
    assert f"(default: the model's own, x{MODELS[DEFAULT_MODEL].default_scale:g} for {DEFAULT_MODEL})" in sr
    assert "centre-cropped to at most this side (default: 384)" in _help(capsys, "demo")
    for stage in ("sr", "demo", "doctor", "bench"):
        assert "--debug print the traceback" in _help(capsys, stage), stage
