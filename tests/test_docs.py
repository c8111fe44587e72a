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
