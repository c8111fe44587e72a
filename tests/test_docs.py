"""The README stays a short front page and every link in it, and between the docs/ pages, resolves (the site's own
build, `make docs`, checks the docs/ pages again with mkdocs --strict in CI)."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def slug(heading: str) -> str:
    """A heading's anchor as MkDocs' toc (and, for headings without punctuation runs, GitHub) writes it."""
    text = re.sub(r"[^\w\s-]", "", heading.replace("`", "")).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(page: Path) -> set[str]:
    body = FENCE.sub("", page.read_text())
    return {slug(m) for m in re.findall(r"^#{1,6}\s+(.*?)\s*$", body, re.M)}


def links(page: Path) -> list[str]:
    return [t for t in LINK.findall(FENCE.sub("", page.read_text())) if not re.match(r"[a-z]+:", t)]


def test_readme_is_a_short_front_page():
    text = README.read_text()
    lines = text.splitlines()
    assert len(lines) <= 200 and len(text) <= 15_000, (len(lines), len(text))
    head = "\n".join(lines[:15])
    assert "make demo" in head and "make test" in head
    # dated counts and timings live in docs/measurements.md, with their machine
    counts = [ln for ln in lines if re.search(r"\d+ (passed|skipped)|make test.*\d+(:\d\d| ?min)", ln)]
    assert not counts, counts


@pytest.mark.parametrize("page", [README, *sorted(DOCS.glob("*.md"))], ids=lambda p: p.name)
def test_every_relative_link_resolves(page):
    missing = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists() or anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            missing.append(target)
    assert not missing, missing


def test_the_slug_rule_matches_the_sites_anchors():
    assert slug("Kernels and TensorRT plugins (`plugins_trt/`)") == "kernels-and-tensorrt-plugins-plugins_trt"
    walk = "What runs for `sr IN OUT --precision auto`, and why"
    assert slug(walk) == "what-runs-for-sr-in-out-precision-auto-and-why"


def _built_site(tmp_path: Path) -> Path:
    """The site as `make docs` builds it, into tmp_path (mkdocs is a test tool; skipped where it is not installed)."""
    pytest.importorskip("mkdocs")
    import subprocess
    import sys

    site = tmp_path / "site"
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--quiet", "--site-dir", str(site)], cwd=ROOT,
                         env={**__import__("os").environ, "NO_MKDOCS_2_WARNING": "1"}, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return site


def test_the_site_works_opened_from_disk_and_wraps_long_code_lines(tmp_path):
    """Issue 67: opened as the README says (outputs/site/index.html, a file:// page), a link to `videos/` showed the
    browser's folder listing; every page link must name its .html file. Long code lines were cut at 1280 px."""
    site = _built_site(tmp_path)
    for page in sorted(set(site.glob("*.html")) - {site / "404.html"}):  # 404.html: a web server's, site-absolute
        hrefs = re.findall(r'href="([^"#]*)(?:#[^"]*)?"', page.read_text())
        local = [h for h in hrefs if h and not re.match(r"[a-z]+:", h)]
        folders = [h for h in local if h.endswith("/") or h in (".", "..")]
        assert not folders, (page.name, folders)
        assert all((page.parent / h).is_file() for h in local), (page.name, local)
    index = (site / "index.html").read_text()
    css = re.findall(r'href="(stylesheets/[^"]+\.css)"', index)
    assert css and any("pre-wrap" in (site / c).read_text() for c in css)


def test_setup_says_the_size_the_readme_says():
    """Issue 67: setup said "~6 GB" where the README said 7.2 GiB. The Makefile's SETUP_SIZE is the one figure; the
    setup message prints it and the README and the getting-started page repeat it."""
    make = (ROOT / "Makefile").read_text()
    (size,) = re.findall(r"^SETUP_SIZE := (.+)$", make, re.M)
    assert "$(SETUP_SIZE)" in next(ln for ln in make.splitlines() if "setup: installing" in ln)
    for page in (README, DOCS / "getting-started.md"):
        assert size in page.read_text(), page.name


def test_what_runs_and_why_names_at_most_five_files_and_each_call_is_theirs():
    """Issue 68: the architecture page answers "what runs for `sr IN OUT --precision auto`, and why" in at most five
    files; each numbered item's file exists and defines every call the item names (`name(...)`)."""
    page = (DOCS / "architecture.md").read_text()
    section = page[page.index("## What runs for"):page.index("Why this way")]
    assert 0 < len(set(re.findall(r"pipeline/[\w/]+\.py", section))) <= 5
    for item in re.split(r"\n\d\. ", section)[1:]:
        path = ROOT / re.search(r"\*\*`(pipeline/[\w/]+\.py)`\*\*", item).group(1)
        source = path.read_text()
        assert [n for n in re.findall(r"`(\w+)\(", item) if f"def {n}(" not in source] == [], path.name
