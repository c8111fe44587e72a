"""Which backend runs is asked of its descriptor, never read off its name: no comparison of a backend name with a
string literal outside pipeline/backends/ and pipeline/serve/ (Triton's repository format names its own two)."""
from __future__ import annotations

import ast
from pathlib import Path

from pipeline.backends import NAMES

ROOT = Path(__file__).resolve().parents[1] / "pipeline"
ALLOWED = ("backends", "serve")


def _literals(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return set().union(*(_literals(e) for e in node.elts)) if node.elts else set()
    return set()


def name_comparisons(source: str) -> list[tuple[int, str]]:
    """(line, code) of each comparison of a backend name with a literal: `x == "torch"`, `x in ("ort", "trt")`,
    `x.startswith("ort")`, `case "trt":`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in ("startswith", "endswith"):
            sides = node.args
        elif isinstance(node, ast.MatchValue):
            sides = [node.value]
        else:
            continue
        if any(_literals(side) & set(NAMES) for side in sides):
            found.append((node.lineno, ast.unparse(node)))
    return found


def test_no_backend_name_is_compared_with_a_literal_outside_backends_and_serve():
    found = [f"{path.relative_to(ROOT.parent)}:{line}: {code}"
             for path in sorted(ROOT.rglob("*.py")) if path.relative_to(ROOT).parts[0] not in ALLOWED
             for line, code in name_comparisons(path.read_text())]
    assert found == []


def test_the_check_catches_each_kind_of_comparison():
    source = '''
if backend == "torch":
    pass
ok = name not in (None, "ort-folded")
gpu = v.name.startswith("ort")
match b:
    case "trt":
        pass
fine = precision == "fp32" or backend_class(name).DESCRIPTOR.runs_weights
'''
    assert [line for line, _ in name_comparisons(source)] == [2, 4, 5, 7]
