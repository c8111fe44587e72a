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


def test_a_negative_kept_share_reads_as_a_loss():
    """Issue 67: "keeps 55 % of the model's PSNR-Y gain over bicubic and -71 % of its SSIM-Y gain"."""
    from pipeline.quality import kept_text

    text = kept_text({"psnr_y": 0.55, "ssim_y": -0.71})
    assert "-71" not in text and "keeps 55 % of the model's PSNR-Y gain over bicubic" in text
    assert "loses more than its whole SSIM-Y gain (71 % of it below bicubic)" in text
    assert kept_text({"psnr_y": 0.97, "ssim_y": 0.93}) == ("keeps 97 % of the model's PSNR-Y gain over bicubic and "
                                                           "93 % of its SSIM-Y gain")
    assert kept_text({"psnr_y": -0.2, "ssim_y": 0.5}).startswith("loses more than the model's whole PSNR-Y gain (20 %")


def test_the_auto_reason_is_short_lines():
    """Issue 67: `--precision auto`'s reason was one ~900-character line. Now a short first line (the pick), then
    one indented line per fact, wrapped."""
    from pipeline.backends import select

    note = ("int8 not used: int8 loses 0.239 dB Y-PSNR (SSIM 0.0202) against fp32 on the 4 held-out images, keeps 55 % "
            "of the model's PSNR-Y gain over bicubic and loses more than its whole SSIM-Y gain, fidelity to fp32 43.5 "
            "dB (worst image 38.4, floor 38), OVER its 0.1 dB budget and BELOW 90 % of the model's gain")
    pick = {"backend": "ort-folded", "precision": "fp32", "ms": 1936.0, "size": 256, "fp32_ms": 1936.0,
            "times": "ort-folded fp32 1936 ms", "notes": ["auto bf16: no backend can run srcnn (bf16)", note]}
    lines = select._why(pick, "").splitlines()
    assert lines[0] == "precision auto: ort-folded fp32 is the fastest within budget here (1936 ms at 256x256)"
    assert lines[1] == "  timed: ort-folded fp32 1936 ms" and len(lines) >= 5
    assert all(len(ln) <= select.WIDTH for ln in lines) and all(ln.startswith("  ") for ln in lines[1:])
    assert " ".join(ln.strip() for ln in lines).count(note) == 1  # wrapped, not cut
