"""report.html in a real browser: headless Debian Chromium driven by Selenium (no browser download; skipped with
the reason where chromium, chromedriver or selenium are missing). The pages are made by the real writers from
small real data: a report with a table and a plot, a crop sheet, and `sr --reference` on a small image."""
from __future__ import annotations

import html
import re
import shutil
import tempfile
from pathlib import Path

import cv2
import numpy as np
import pytest

from pipeline import report
from pipeline.analysis import sheet
from pipeline.htmlreport import Code, Heading, Sheet, Strong, items, para, plot_figure, write_report
from pipeline.report import plots

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
SIZES = ((1280, 800), (390, 844))  # a laptop, a phone


def _browser_problem() -> str | None:
    if not Path(CHROMIUM).is_file() or not Path(CHROMEDRIVER).is_file():
        return "Debian's chromium and chromium-driver are not installed (apt-get install chromium chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install selenium)"
    return None


needs_browser = pytest.mark.skipif(_browser_problem() is not None, reason=str(_browser_problem()))


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="sr-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                 f"--user-data-dir={profile}"):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


def _pictures() -> tuple[np.ndarray, dict, np.ndarray]:
    rng = np.random.default_rng(0)
    hr = (rng.random((96, 96, 3)) * 255).astype(np.uint8)
    lr = cv2.resize(hr, (32, 32), interpolation=cv2.INTER_AREA)
    model = np.clip(hr.astype(int) + rng.integers(-3, 4, hr.shape), 0, 255).astype(np.uint8)
    return lr, {"srcnn": model}, hr


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """A report with a table and a plot, and a crop sheet: report.md + report.html."""
    out = tmp_path_factory.mktemp("report")
    plt = plots.plt_()
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot([64, 128, 256], [1.0, 3.5, 14.0], marker="o")
    plots.save_fig(fig, out / "latency.png")
    plt.close(fig)
    lr, outputs, hr = _pictures()
    png = sheet.write(out / "sheet-srcnn-x3.png", lr, outputs, hr, scale=3, side=40, bicubic=lambda a, size: cv2.resize(
        a, size[::-1], interpolation=cv2.INTER_CUBIC))
    blocks = [Heading("Bench", 1), para("Machine: a CPU. ", Code("srcnn"), " ", Strong("x3"), "."),
              report.table(["model", "median ms", "roofline"], [["srcnn", 14.0, "9.9 %"], ["srcnn-x3", 3.5, "41.0 %"]]),
              items("one", "two"), plot_figure("latency", out / "latency.png"), Sheet("srcnn x3", png)]
    md, page = write_report(out / "report.md", blocks)
    return {"report": page, "md": md}


def test_the_page_and_the_markdown_say_the_same(pages):
    text, md = pages["report"].read_text(), pages["md"].read_text()
    assert md.startswith("# Bench\n\nMachine: a CPU. `srcnn` **x3**.\n\n| model | median ms | roofline |\n")
    assert report.parse_table(md, "model") == [{"model": "srcnn", "median ms": "14", "roofline": "9.9 %"},
                                               {"model": "srcnn-x3", "median ms": "3.5", "roofline": "41.0 %"}]
    assert "- one\n- two" in md and "![latency](latency.png)" in md
    # the plot as a picture (its SVG drawing in a data: URI), nothing linked
    assert 'src="data:image/svg+xml;base64,' in text and "latency.png" not in text and "<svg" not in text
    assert not re.search(r'(src|href)\s*=\s*"(https?:)?//', text) and "@import" not in text  # nothing fetched
    # 2 crops x (bicubic vs srcnn, then bicubic and srcnn each against the ground truth), under the sheet's heading
    assert text.count('type="range"') == 6 and "<h3>srcnn x3</h3>" in text
    assert "<code>srcnn</code>" in text and "<strong>x3</strong>" in text
    assert re.search(r"<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; img-src data:; "
                     r"style-src 'sha256-[^']+'; script-src 'sha256-[^']+';", html.unescape(text))


@needs_browser
def test_report_in_a_browser(pages, browser, tmp_path):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    for width, height in SIZES:
        browser.set_window_size(width, height)
        browser.get(pages["report"].as_uri())
        assert browser.execute_script("return document.readyState") == "complete"
        images = browser.find_elements(By.TAG_NAME, "img")
        assert images and all(browser.execute_script("return arguments[0].naturalWidth", i) > 0 for i in images)
        wide = browser.execute_script(
            "return document.documentElement.scrollWidth - document.documentElement.clientWidth")
        assert wide <= 0, f"horizontal scroll of {wide} px at {width}x{height}"
        browser.save_screenshot(str(tmp_path / f"report-{width}.png"))
    slider = browser.find_element(By.CSS_SELECTOR, ".slider input[type=range]")
    before = browser.find_element(By.CSS_SELECTOR, ".slider img.before")
    start = before.value_of_css_property("clip-path")
    browser.execute_script("arguments[0].scrollIntoView()", slider)
    slider.send_keys(Keys.ARROW_RIGHT * 10)
    assert int(slider.get_attribute("value")) == 60 and before.value_of_css_property("clip-path") != start
    ActionChains(browser).click_and_hold(slider).move_by_offset(-slider.size["width"] // 3, 0).release().perform()
    assert int(slider.get_attribute("value")) < 40  # dragged left
    diff = browser.find_element(By.CSS_SELECTOR, ".slider input.diff")
    picture = before.get_attribute("src")
    diff.click()
    assert before.get_attribute("src") != picture  # the amplified difference
    header = browser.find_element(By.CSS_SELECTOR, "th")
    header.click()
    first = browser.find_element(By.CSS_SELECTOR, "tbody tr td").text
    header.click()
    assert browser.find_element(By.CSS_SELECTOR, "tbody tr td").text != first  # sorted both ways
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors
    assert cv2.imread(str(tmp_path / "report-390.png")) is not None


@needs_browser
def test_sr_reference_page_in_a_browser(browser, tmp_path):
    from selenium.webdriver.common.by import By

    from pipeline.cli import main

    lr, _, hr = _pictures()
    (tmp_path / "lr").mkdir()
    (tmp_path / "hr").mkdir()
    cv2.imwrite(str(tmp_path / "lr" / "a.png"), lr)
    cv2.imwrite(str(tmp_path / "hr" / "a.png"), hr)
    assert main(["sr", str(tmp_path / "lr"), str(tmp_path / "out"), "--model", "srcnn", "--scale", "3",
                 "--backend", "ort", "--reference", str(tmp_path / "hr"), "--quiet"]) == 0
    page = tmp_path / "out" / "reference-sheet.html"
    browser.set_window_size(*SIZES[1])
    browser.get(page.as_uri())
    labels = [s.get_attribute("aria-label") for s in browser.find_elements(By.CSS_SELECTOR, "input[type=range]")]
    assert labels and "bicubic on the left, srcnn on the right" in labels[0]  # the before/after an SR user wants
    assert any("bicubic on the left, ground truth on the right" in label for label in labels)
    assert any("srcnn on the left, ground truth on the right" in label for label in labels)
    assert not [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]


@needs_browser
def test_bench_page_from_the_bench_writer(browser, tmp_path):
    """The real bench writer's page: plots inline, speed-ups read as ratio and change and sort by the ratio, the
    machine facts first, a 20-column table that scrolls in its box instead of the page on a phone."""
    from selenium.webdriver.common.by import By

    from tests.test_report import _bench_doc

    doc = _bench_doc()
    page = report.write_bench(doc, tmp_path)["html"]
    for width, height in SIZES:
        browser.set_window_size(width, height)
        browser.get(page.as_uri())
        wide = browser.execute_script(
            "return document.documentElement.scrollWidth - document.documentElement.clientWidth")
        assert wide <= 0, f"horizontal scroll of {wide} px at {width}x{height}"
    plots = [i.get_attribute("src") for i in browser.find_elements(By.CSS_SELECTOR, "figure img")]
    assert len(plots) == len(doc["plots"]) > 0 and all(p.startswith("data:image/svg+xml;base64,") for p in plots)
    text = browser.find_element(By.TAG_NAME, "body").text
    assert text.index("CPU:") < text.index("Results")  # the machine facts at the top
    table = next(t for t in browser.find_elements(By.CSS_SELECTOR, "table")
                 if "speed-up" in [h.text for h in t.find_elements(By.TAG_NAME, "th")])
    headers = [h.text for h in table.find_elements(By.TAG_NAME, "th")]
    col = headers.index("speed-up")
    table.find_elements(By.TAG_NAME, "th")[col].click()
    cells = [r.find_elements(By.TAG_NAME, "td")[col].text for r in table.find_elements(By.CSS_SELECTOR, "tbody tr")]
    ratios = [float(c.split("x")[0]) for c in cells]
    assert all(re.fullmatch(r"\d+\.\d\dx \([+-]\d+ %\)", c) for c in cells), cells
    assert ratios == sorted(ratios) and ratios[0] < ratios[-1]
    assert not [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
