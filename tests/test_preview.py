"""`preview`: every backend x precision on samples of the user's own input, with the whole job's time and size.
Real runs only: the estimate is held to the recommended command's actual `sr --summary` run, made right after it
(the machine is shared, so the two are measured as close together as they can be)."""
from __future__ import annotations

import json
import os
import resource
from pathlib import Path

import cv2
import numpy as np
import pytest

from pipeline.cli import main
from pipeline.preview import OUTPUT_PLACEHOLDER
from pipeline.preview.estimate import Estimate
from pipeline.preview.measure import Candidate, Measured
from pipeline.preview.verdict import OVER, RECOMMENDED, WITHIN, Judged, rank
from tests.caches import own_cache
from tests.test_html_reports import browser, needs_browser  # noqa: F401 (the fixture)
from tests.video_clips import make_clip

NAN_MODEL = "byom_nets:nan_near_white_factory"
FP16_MODEL = "byom_nets:fp16_overflow_factory"
VERDICTS = {"recommended", "within budget", "over budget", "failed"}
TOLERANCE = 0.25  # the estimate against the actual run


def _photo(rng, h: int, w: int) -> np.ndarray:
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.stack([128 + 100 * np.sin(xx / 17 + k) * np.cos(yy / 23 - k) for k in range(3)], -1)
    return np.clip(img + rng.normal(0, 12, img.shape), 0, 255).astype(np.uint8)


def mixed_folder(d: Path, n: int = 19, big: bool = True) -> Path:
    """n small images (PNG, JPEG, gray PNG, RGBA PNG in turn) and one 3000x2000 JPEG."""
    rng = np.random.default_rng(0)
    d.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        img = _photo(rng, int(rng.integers(160, 420)), int(rng.integers(160, 420)))
        kind = i % 4
        if kind == 1:
            cv2.imwrite(str(d / f"img{i:02d}.jpg"), img, [cv2.IMWRITE_JPEG_QUALITY, 90])
        elif kind == 2:
            cv2.imwrite(str(d / f"img{i:02d}.png"), img[..., 0])
        elif kind == 3:
            alpha = np.full(img.shape[:2] + (1,), 200, np.uint8)
            cv2.imwrite(str(d / f"img{i:02d}.png"), np.concatenate([img, alpha], -1))
        else:
            cv2.imwrite(str(d / f"img{i:02d}.png"), img)
    if big:
        cv2.imwrite(str(d / "big.jpg"), _photo(rng, 2000, 3000), [cv2.IMWRITE_JPEG_QUALITY, 90])
    return d


def _cpu_s() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _check_schema(doc: dict) -> None:
    for c in doc["candidates"]:
        assert {"backend", "precision", "fidelity_db", "nonfinite", "ms_per_mpix", "est_seconds", "est_bytes",
                "verdict"} <= set(c)
        assert c["verdict"] in VERDICTS and isinstance(c["nonfinite"], int)
        if c["verdict"] != "failed":
            assert set(c["fidelity_db"]) == {"mean", "worst"} and c["est_seconds"] > 0 and c["est_bytes"] > 0
    for u in doc["unavailable"]:
        assert set(u) == {"backend", "precision", "reason"} and u["reason"]
    times = [c["est_seconds"] for c in doc["candidates"] if c["est_seconds"] is not None]
    assert times == sorted(times)  # fastest first
    assert [c["verdict"] for c in doc["candidates"]].count("recommended") == (doc["recommended"] is not None)


def _recommended_run(doc: dict, output: Path, summary: Path) -> dict:
    """The recommended command, run as printed (OUTPUT replaced), with --summary."""
    argv = doc["recommended"]
    i = argv.index("--backend")
    assert argv[i + 1] and argv[argv.index("--precision") + 1] and OUTPUT_PLACEHOLDER in argv
    argv = [str(output) if a == OUTPUT_PLACEHOLDER else a for a in argv]
    assert main([*argv, "--summary", str(summary), "--quiet"]) == 0
    return json.loads(summary.read_text())


def _best(doc: dict) -> dict:
    return next(c for c in doc["candidates"] if c["verdict"] == "recommended")


def _close(doc: dict, summary: dict) -> bool:
    return abs(_best(doc)["est_seconds"] - summary["wall_s"]) <= TOLERANCE * summary["wall_s"]


def _estimate_holds(doc: dict, summary: dict, input_path: Path, again: Path, extra: list[str]) -> None:
    """The recommended candidate's estimate within TOLERANCE of its run's wall_s. The machine is shared (others'
    load comes and goes within a minute), so a miss is measured once more, the preview of that candidate alone and
    its run right after it: an estimator that is wrong misses both times."""
    first = (_best(doc)["est_seconds"], summary["wall_s"])
    print(f"estimate {first[0]:.1f} s, sr wall_s {first[1]:.1f} s")  # with -s: how close it came
    if _close(doc, summary):
        return
    best = _best(doc)
    assert main(["preview", str(input_path), "--model", "srcnn-x3", "--backends", best["backend"], "--precisions",
                 best["precision"], *extra, "--output", str(again / "preview")]) == 0
    doc = json.loads((again / "preview" / "report.json").read_text())
    out = again / "sr-out" / (input_path.name if input_path.is_file() else "")
    summary = _recommended_run(doc, out, again / "summary.json")
    assert _close(doc, summary), (first, (_best(doc)["est_seconds"], summary["wall_s"]))


# -- bad input: one line, exit 2, nothing done ---------------------------------------------------------------------
@pytest.mark.parametrize("case", ["empty", "not-an-image", "samples", "backend", "precision", "output-file"])
def test_bad_input_is_one_line_and_exit_2_before_any_work(case, tmp_path, capsys):
    folder = mixed_folder(tmp_path / "in", n=2, big=False)
    args = {"empty": [str(tmp_path / "empty")], "not-an-image": [str(tmp_path / "bad.png")],
            "samples": [str(folder), "--samples", "0"], "backend": [str(folder), "--backends", "ort", "nope"],
            "precision": [str(folder), "--precisions", "fp64"],
            "output-file": [str(folder), "--output", str(tmp_path / "report.txt")]}[case]
    (tmp_path / "empty").mkdir()
    (tmp_path / "bad.png").write_bytes(b"not a picture at all")
    (tmp_path / "report.txt").write_text("a file")
    out = tmp_path / "out"
    if case != "output-file":
        args += ["--output", str(out)]
    assert main(["preview", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    assert not out.exists()
    word = {"empty": "no readable image or video", "not-an-image": "no readable image or video", "samples": "--samples",
            "backend": "nope", "precision": "fp64", "output-file": "is a file"}[case]
    assert word in err[0]


def test_one_image_without_model_previews_the_default_model(tmp_path, capsys):
    """An image is its own sample; without --model the default model runs and the command names it."""
    folder = mixed_folder(tmp_path / "in", n=1, big=False)
    out = tmp_path / "out"
    assert main(["preview", str(folder / "img00.png"), "--backends", "ort-folded", "--precisions", "fp32",
                 "--output", str(out)]) == 0
    doc = json.loads((out / "report.json").read_text())
    assert doc["recommended"] == ["sr", str(folder / "img00.png"), "OUTPUT", "--model", "srcnn", "--backend",
                                  "ort-folded", "--precision", "fp32"]
    assert len(doc["samples"]) == 1 and doc["samples"][0]["from"] == "img00.png"
    assert "recommended: python -m pipeline sr " in capsys.readouterr().out


# -- a candidate whose output is not finite --------------------------------------------------------------------------
def test_nan_output_is_failed_with_its_count_and_never_recommended(tmp_path, capsys):
    """The NaN net on a white image: every candidate's output is NaN there (fp32 has nothing to re-run with), each is
    `failed` with the pixels counted, none is recommended and the command exits 1."""
    d = tmp_path / "in"
    d.mkdir()
    cv2.imwrite(str(d / "white.png"), np.full((40, 48, 3), 255, np.uint8))
    out = tmp_path / "out"
    code = main(["preview", str(d), "--model", NAN_MODEL, "--backends", "ort", "openvino", "--precisions", "fp32",
                 "--output", str(out)])
    printed = capsys.readouterr().out
    assert code == 1 and "recommended: none" in printed
    doc = json.loads((out / "report.json").read_text())
    _check_schema(doc)
    assert doc["recommended"] is None and len(doc["candidates"]) == 2
    for c in doc["candidates"]:
        assert c["verdict"] == "failed" and c["nonfinite"] == 80 * 96, c  # every output pixel of the x2 net
        assert "NaN or inf" in c["why"]


def test_a_failed_candidate_beside_a_good_one_is_never_recommended(tmp_path):
    """A net whose fp16 file overflows on white (inf): ort fp16 fails the check there (sr re-runs it at fp32; the
    preview counts its own output's pixels) and ort fp32, finite, is recommended."""
    d = tmp_path / "in"
    d.mkdir()
    white = np.full((40, 48, 3), 200, np.uint8)
    white[10:20, 10:30] = 255
    cv2.imwrite(str(d / "white.png"), white)
    out = tmp_path / "out"
    code = main(["preview", str(d), "--model", FP16_MODEL, "--backends", "ort", "--precisions", "fp32", "fp16",
                 "--output", str(out)])
    doc = json.loads((out / "report.json").read_text())
    _check_schema(doc)
    by = {c["precision"]: c for c in doc["candidates"]}
    assert code == 0 and by["fp16"]["verdict"] == "failed" and by["fp16"]["nonfinite"] == 20 * 10 * 4  # x2
    assert by["fp32"]["verdict"] == "recommended" and by["fp32"]["nonfinite"] == 0
    assert doc["recommended"][-4:] == ["--backend", "ort", "--precision", "fp32"]


# -- the folder: time estimate against the real run ------------------------------------------------------------------
@pytest.mark.slow
def test_folder_preview_estimates_the_recommended_run(tmp_path, tmp_path_factory, capsys, monkeypatch):
    # first-time work (int8 calibration, quality records) on a small folder, cached as sr caches it: in a cache of
    # this test's own (the session's ONNX exports shared), since tests before it may have made the session's
    session = Path(os.environ["SRDEPLOY_CACHE"])
    monkeypatch.setenv("SRDEPLOY_CACHE", str(own_cache(tmp_path_factory, session, "preview-first-time")))
    small = mixed_folder(tmp_path / "small", n=2, big=False)
    assert main(["preview", str(small), "--model", "srcnn-x3", "--output", str(tmp_path / "first")]) == 0
    first = json.loads((tmp_path / "first" / "report.json").read_text())
    assert any(c["built_now"] for c in first["candidates"])
    assert "Built now" in (tmp_path / "first" / "report.md").read_text()

    folder = mixed_folder(tmp_path / "in")
    out = tmp_path / "preview"
    cpu0 = _cpu_s()
    assert main(["preview", str(folder), "--model", "srcnn-x3", "--output", str(out)]) == 0
    cpu = _cpu_s() - cpu0
    printed = capsys.readouterr().out
    doc = json.loads((out / "report.json").read_text())
    _check_schema(doc)
    assert len(doc["candidates"]) >= 4 and not any(c["built_now"] for c in doc["candidates"])
    # <= 60 s on the 2 cores: its CPU seconds (the shared machine's other load does not count), both cores' worth
    assert cpu <= 2 * 60, f"preview took {cpu:.0f} CPU seconds"
    assert "recommended: python -m pipeline sr " in printed and "est. time" in printed
    assert (out / "report.html").stat().st_size <= 20 << 20
    summary = _recommended_run(doc, tmp_path / "sr-out", tmp_path / "summary.json")
    assert summary["counts"]["ok"] == 20
    _estimate_holds(doc, summary, folder, tmp_path / "again", [])


# -- a clip with audio: time and size ----------------------------------------------------------------------------------
@pytest.mark.slow
def test_clip_preview_estimates_time_and_size_of_the_recommended_run(tmp_path):
    clip = make_clip(tmp_path / "clip.mp4", "libx264", 640, 360, 50, 5, audio="aac")  # 10 s at 5 frames/s
    out = tmp_path / "preview"
    assert main(["preview", str(clip), "--model", "srcnn-x3", "--backends", "openvino", "--precisions", "fp32",
                 "int8", "--samples", "1", "--output", str(out)]) == 0
    doc = json.loads((out / "report.json").read_text())
    _check_schema(doc)
    assert doc["job"]["frames"] == 50 and doc["job"]["copied_bytes"] > 0 and doc["sample_frames"] == 8
    best = _best(doc)
    dst = tmp_path / "sr-out" / "clip.mp4"
    summary = _recommended_run(doc, dst, tmp_path / "summary.json")
    _estimate_holds(doc, summary, clip, tmp_path / "again", ["--samples", "1"])
    size = dst.stat().st_size
    assert abs(best["est_bytes"] - size) <= TOLERANCE * size, (best["est_bytes"], size)


# -- the page in a browser ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def small_preview(tmp_path_factory):
    d = tmp_path_factory.mktemp("preview")
    folder = mixed_folder(d / "in", n=3, big=False)
    assert main(["preview", str(folder), "--model", "srcnn-x3", "--backends", "ort-folded", "openvino",
                 "--precisions", "fp32", "int8", "--samples", "2", "--output", str(d / "out")]) == 0
    return d / "out"


def test_page_and_markdown_say_the_command_and_the_table(small_preview):
    doc = json.loads((small_preview / "report.json").read_text())
    md, page = (small_preview / "report.md").read_text(), (small_preview / "report.html").read_text()
    command = "python -m pipeline sr " + " ".join(doc["recommended"][1:])
    assert doc["recommended"][:3] == ["sr", str(small_preview.parent / "in"), "OUTPUT"]
    assert md.index(command) < md.index("Candidates, fastest first")  # the command at the top
    assert 'http-equiv="Content-Security-Policy"' in page and "default-src" in page
    assert "data:image/jpeg;base64," in page and "data:image/png;base64," not in page  # crops as JPEG
    assert "cropped to a centred 512x512 window" in md


@needs_browser
def test_preview_page_in_a_browser_loads_nothing_and_its_sliders_work(small_preview, browser):  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    doc = json.loads((small_preview / "report.json").read_text())
    browser.set_window_size(1280, 800)
    browser.get((small_preview / "report.html").as_uri())
    assert browser.execute_script("return document.readyState") == "complete"
    assert "python -m pipeline sr" in browser.find_element(By.TAG_NAME, "body").text
    best = _best(doc)
    assert f"--backend {best['backend']} --precision {best['precision']}" in browser.find_element(
        By.TAG_NAME, "code").text
    images = browser.find_elements(By.TAG_NAME, "img")
    assert images and all(i.get_attribute("src").startswith("data:image/") for i in images)
    assert all(browser.execute_script("return arguments[0].naturalWidth", i) > 0 for i in images)
    fetched = browser.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name).filter(n => !n.startsWith('data:'))")
    assert fetched == []  # no request leaves the page
    labels = [s.get_attribute("aria-label") for s in browser.find_elements(By.CSS_SELECTOR, "input[type=range]")]
    assert any("bicubic on the left, openvino int8 on the right" in label for label in labels), labels
    assert any("openvino int8 on the left, ort-folded fp32 (fp32 reference)" in label for label in labels), labels
    slider = browser.find_element(By.CSS_SELECTOR, ".slider input[type=range]")
    before = browser.find_element(By.CSS_SELECTOR, ".slider img.before")
    start = before.value_of_css_property("clip-path")
    browser.execute_script("arguments[0].scrollIntoView()", slider)
    slider.send_keys(Keys.ARROW_RIGHT * 10)
    assert int(slider.get_attribute("value")) == 60 and before.value_of_css_property("clip-path") != start
    assert not [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]


def test_split_fixed_takes_the_extra_run_as_the_images_own_time_held_to_sane_bounds():
    from pipeline.preview.measure import SrRun, split_fixed

    once = SrRun(process_s=1.0, out_mpix=2.0, decode_s=0, encode_s=0, records=[])
    assert split_fixed(once, SrRun(1.8, 4.0, 0, 0, [])) == pytest.approx((0.2, 0.4))
    assert split_fixed(once, SrRun(1.1, 4.0, 0, 0, [])) == pytest.approx((0.5, 0.25))  # at most half is fixed
    assert split_fixed(once, SrRun(3.0, 4.0, 0, 0, [])) == pytest.approx((0.0, 0.5))  # never a negative fixed part


def test_a_refused_row_without_a_reason_is_never_recommended():
    """rank hands decide each row's refusal: a row over budget whose reason line is empty is still refused (it was
    counted as within budget, and as the fastest it became the recommendation)."""
    def row(precision, seconds, verdict, why):
        return Judged(Measured(Candidate("openvino", precision)), Estimate(seconds, 1, 1.0, 0.1), None, verdict, why)

    ranked = rank([row("fp32", 10.0, WITHIN, "fp32: the reference precision"), row("int8", 4.0, OVER, "")])
    assert [(j.measured.candidate.precision, j.verdict) for j in ranked] == [("int8", OVER), ("fp32", RECOMMENDED)]
