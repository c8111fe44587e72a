"""Issue 67's `preview` and `sr` safety part: nothing a user owns is lost or shown wrong. `preview` deletes only what
it wrote, refuses an OUTPUT inside INPUT, surveys through `sr`'s input checks, survives any file name and clamps
lying clip headers; `sr` refuses an OUTPUT inside INPUT; report.md never carries a name raw inside a link; the
table is one formula."""
from __future__ import annotations

import json
import os
import struct
import threading
from pathlib import Path

import pytest

from pipeline import sr
from pipeline.cli import main
from pipeline.errors import PipelineError
from pipeline.htmlreport import Code, Heading, para, write_report
from pipeline.htmlreport.document import Sheet
from pipeline.htmlreport.markdown import block_lines
from pipeline.preview import inputs, report, video
from pipeline.preview.estimate import estimate
from pipeline.preview.measure import Candidate, Measured, SrRun
from pipeline.sr.runner.jobs import discover
from tests.test_preview import mixed_folder
from tests.video_clips import make_clip

HOSTILE = "n\udcfeme<img src=x onerror=alert(1)>"  # not UTF-8 (a 0xFE byte), and HTML


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


# -- sr: OUTPUT inside INPUT ------------------------------------------------------------------------------------------
def test_sr_refuses_output_inside_input_before_any_work(tmp_path, capsys):
    """`sr IN IN/out` is one line and exit 2 (a later `sr IN other` would upscale IN/out/ again); upscale() too."""
    src = mixed_folder(tmp_path / "small", n=2, big=False)
    for out in (src / "out3", src / "deeper" / "out"):
        assert main(["sr", str(src), str(out)]) == 2
        assert "lies inside the INPUT folder" in _one_error_line(capsys)
        assert not out.exists()
    with pytest.raises(PipelineError, match="lies inside the INPUT folder"):
        sr.upscale(src, src / "out3", progress=False, log=lambda _line: None)
    assert sorted(p.name for p in src.iterdir()) == ["img00.png", "img01.jpg"]


def test_an_output_mirrored_into_input_fails_on_its_own(tmp_path):
    """INPUT inside OUTPUT: out/x's x/b.png would be written to out/x/b.png, inside INPUT, where the next run over
    INPUT would read it back; that job fails, the others run."""
    out = tmp_path / "out"
    src = out / "x"
    for rel in ("x/b.png", "a.png"):
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(b"x")
    jobs = {j.rel: j for j in discover(src, out).jobs}
    assert "lies inside INPUT" in jobs["x/b.png"].problem and jobs["a.png"].problem == ""


# -- preview: what it may replace --------------------------------------------------------------------------------------
def test_preview_output_equal_to_or_inside_input_is_exit_2_and_nothing_is_touched(tmp_path, capsys):
    src = mixed_folder(tmp_path / "in", n=2, big=False)
    (src / "samples").mkdir()
    (src / "samples" / "thesis.txt").write_text("years of work")
    before = sorted(p.relative_to(src) for p in src.rglob("*"))
    for out in (src, src / "samples", src / "preview"):
        assert main(["preview", str(src), "--output", str(out)]) == 2
        assert "lies inside it" in _one_error_line(capsys)
    assert sorted(p.relative_to(src) for p in src.rglob("*")) == before
    assert (src / "samples" / "thesis.txt").read_text() == "years of work"


@pytest.mark.parametrize("theirs", ["samples/thesis.txt", "report.md", "sheets/01-img00.png"])
def test_preview_never_replaces_a_users_samples_or_report(tmp_path, capsys, theirs):
    """`--output ~/home` deleted home/samples/thesis.txt: a folder or report preview did not mark is refused, one
    line, exit 2, before any work."""
    src = mixed_folder(tmp_path / "in", n=2, big=False)
    home = tmp_path / "home"
    (home / theirs).parent.mkdir(parents=True)
    (home / theirs).write_text("mine")
    assert main(["preview", str(src), "--output", str(home)]) == 2
    assert "preview replaces only" in _one_error_line(capsys)
    assert (home / theirs).read_text() == "mine"
    folders = {p.as_posix() for p in Path(theirs).parents if p != Path(".")}
    assert {p.relative_to(home).as_posix() for p in home.rglob("*")} == {theirs, *folders}


def test_samples_spread_takes_every_image_when_fewer_than_asked():
    assert inputs.spread(7, 8) == list(range(7))
    assert inputs.spread(7, 7) == list(range(7))
    assert len(set(inputs.spread(100, 8))) == 8


# -- preview: sr's input checks ----------------------------------------------------------------------------------------
def _survey_in_time(folder: Path, seconds: float = 60) -> inputs.Survey:
    """The survey, run where a hang (a FIFO opened for reading) fails the test instead of the suite."""
    result: list = []
    t = threading.Thread(target=lambda: result.append(inputs.survey(folder, folder.parent / "never")), daemon=True)
    t.start()
    t.join(seconds)
    assert result, "the survey hung"
    return result[0]


def test_survey_refuses_a_fifo_a_link_outside_and_a_huge_sparse_file_unread(tmp_path, monkeypatch):
    monkeypatch.setenv("SRDEPLOY_MAX_PIXELS", "1000000")  # a size cap of 72 MiB
    folder = mixed_folder(tmp_path / "in", n=1, big=False)
    os.mkfifo(folder / "pipe.png")
    with open(folder / "sparse.png", "wb") as f:
        f.truncate(200 << 20)
    (folder / "outside.png").symlink_to(mixed_folder(tmp_path / "elsewhere", n=1, big=False) / "img00.png")
    s = _survey_in_time(folder)
    assert [p.job.rel for p in s.pictures] == ["img00.png"]
    lines = dict(line.split(": ", 1) for line in s.unreadable)
    assert set(lines) == {"outside.png", "pipe.png", "sparse.png"}
    assert lines["outside.png"].startswith("a link leading outside INPUT")
    assert lines["pipe.png"].startswith("not a regular file")
    assert lines["sparse.png"].startswith("file is 200 MiB, more than an image within the pixel limit can take")


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_survey_never_reads_a_link_to_dev_zero(tmp_path):
    folder = mixed_folder(tmp_path / "in", n=1, big=False)
    (folder / "zero.png").symlink_to("/dev/zero")
    s = _survey_in_time(folder)
    assert [p.job.rel for p in s.pictures] == ["img00.png"]
    assert s.unreadable == ["zero.png: not a regular file (a FIFO, socket or device); only regular files are read"]


# -- preview: clips whose headers lie ----------------------------------------------------------------------------------
def _lying_mp4(path: Path) -> Path:
    """A 12-frame MP4 whose stts says 2^31-1 frames (its duration still 0.48 s)."""
    b = bytearray(make_clip(path.with_name("honest.mp4"), "mpeg4", 64, 48, 12, 25).read_bytes())
    i = b.index(b"stts")
    struct.pack_into(">I", b, i + 12, 2**31 - 1)  # version/flags, entry count, then the first entry's count
    path.write_bytes(b)
    return path


def _lying_mkv(path: Path) -> Path:
    """A 12-frame MKV whose Segment Info duration says -645 s."""
    b = bytearray(make_clip(path.with_name("honest.mkv"), "mpeg4", 64, 48, 12, 25).read_bytes())
    j = b.index(bytes([0x44, 0x89]))  # the Duration element: a float of 4 or 8 bytes, in timecode-scale units
    size = b[j + 2] & 0x7F
    struct.pack_into(">d" if size == 8 else ">f", b, j + 3, -645000.0)
    path.write_bytes(b)
    return path


@pytest.mark.parametrize("make", [_lying_mp4, _lying_mkv])
def test_a_clip_header_that_lies_is_clamped_and_said(tmp_path, make):
    """21,973 h and 242 GB for a 12-frame MP4 whose stts says 2^31-1; -645 s for a negative MKV duration."""
    path = make(tmp_path / ("lie.mp4" if make is _lying_mp4 else "lie.mkv"))
    s = inputs.Survey(video_jobs=[sr.Job(path, tmp_path / "out" / path.name, path.name, path.suffix[1:])])
    video.probe_clips(s)
    c = s.clips[0]
    assert c.frames == 12 and c.duration_s == pytest.approx(0.48) and float(c.rate) == 25
    assert len(s.header_lies) == 1 and s.header_lies[0].startswith(f"{path.name}: its header lies (")
    assert "counted 12 frames" in s.header_lies[0]
    assert s.out_mpix(2)[1] == pytest.approx(12 * 64 * 48 * 4 / 1e6)
    honest = inputs.Survey(video_jobs=[sr.Job(path.with_name(f"honest{path.suffix}"), tmp_path / "o", "h", "mkv")])
    video.probe_clips(honest)
    assert honest.clips[0].frames == 12 and not honest.clips[0].lies and not honest.header_lies


def test_clip_numbers_hold_every_header_number_to_the_file():
    class Info:
        rate, frames, frames_exact, duration_s = 10**9, 2**31 - 1, True, float("inf")

    frames, duration, rate, lies = inputs.clip_numbers(Info, size=5000)
    assert frames <= 5000 and duration >= 0 and 0 < rate <= inputs.MAX_RATE and len(lies) == 3


# -- report.md: names escaped; the table one formula -------------------------------------------------------------------
def test_a_picture_link_never_carries_a_name_raw(tmp_path):
    [line] = block_lines(Sheet("t", tmp_path / "sheets" / f"01-{HOSTILE}).png"), folder=tmp_path)
    assert line == "![t](sheets/01-n%FEme%3Cimg%20src%3Dx%20onerror%3Dalert%281%29%3E%29.png)"


def _run(seconds: float, mpix: float) -> SrRun:
    return SrRun(seconds, mpix, 0.0, 0.0, [])


def test_every_row_is_load_plus_megapixels_times_its_rate():
    """Before, the recommended row (its fixed part measured apart) was not load + MPix x ms/MPix."""
    job = sr.Job(Path("a.png"), Path("out/a.png"), "a.png", "png")
    survey = inputs.Survey(pictures=[inputs.Picture(job, 1000, 1000)] * 3)  # 27 output MPix at x3
    plain = Measured(Candidate("a", "fp32"), setup_s=1.0, images=_run(2.0, 2.0))
    split = Measured(Candidate("b", "fp32"), setup_s=1.0, images=_run(2.0, 2.0), images_fixed_s=0.8)
    for m in (plain, split):
        e = estimate(m, survey, 3.0, set(), 0)
        row = report.candidate_dict(report.Judged(m, e, None, "within budget", ""))
        assert row["est_seconds"] == pytest.approx(row["load_s"] + 27 * row["ms_per_mpix"] / 1000, rel=1e-3)
    assert estimate(split, survey, 3.0, set(), 0).load_s == pytest.approx(1.8)


def test_unavailable_is_a_few_lines_grouped_by_reason():
    cuda = [{"backend": b, "precision": p, "reason": "needs a CUDA GPU"} for b in ("ort-cuda", "trt")
            for p in ("fp32", "int8")]
    other = [{"backend": "ort-folded", "precision": "int8", "reason": "runs fp32, not int8"},
             {"backend": "torch", "precision": "int8", "reason": "runs fp32, fp16, bf16, not int8"}]
    assert report.unavailable_lines(cuda + other) == ["needs a CUDA GPU: ort-cuda, trt",
                                                      "not a precision it runs: ort-folded int8, torch int8"]


# -- the whole preview on a hostile folder ---------------------------------------------------------------------------
def test_preview_of_a_hostile_folder_finishes_with_one_line_each(tmp_path, capsys):
    """A link to /dev/zero and a FIFO named as images, a clip whose header lies and a name that is not UTF-8 (with
    HTML in it): the preview finishes, says each once, and writes its report with the name escaped."""
    folder = mixed_folder(tmp_path / "in", n=2, big=False)
    (folder / "zero.png").symlink_to("/dev/zero")
    os.mkfifo(folder / "pipe.png")
    _lying_mp4(tmp_path / "lie.mp4").rename(folder / "lie.mp4")
    os.link(folder / "img00.png", os.fsencode(folder / f"{HOSTILE}.png"))
    out = tmp_path / "out"
    assert main(["preview", str(folder), "--model", "srcnn-x3", "--backends", "ort-folded", "ort", "--precisions",
                 "fp32", "--samples", "8", "--output", str(out)]) == 0
    said = capsys.readouterr().out.splitlines()
    for name in ("zero.png", "pipe.png"):
        assert sum(line.startswith(f"left out {name}: not a regular file") for line in said) == 1, said
    assert sum(line.startswith("note: lie.mp4: its header lies") for line in said) == 1, said
    doc = json.loads((out / "report.json").read_text())
    assert doc["job"]["frames"] == 12 and len(doc["job"]["unreadable"]) == 2
    assert sum(not s["name"].startswith("frame-") for s in doc["samples"]) == 3  # every image, none twice
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "xfeme" in md and "<img" not in md.replace("\\<img", "")
    assert ".lock" not in md and "/." not in md.split("## Built now")[1]
    assert (out / "samples" / ".srdeploy-preview").is_file() and (out / ".srdeploy-preview").is_file()
    assert main(["preview", str(folder), "--model", "srcnn-x3", "--backends", "ort-folded", "--precisions", "fp32",
                 "--samples", "1", "--output", str(out)]) == 0  # its own folder: replaced, as before


def test_a_report_takes_text_that_is_not_utf8(tmp_path):
    """A name's bytes that are not UTF-8 (an INPUT folder's, in the title and the command) are written as \\xNN in
    report.md and report.html, not a UnicodeEncodeError after all the measuring."""
    md, html = write_report(tmp_path / "report.md", [Heading(f"preview on {HOSTILE}", 1), para(Code(f"sr {HOSTILE}"))])
    assert "n\\\\xfeme" in md.read_text(encoding="utf-8") and "n\\xfeme" in html.read_text(encoding="utf-8")
