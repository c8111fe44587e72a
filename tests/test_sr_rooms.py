"""pipeline/sr/runner/ holds only the run's parts: a module there that only video/ imports does video work and belongs
in video/ (the import layers say which way imports run, not where a module lives). Counted over the syntax tree of
pipeline/, imports inside functions included; docs/architecture.md's layout names every module of both rooms."""
from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOMS = ("runner", "video")


def imported_modules(source: str) -> set[str]:
    """The dotted names `source` imports (a `from a.b import c` counts a.b and a.b.c: c may be a module)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return found


def importers(sources: dict[str, str]) -> dict[str, set[str]]:
    """module -> the modules (of `sources`: dotted name -> source) that import it."""
    out: dict[str, set[str]] = {}
    for name, source in sources.items():
        for target in imported_modules(source):
            out.setdefault(target, set()).add(name)
    return out


def only_video_uses(room: str, sources: dict[str, str]) -> list[str]:
    """The modules of `room` (a package) that are imported, and only from pipeline.sr.video."""
    users = importers(sources)
    mods = [m for m in sources if m.startswith(f"{room}.")]
    return [m for m in mods if users.get(m) and all(u.startswith("pipeline.sr.video.") for u in users[m])]


def _pipeline_sources() -> dict[str, str]:
    out = {}
    for path in sorted((REPO / "pipeline").rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path.read_text()
    return out


def test_runner_holds_only_the_runs_parts():
    assert only_video_uses("pipeline.sr.runner", _pipeline_sources()) == []


def test_a_module_only_video_imports_is_found():
    sources = {"pipeline.sr.runner.meter": "X = 1\n", "pipeline.sr.runner.jobs": "Y = 1\n",
               "pipeline.sr.video.clip": ("from pipeline.sr.runner.meter import X\n"
                                          "from pipeline.sr.runner import jobs\n"),
               "pipeline.sr.local": "def f():\n    from pipeline.sr.runner.jobs import Y\n"}
    assert only_video_uses("pipeline.sr.runner", sources) == ["pipeline.sr.runner.meter"]


def test_the_layout_names_every_module_of_both_rooms():
    text = (REPO / "docs/architecture.md").read_text()
    for room in ROOMS:
        block = re.search(rf"^    {room}/ (.*?)^ {{0,4}}\S", text, re.S | re.M)
        assert block, f"docs/architecture.md's layout has no {room}/ entry"
        modules = {p.stem for p in (REPO / "pipeline/sr" / room).glob("*.py")} - {"__init__"}
        missing = {m for m in modules if not re.search(rf"\b{m}\b", block.group(1))}
        assert missing == set(), f"{room}/: {sorted(missing)} not in the layout"
