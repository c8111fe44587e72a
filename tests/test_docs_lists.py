"""Lists the docs repeat stay true: what `make lint` runs, as README.md and docs/architecture.md say it, is the
Makefile's lint recipe, step for step; docs/architecture.md's layout names every file in scripts/ and no other."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# each lint step: a word of its recipe line -> how the docs name it
STEPS = {"ruff": "ruff", "mypy": "mypy", "lint-imports": "import layers", "check_function_length.py": "function-length",
         "test_local_imports.py": "test_local_imports.py", "test_backend_names.py": "test_backend_names.py",
         "clang-format": "clang-format"}
DESCRIPTIONS = {"README.md": re.compile(r"`make lint` runs "), "docs/architecture.md": re.compile(r"`make lint` = ")}


def lint_recipe(makefile: str) -> list[str]:
    """The lint target's recipe lines."""
    lines = makefile.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("lint:"))
    recipe = []
    for line in lines[start + 1:]:
        if not line.startswith("\t"):
            break
        recipe.append(line.strip())
    return recipe


def recipe_steps(recipe: list[str]) -> tuple[set[str], list[str]]:
    """(the steps the recipe runs, named as the docs name them; its lines that are no known step)."""
    named = {line: {name for word, name in STEPS.items() if word in line} for line in recipe}
    return set().union(*named.values()), [line for line, names in named.items() if not names]


def first_clause(text: str) -> str:
    """`text` up to its first `;` or `. ` outside parentheses and backticks."""
    depth, code = 0, False
    for i, ch in enumerate(text):
        code = not code if ch == "`" else code
        depth += (ch == "(") - (ch == ")") if not code else 0
        if depth == 0 and not code and (ch == ";" or text.startswith(". ", i)):
            return text[:i]
    return text


def described_steps(page: str, start: re.Pattern) -> set[str]:
    text = " ".join((REPO / page).read_text().split())
    match = start.search(text)
    assert match, f"{page} no longer says what `make lint` runs where this test looks ({start.pattern!r})"
    clause = first_clause(text[match.end():])
    return {name for name in STEPS.values() if name in clause}


def test_every_lint_step_is_known():
    steps, unknown = recipe_steps(lint_recipe((REPO / "Makefile").read_text()))
    assert unknown == [], "a lint step this test does not know: add it to STEPS and describe it in the docs"
    assert steps == set(STEPS.values())


def test_the_docs_say_what_make_lint_runs():
    steps, _ = recipe_steps(lint_recipe((REPO / "Makefile").read_text()))
    said = {page: described_steps(page, start) for page, start in DESCRIPTIONS.items()}
    assert said == {page: steps for page in DESCRIPTIONS}


def test_a_missing_or_extra_step_is_seen():
    recipe = ["$(PY) -m ruff check .", "$(PY) -m mypy", "$(PY) scripts/new_check.py"]
    assert recipe_steps(recipe) == ({"ruff", "mypy"}, ["$(PY) scripts/new_check.py"])
    clause = first_clause("ruff, mypy (on a; b) and `x; y` clang-format; `make test` runs the import layers")
    assert {n for n in STEPS.values() if n in clause} == {"ruff", "mypy", "clang-format"}


def test_the_layout_names_every_script():
    text = (REPO / "docs/architecture.md").read_text()
    block = re.search(r"^scripts/ (.*?)^tests/", text, re.S | re.M)
    assert block, "docs/architecture.md's layout has no scripts/ entry"
    named = set(re.findall(r"[\w-]+\.(?:py|sh)\b", block.group(1)))
    tracked = subprocess.run(["git", "ls-files", "scripts"], cwd=REPO, capture_output=True, text=True, check=True)
    files = {Path(p).name for p in tracked.stdout.split()}
    assert named == files
