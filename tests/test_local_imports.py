"""Own-module imports sit at the top of modules (issue 61): a reader sees a module's dependencies there, and the
import layers check them. Only an import that keeps a heavy optional dependency lazy (PyTorch, PyAV, Ray, Triton's
client, Jinja2 for a bare Python) may stay inside a function, at most MAX_LOCAL of them over pipeline/, each with a
short comment that says why (on its line or the line above; a bare pointer such as "see above" says nothing once lines
move). Counted over the syntax tree."""
from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MAX_LOCAL = 20
OWN = ("pipeline", "models")
POINTER = re.compile(r"(see|as|same as|like)( the line)? above\.?|ditto\.?|idem\.?", re.IGNORECASE)


def _own(node: ast.Import | ast.ImportFrom) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").split(".")[0] in OWN
    return any(alias.name.split(".")[0] in OWN for alias in node.names)


def _why(here: str, above: str) -> bool:
    """A comment on the import's line, or a comment line above it, that is more than a pointer."""
    comment = here.split("#", 1)[1] if "#" in here else above[1:] if above.startswith("#") else ""
    return bool(comment.strip()) and not POINTER.fullmatch(comment.strip())


def local_imports(source: str) -> list[tuple[int, bool]]:
    """(line, has a why-comment) of each own-module import inside a function of `source`."""
    lines = source.splitlines()
    found = set()
    for fn in ast.walk(ast.parse(source)):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)) and _own(node):
                    here, above = lines[node.lineno - 1], lines[node.lineno - 2].strip() if node.lineno > 1 else ""
                    found.add((node.lineno, _why(here, above)))
    return sorted(found)


def _tree() -> dict[str, list[tuple[int, bool]]]:
    return {str(p.relative_to(REPO)): hits for p in sorted((REPO / "pipeline").rglob("*.py"))
            if (hits := local_imports(p.read_text()))}


def test_few_function_local_imports_of_our_modules():
    found = _tree()
    total = sum(len(v) for v in found.values())
    listing = "\n".join(f"{f}:{line}" for f, hits in found.items() for line, _ in hits)
    assert total <= MAX_LOCAL, f"{total} own-module imports inside functions (at most {MAX_LOCAL}):\n{listing}"


def test_each_local_import_says_why():
    silent = [f"{f}:{line}" for f, hits in _tree().items() for line, why in hits if not why]
    assert not silent, "own-module imports inside functions without a comment saying why:\n" + "\n".join(silent)


def test_the_count_sees_nested_and_relative_imports():
    src = ("import pipeline.errors\n"
           "def f():\n    from pipeline.sr import run  # PyTorch\n"
           "    def g():\n        from . import x\n"
           "        import models.registry\n"
           "    import numpy\n")
    assert local_imports(src) == [(3, True), (5, False), (6, False)]


def test_a_pointer_is_no_reason():
    src = ("def f():\n    # PyAV: only for clips\n    from pipeline.sr import video\n"
           "    from pipeline.bench import clip  # see above\n"
           "    from pipeline.bench import enc  # as above\n"
           "    from models.registry import run  # the registry imports PyTorch, like the line above\n")
    assert local_imports(src) == [(3, True), (4, False), (5, False), (6, True)]
