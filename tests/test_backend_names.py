"""Which backend runs is asked of its descriptor, never read off its name: no test of a backend name against a
string outside pipeline/backends/ and pipeline/serve/ (Triton's repository format names its own two), in
pipeline/, scripts/ and models/. Caught: a comparison with a name (`x == "torch"`, `x in ("ort", "trt")`,
`case "trt":`), a comparison through a constant that holds names (`x == TORCH`, `x in GPU`), startswith/endswith
with a piece of a name (`"ort-"`, `"-trt"`, or a tuple of them) and a regular expression that spells one
(`re.match(r"ort", x)`)."""
from __future__ import annotations

import ast
import re
from pathlib import Path

from pipeline.backends import NAMES

REPO = Path(__file__).resolve().parents[1]
SCANNED = ("pipeline", "scripts", "models")
ALLOWED = (Path("pipeline/backends"), Path("pipeline/serve"))
# the words names are made of ("ort", "trt", "cuda", "sr", "kernels", ...): a regular expression spelling one
WORDS = {w for n in NAMES for w in n.split("-") if len(w) >= 3}
RE_CALLS = {"match", "fullmatch", "search", "compile", "findall", "finditer", "sub", "subn", "split"}


def _literals(node: ast.AST, constants: dict[str, set[str]]) -> set[str]:
    """The strings `node` spells: a literal, a tuple/list/set of them, or a name bound to those in the file."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return set().union(*(_literals(e, constants) for e in node.elts)) if node.elts else set()
    if isinstance(node, ast.Name):
        return constants.get(node.id, set())
    if isinstance(node, ast.Attribute):  # module.CONSTANT
        return constants.get(node.attr, set())
    return set()


def _constants(tree: ast.AST) -> dict[str, set[str]]:
    """Names assigned a backend name or a collection holding one (`TORCH = "torch"`, `GPU = ("torch", "trt")`)."""
    found: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
            if isinstance(node, ast.AnnAssign) and node.value is not None else []
        for target in targets:
            if isinstance(target, ast.Name) and (strings := _literals(node.value, {}) & set(NAMES)):
                found[target.id] = strings
    return found


def _piece(s: str, method: str) -> bool:
    """A string that starts (startswith) or ends (endswith) a backend name and holds more than a letter or two of
    it: "ort-", "-trt", "cuda" for endswith; "cuda" for startswith is a device, not a name."""
    return len(s.strip("-")) >= 3 and any(getattr(n, method)(s) for n in NAMES)


def _spells_a_name(pattern: str) -> bool:
    return any(re.search(rf"(?<![A-Za-z0-9_]){re.escape(w)}(?![A-Za-z0-9_])", pattern) for w in WORDS)


def _offending(node: ast.AST, constants: dict[str, set[str]]) -> bool:
    if isinstance(node, ast.Compare):
        return any(_literals(side, constants) & set(NAMES) for side in [node.left, *node.comparators])
    if isinstance(node, ast.MatchValue):
        return bool(_literals(node.value, constants) & set(NAMES))
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args):
        return False
    if node.func.attr in ("startswith", "endswith"):
        strings = _literals(node.args[0], constants)
        return bool(strings & set(NAMES)) or any(_piece(s, node.func.attr) for s in strings)
    if node.func.attr in RE_CALLS and isinstance(node.func.value, ast.Name) and node.func.value.id == "re":
        return any(_spells_a_name(s) for s in _literals(node.args[0], {}))
    return False


def name_comparisons(source: str) -> list[tuple[int, str]]:
    """(line, code) of each test of a backend name against a string in `source`."""
    tree = ast.parse(source)
    constants = _constants(tree)
    return sorted({(node.lineno, ast.unparse(node)) for node in ast.walk(tree) if _offending(node, constants)})


def _files():
    for top in SCANNED:
        for path in sorted((REPO / top).rglob("*.py")):
            rel = path.relative_to(REPO)
            if not any(rel.is_relative_to(a) for a in ALLOWED):
                yield rel, path


def test_no_backend_name_is_tested_against_a_string_outside_backends_and_serve():
    found = [f"{rel}:{line}: {code}" for rel, path in _files() for line, code in name_comparisons(path.read_text())]
    assert found == []


def test_the_scan_covers_scripts_and_models():
    scanned = {rel.parts[0] for rel, _ in _files()}
    assert scanned == set(SCANNED)


EXAMPLES = {
    "a plain literal": 'if backend == "torch":\n    pass\n',
    "a literal in a tuple": 'ok = name not in (None, "ort-folded")\n',
    "a match case": 'match b:\n    case "trt":\n        pass\n',
    "startswith a prefix": 'gpu = name.startswith("ort-")\n',
    "endswith a suffix": 'engine = name.endswith("-trt")\n',
    "endswith a tuple of pieces": 'gpu = name.endswith(("-cuda", "-trt"))\n',
    "in a constant of names": 'GPU = ("torch", "trt")\nif name in GPU:\n    pass\n',
    "a regular expression": 'import re\nif re.match(r"ort", name):\n    pass\n',
    "equal to a constant": 'TORCH = "torch"\nif name == TORCH:\n    pass\n',
}


def test_each_form_is_caught():
    missed = [what for what, src in EXAMPLES.items() if not name_comparisons(src)]
    assert missed == []


def test_what_asks_the_descriptor_or_is_no_name_passes():
    source = '''
import re
fine = precision == "fp32" or backend_class(name).DESCRIPTOR.runs_weights
path.endswith(".onnx"); device.startswith("cuda"); s.startswith("t")
re.match(r"import (\\w+)", line)
PRECISIONS = ("fp32", "fp16")
if p in PRECISIONS:
    pass
'''
    assert name_comparisons(source) == []
