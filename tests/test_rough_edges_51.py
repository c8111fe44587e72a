"""Issue 51: tests that pass on every CPU, a demo that fits a laptop, and the rough edges a new user hit."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(sys.version_info < (3, 11), reason="python -P (no current folder on sys.path) needs 3.11")
def test_plain_pytest_collects_the_files_that_import_test_helpers():
    """`pytest` (not `python -m pytest`) puts no repository root on sys.path: files importing `tests.*` failed to
    collect with "No module named 'tests'". -P keeps `python -m` from adding the current folder, as the `pytest`
    script does not add it."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, "-P", "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                        "tests/test_sr_wording.py", "tests/test_hostile_video.py"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "error" not in r.stdout.lower() and " collected" in r.stdout


def test_the_video_bench_cuts_frames_into_the_tiles_sr_would(monkeypatch):
    """The quick bench's 720p -> 4K row ran whole frames (9 GB peak); it now times the tiles the tile memory budget
    gives `sr`, for the clip run and for inference alone."""
    from pipeline import backends
    from pipeline.bench.video import video_fps
    from pipeline.images import tiling

    monkeypatch.setenv(tiling.TILE_MEMORY_ENV, "16M")  # a 96x64 frame at x3 is 288x192: 35 MB whole on srcnn
    be = backends.create("ort", "srcnn", "fp32", threads=1)
    (row,) = video_fps("srcnn", 2, backend=be, log=lambda _m: None, sizes={"small": (96, 64)})
    assert row["tiles"] > 1 and row["fps"] > 0 and row["inference_fps"] > 0 and row["output"] == [288, 192]


def test_auto_on_a_file_suggests_timing_that_file(tmp_path):
    """`sr --onnx F` said `backends --model srcnn ... --measure`, which a torch-free install cannot run ("no backend
    can run this model here"); the file's own command works everywhere."""
    from pipeline.artifacts.onnx_file import check_onnx_file
    from pipeline.backends import pick_auto
    from pipeline.export.cached import onnx_for

    onnx = check_onnx_file(onnx_for("srcnn"))
    reason = pick_auto(None, "fp32", onnx=onnx).reason
    assert f"`python -m pipeline backends --onnx {onnx} --measure` times them here" in reason, reason
    assert "--model" not in reason
    assert "`python -m pipeline backends --model srcnn --measure`" in pick_auto("srcnn", "fp32").reason


def _cli(capsys, *argv) -> tuple[int, str, str]:
    from pipeline.cli import main

    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_file_whose_image_input_has_another_name_is_refused_once(tmp_path, capsys):
    """`ort` refused it in one line, `openvino` (auto's pick) failed every image with a RuntimeError and `compare`
    printed `error: RuntimeError: ...`: the one --onnx check refuses it, for every command, before any work."""
    import cv2
    import numpy as np
    import onnx

    from pipeline.export.cached import onnx_for

    model = onnx.load(str(onnx_for("srcnn")))
    for inp in model.graph.input:
        if inp.name == "input":
            inp.name = "image"
    for node in model.graph.node:
        node.input[:] = ["image" if n == "input" else n for n in node.input]
    path = tmp_path / "renamed.onnx"
    onnx.save(model, str(path))
    cv2.imwrite(str(tmp_path / "a.png"), np.full((8, 8, 3), 99, np.uint8))
    for argv in (["sr", tmp_path / "a.png", tmp_path / "b.png", "--backend", "openvino"], ["sr", tmp_path / "a.png",
                 tmp_path / "b.png"], ["compare", "--output", tmp_path / "cmp"], ["backends"]):
        code, _out, err = _cli(capsys, *argv, "--onnx", path)
        err = err.rstrip("\n")
        assert code == 2 and "\n" not in err, (argv, err)
        assert err == (f"error: {path}: has no image input named 'input' (its inputs: 'image', 'size'); the pipeline "
                       "feeds the NCHW float RGB image as 'input', as `python -m pipeline export` names it"), err
    assert not (tmp_path / "b.png").exists() and not (tmp_path / "cmp").exists()


@pytest.mark.parametrize("opts,said", [
    ({"onnx": 123}, "option 'onnx' of backend 'ort' takes a file path (str or os.PathLike) or None, got 123"),
    ({"onnx": b"x.onnx"}, "option 'onnx' of backend 'ort' takes a file path (str or os.PathLike) or None"),
    ({"onnx": "{fifo}"}, "ONNX file {fifo} is not a regular file (a FIFO, socket or device)"),
    ({"onnx": "{tmp}"}, "ONNX file {tmp} is a folder"),
    ({"onnx": "/dev/zero"}, "ONNX file /dev/zero is not a regular file (a FIFO, socket or device)"),
    ({"threads": -1}, "option 'threads' of backend 'ort' must be from 1 to 4096, got -1"),
    ({"threads": 99999999999}, "option 'threads' of backend 'ort' must be from 1 to 4096, got 99999999999"),
    ({"scale": "3"}, "scale must be a number above 0, got '3'"),
    ({"profile": "x"}, "option 'profile' of backend 'ort' takes a dict or None, got 'x'"),
    ({"options": "ort-threads-1", "threads": 2},
     "option 'threads' given twice, as threads=2 and in options= as 1: give it once"),
])
def test_create_refuses_what_the_cli_refuses(tmp_path, opts, said):
    """The Python API took these (or raised a raw TypeError, or called a FIFO "not found")."""
    from pipeline.backends import create
    from pipeline.backends.descriptor import OrtOptions
    from pipeline.errors import PipelineError

    fifo = tmp_path / "f.onnx"
    os.mkfifo(fifo)
    opts = {k: (v.format(fifo=fifo, tmp=tmp_path) if isinstance(v, str) and "{" in v else v) for k, v in opts.items()}
    if opts.get("options") == "ort-threads-1":
        opts["options"] = OrtOptions(threads=1)
    with pytest.raises(PipelineError) as e:
        create("ort", "srcnn", **opts)
    assert str(e.value).startswith(said.format(fifo=fifo, tmp=tmp_path)), str(e.value)


def test_options_and_keywords_that_agree_are_one_option():
    from pipeline.backends import create
    from pipeline.backends.descriptor import OrtOptions

    assert create("ort", "srcnn", options=OrtOptions(threads=1), threads=1).describe()


def test_threads_beyond_any_machine_name_the_flag(tmp_path, capsys):
    code, _out, err = _cli(capsys, "sr", tmp_path / "in.png", tmp_path / "out.png", "--threads", "99999999999")
    assert code == 2 and err.strip() == "error: --threads must be an integer from 1 to 4096, got 99999999999"


def test_report_pages_escape_control_characters_like_report_md(tmp_path):
    """report.html carried raw ESC and BEL bytes from metadata and file names; report.md and the terminal escape
    them."""
    from pipeline.htmlreport import Code, Heading, Table, items, para, write_report

    evil = "model\x1b[31m\x07name"
    blocks = [Heading(f"Report on {evil}", 1), para("made from ", Code(evil), " here"), items(evil),
              Table(("model", "value"), ((evil, "1"),))]
    md, html = write_report(tmp_path / "report.md", blocks)
    for path in (md, html):
        data = Path(path).read_bytes()
        assert b"\x1b" not in data and b"\x07" not in data, path
        assert b"model\\x1b[31m\\x07name" in data, path


def test_pages_show_our_commands_as_code_link_sub_reports_and_wrap_long_cells(tmp_path):
    from pipeline.htmlreport import Link, Table, items, para, said, write_report

    reason = "ort is expected fastest (`python -m pipeline backends --model srcnn --measure` times them here)"
    long_fix = "`make plugins` with TensorRT headers available: TENSORRT_ROOT=/a/very/long/path/to/include/NvInfer.h"
    md, html = write_report(tmp_path / "report.md", [
        items(("srcnn: ", *said(reason))), para("The whole report: ", Link("compare/report.md", "compare/report.md")),
        Table(("check", "fix"), (("plugin library", long_fix), ("short", "ok")))])
    page, text = Path(html).read_text(), Path(md).read_text()
    assert "<code>python -m pipeline backends --model srcnn --measure</code> times them here" in page
    assert "`python -m pipeline backends --model srcnn --measure` times them here" in text  # the same for report.md
    assert '<a href="compare/report.md">compare/report.md</a>' in page
    assert "[compare/report.md](compare/report.md)" in text
    assert page.count('<td class="wrap">') == 1  # the long fix wraps in its column; short cells stay on one line
    assert said("a `b") == ("a `b",)  # no pair of backticks: text as it is
    for bad in ("../up.md", "/etc/passwd", "http://x/y", "a//b", "a/./b", ""):
        with pytest.raises(ValueError):
            Link("x", bad)


def test_a_table_column_writes_its_numbers_one_way():
    """`0.0101`, `6.900e-03`, `0.1649` in one column; times `0.2001`, `0.841`, `0.0514` (issue 51)."""
    from pipeline.report import table

    t = table(["err", "s", "ms", "n"], [[0.0101, 0.2001, 5747.3, 3], [6.9e-3, 0.841, 28.1, 4],
                                        [0.1649, 0.0514, None, 5], [0.0, float("inf"), 12.0, 6]])
    assert [r[0] for r in t.rows] == ["1.010e-02", "6.900e-03", "1.649e-01", "0"]
    assert [r[1] for r in t.rows] == ["0.2001", "0.8410", "0.0514", "inf"]
    assert [r[2] for r in t.rows] == ["5747.3", "28.1", "-", "12.0"] and [r[3] for r in t.rows] == ["3", "4", "5", "6"]


def test_plain_eval_of_a_fixed_scale_model_says_nothing_about_other_scales(capsys):
    """`eval --model srcnn-x3` printed "x2 not evaluated ..." lines its help already explains."""
    code, out, _err = _cli(capsys, "eval", "--model", "srcnn-x3", "--images", "astronaut")
    assert code == 0 and "not evaluated" not in out and "    x3 " in out, out
    code, out, _err = _cli(capsys, "eval", "--model", "srcnn-x3", "--images", "astronaut", "--scales", "2", "3")
    assert code == 0 and "x2  not evaluated" in out  # asked for: said


def test_a_mistyped_flag_gets_the_closest_one_and_metavars_agree(tmp_path, capsys):
    code, _out, err = _cli(capsys, "sr", tmp_path / "in", tmp_path / "out", "--sacle", "3")
    assert code == 2 and err.strip().startswith("error: unrecognized arguments: --sacle 3 (did you mean --scale?)")
    code, _out, err = _cli(capsys, "sr", tmp_path / "in", tmp_path / "out", "--zzzz")
    assert code == 2 and "did you mean" not in err
    helps = {}
    for stage in ("demo", "sr", "doctor", "compare", "bench", "engine", "export"):
        with pytest.raises(SystemExit):
            _cli(capsys, stage, "--help")
        helps[stage] = capsys.readouterr().out
    for stage in ("demo", "doctor", "compare", "bench"):  # a folder is DIR, a file FILE, a backend NAME everywhere
        assert "--output DIR" in helps[stage], stage
    assert "--output FILE" in helps["engine"] and "--output FILE" in helps["export"]
    assert "--backend NAME" in helps["demo"] and "--backend NAME" in helps["sr"]


def test_make_configures_cmake_once_per_set_of_arguments(tmp_path):
    """Every make target re-ran CMake's configure, printing "Unable to find cublas_v2.h" and the TensorRT skip."""
    import shutil

    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    log, bin_dir, build = tmp_path / "calls.log", tmp_path / "bin", tmp_path / "build"
    bin_dir.mkdir()
    (bin_dir / "cmake").write_text(f'#!/bin/sh\necho "cmake $*" >> {log}\n'
                                   'if [ "$1" = -S ]; then mkdir -p "$4" && touch "$4/CMakeCache.txt"; fi\n')
    (bin_dir / "cmake").chmod(0o755)
    env = {"PATH": f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin", "HOME": str(tmp_path)}
    for trt in ("", "", "/elsewhere"):
        r = subprocess.run(["make", "-s", "--no-print-directory", "build-plugins", f"PY={sys.executable}",
                            f"BUILD={build}", f"PNG_BUILD={tmp_path / 'png'}", f"TENSORRT_ROOT={trt}"], cwd=REPO,
                           env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
    calls = log.read_text().splitlines()
    plugins = [c.split()[1] for c in calls if str(build) in c]
    png = [c.split()[1] for c in calls if str(tmp_path / "png") in c]
    assert plugins == ["-S", "--build", "--build", "-S", "--build"], calls
    assert png == ["-S", "--build", "--build", "--build"], calls  # the PNG codec's library takes no TensorRT


def test_raylet_lines_the_log_monitor_prefixes_are_kept_off_the_terminal():
    pytest.importorskip("ray", reason="Ray is not installed")
    from pipeline.cluster.ray_log import keep

    line = b"(raylet) [2026-11-26 21:58:01,549 E 4021 4021] worker_pool.cc:581: Some workers of the worker process\n"
    gcs = b"(gcs_server, ip=127.0.0.1) [2026-11-26 21:58:01,549 W 77 77] gcs_actor_manager.cc:1: restarting\n"
    assert keep(b"sr: srcnn x3 on Ray\n" + line + gcs + b"done: 4 ok\n") == (b"sr: srcnn x3 on Ray\ndone: 4 ok\n", b"")
    assert keep(line[:20]) == (b"", line[:20])  # held until its line ends
    assert keep(b"(our own words)\n") == (b"(our own words)\n", b"")
