"""Which backend runs is asked of its descriptor, never read off its name: no code in pipeline/ (pipeline/serve/
included), scripts/ or models/ tests a backend's name against strings; only pipeline/backends/ (where the descriptors
live) may. Caught, each with a planted example below, in every scanned root, and a near miss that must pass:
- a comparison (`x == "torch"`, `x in ("ort", "trt")`, `case "trt":`), also through a constant that holds names
  (`x == TORCH`, `x in GPU`), whether a literal, a `frozenset({...})`/`set(...)`/`tuple(...)`, a dict's keys or a union
  (`A | B`), bound in the file or imported from another of ours (`from pipeline.x import GPU_NAMES`, `import
  pipeline.x as m; m.GPU_NAMES`, relative imports too);
- dispatch by name: a subscript or `.get`/`.pop`/`.setdefault`/`.index` of a name-keyed table (`{"trt": f}[name]`,
  `H[name]`, `H.get(name)`, `dict(trt=f)[name]`);
- startswith/endswith with a piece of a name (`"ort-"`, `"-trt"`, or a tuple of them);
- a pattern that spells one: a regular expression (`re.match(r"ort", x)`), an fnmatch or glob pattern
  (`fnmatch(x, "ort*")`, `path.match("*-trt")`);
- names offered to argparse (`choices=("trt", "ort")`)."""
from __future__ import annotations

import ast
import re
from collections.abc import Callable
from fnmatch import fnmatchcase
from pathlib import Path

import pytest

from pipeline.backends import NAMES

REPO = Path(__file__).resolve().parents[1]
SCANNED = ("pipeline", "scripts", "models")
EXEMPT = Path("pipeline/backends")
NAME_SET = frozenset(NAMES)
# the words names are made of ("ort", "trt", "cuda", "kernels", ...): a pattern spelling one
WORDS = {w for n in NAMES for w in n.split("-") if len(w) >= 3}
RE_CALLS = {"match", "fullmatch", "search", "compile", "findall", "finditer", "sub", "subn", "split"}
GLOB_CALLS = {"fnmatch", "fnmatchcase", "filter", "translate"}   # fnmatch's functions
PATH_GLOBS = {"match", "full_match", "glob", "rglob"}            # pathlib's (any receiver but `re`)
LOOKUPS = {"get", "pop", "setdefault", "index"}                  # a table read by key
COLLECTIONS = {"frozenset", "set", "tuple", "list", "sorted"}    # a call that keeps its argument's strings
# Constants whose strings mean something else that shares a backend's spelling (module.NAME: what they are)
OTHER_MEANINGS = {"pipeline.errors.EXTRA_OF": "optional packages by import name: 'torch' is PyTorch's package"}

# a module's dotted name -> (its source, whether it is a package's __init__), or None where it is not ours
Modules = Callable[[str], "tuple[str, bool] | None"]


def repo_module(name: str) -> tuple[str, bool] | None:
    path = REPO.joinpath(*name.split("."))
    for file, package in ((path.with_suffix(".py"), False), (path / "__init__.py", True)):
        if file.is_file():
            return file.read_text(), package
    return None


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and (base := _dotted(node.value)):
        return f"{base}.{node.attr}"
    return None


def _literals(node: ast.AST | None, constants: dict[str, set[str]]) -> set[str]:
    """The strings `node` spells: a literal; a tuple/list/set of them, a dict's keys, a frozenset(...)/set(...)/
    dict(k=...) call, a union; or a name (or module.NAME) bound to those in the file or imported into it."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return set().union(*(_literals(e, constants) for e in node.elts))
    if isinstance(node, ast.Dict):
        return set().union(*(_literals(k, constants) for k in node.keys))
    if isinstance(node, ast.BinOp):
        return _literals(node.left, constants) | _literals(node.right, constants)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        if node.func.id in COLLECTIONS and node.args:
            return _literals(node.args[0], constants)
        if node.func.id == "dict":
            return {k.arg for k in node.keywords if k.arg} | set().union(*(_literals(a, constants) for a in node.args))
    if isinstance(node, (ast.Name, ast.Attribute)):
        return constants.get(_dotted(node) or "", set()) or (
            constants.get(node.attr, set()) if isinstance(node, ast.Attribute) else set())
    return set()


class Scanner:
    """Finds the tests of backend names in sources; a module's constants (names bound to backend names) are read
    once, so imported ones count too."""

    def __init__(self, modules: Modules = repo_module):
        self.modules = modules
        self.memo: dict[str, dict[str, set[str]]] = {}

    def module_constants(self, name: str) -> dict[str, set[str]]:
        if name not in self.memo:
            self.memo[name] = {}  # an import cycle reads what is known so far
            found = self.modules(name)
            if found is not None:
                self.memo[name] = self.constants(ast.parse(found[0]), name, found[1])
        return self.memo[name]

    def _imported(self, node: ast.Import | ast.ImportFrom, module: str, package: bool) -> dict[str, set[str]]:
        found: dict[str, set[str]] = {}
        if isinstance(node, ast.Import):
            for alias in node.names:
                bound = alias.asname or alias.name
                found.update({f"{bound}.{k}": v for k, v in self.module_constants(alias.name).items()})
            return found
        base = node.module or ""
        if node.level:
            parts = module.split(".")[:len(module.split(".")) - (node.level - 1) - (0 if package else 1)]
            base = ".".join(parts + ([node.module] if node.module else []))
        source = self.module_constants(base)
        for alias in node.names:
            bound = alias.asname or alias.name
            if alias.name in source:
                found[bound] = source[alias.name]
            found.update({f"{bound}.{k}": v for k, v in self.module_constants(f"{base}.{alias.name}").items()})
        return found

    def constants(self, tree: ast.AST, module: str, package: bool = False) -> dict[str, set[str]]:
        """Names bound to a backend name or a collection holding one (`TORCH = "torch"`, `GPU = frozenset({"trt"})`,
        `H = {"trt": f}`), in the file's order (`ALL = GPU | CPU` sees both), and those imported from our modules."""
        found: dict[str, set[str]] = {}
        nodes = list(ast.walk(tree))
        for node in nodes:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found.update(self._imported(node, module, package))
        assigns = [n for n in nodes if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None]
        for node in sorted(assigns, key=lambda n: (n.lineno, n.col_offset)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            strings = _literals(node.value, found) & NAME_SET
            for target in targets:
                if isinstance(target, ast.Name) and strings and f"{module}.{target.id}" not in OTHER_MEANINGS:
                    found[target.id] = strings
        return found

    def comparisons(self, source: str, module: str = "planted", package: bool = False) -> list[tuple[int, str]]:
        """(line, code) of each test of a backend name against strings in `source` (the module `module`)."""
        tree = ast.parse(source)
        constants = self.constants(tree, module, package)
        return sorted({(node.lineno, ast.unparse(node)) for node in ast.walk(tree) if _offending(node, constants)})


def _piece(s: str, method: str) -> bool:
    """A string that starts (startswith) or ends (endswith) a backend name and holds more than a letter or two of
    it: "ort-", "-trt", "cuda" for endswith; "cuda" for startswith is a device, not a name."""
    return len(s.strip("-")) >= 3 and any(getattr(n, method)(s) for n in NAMES)


def _spells_a_name(pattern: str) -> bool:
    return any(re.search(rf"(?<![A-Za-z0-9_]){re.escape(w)}(?![A-Za-z0-9_])", pattern) for w in WORDS)


def _glob_spells(pattern: str) -> bool:
    """A glob pattern that spells a name's word or matches a name (`o?t*`); a bare `*` matches everything, no name."""
    return _spells_a_name(pattern) or bool(pattern.strip("*?")) and any(fnmatchcase(n, pattern) for n in NAMES)


def _call_offends(node: ast.Call, constants: dict[str, set[str]]) -> bool:
    if any(k.arg == "choices" and _literals(k.value, constants) & NAME_SET for k in node.keywords):
        return True
    func, args = node.func, [_literals(a, constants) for a in node.args]
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
    receiver = _dotted(func.value) if isinstance(func, ast.Attribute) else None
    if name in LOOKUPS and isinstance(func, ast.Attribute) and _literals(func.value, constants) & NAME_SET:
        return True
    if not args:
        return False
    if name in ("startswith", "endswith"):
        return bool(args[0] & NAME_SET) or any(_piece(s, name) for s in args[0])
    if name in RE_CALLS and receiver == "re":
        return any(_spells_a_name(s) for s in args[0])
    if name in GLOB_CALLS and receiver in (None, "fnmatch") or name in PATH_GLOBS and receiver != "re":
        return any(_glob_spells(s) for strings in args for s in strings)
    return False


def _offending(node: ast.AST, constants: dict[str, set[str]]) -> bool:
    if isinstance(node, ast.Compare):
        return any(_literals(side, constants) & NAME_SET for side in [node.left, *node.comparators])
    if isinstance(node, ast.MatchValue):
        return bool(_literals(node.value, constants) & NAME_SET)
    if isinstance(node, ast.Subscript):  # a name-keyed table read by key
        return bool(_literals(node.value, constants) & NAME_SET)
    return isinstance(node, ast.Call) and _call_offends(node, constants)


def _module_name(rel: Path) -> tuple[str, bool]:
    parts = rel.with_suffix("").parts
    return (".".join(parts[:-1]), True) if parts[-1] == "__init__" else (".".join(parts), False)


def offences(rel: Path, source: str, scanner: Scanner) -> list[tuple[int, str]]:
    """What the guard finds in the file at `rel` (relative to the repository) holding `source`: nothing under
    pipeline/backends/, where the descriptors are."""
    if rel.is_relative_to(EXEMPT):
        return []
    return scanner.comparisons(source, *_module_name(rel))


def _files():
    for top in SCANNED:
        for path in sorted((REPO / top).rglob("*.py")):
            yield path.relative_to(REPO), path


def test_no_backend_name_is_tested_against_strings_outside_backends():
    scanner = Scanner()
    found = [f"{rel}:{line}: {code}" for rel, path in _files() for line, code in offences(rel, path.read_text(),
                                                                                          scanner)]
    assert found == []


def test_the_scan_covers_serve_scripts_and_models():
    scanned = {rel.parts[0] if rel.parts[1] != "serve" else "pipeline/serve" for rel, _ in _files()}
    assert scanned == {*SCANNED, "pipeline/serve"}


# Planted modules the examples import from, in each root's package: one binds backend names, one precisions (the
# near miss)
PLANTED_SOURCES = {"planted_names": 'GPU_NAMES = frozenset({"trt", "ort-cuda"})\nHANDLERS = {"trt": 1, "ort": 2}\n',
                   "planted_precisions": 'LOW = frozenset({"bf16", "int8"})\n'}
PLANTED_PACKAGES = ("pipeline", "pipeline.serve", "scripts", "models")
PLANTED = {f"{pkg}.{mod}": src for pkg in PLANTED_PACKAGES for mod, src in PLANTED_SOURCES.items()}


def planted_modules(name: str) -> tuple[str, bool] | None:
    return (PLANTED[name], False) if name in PLANTED else repo_module(name)


# form: (source the guard must flag, its near miss that must pass)
FORMS = {
    "a plain literal": ('if backend == "torch":\n    pass\n', 'if precision == "fp32":\n    pass\n'),
    "a literal in a tuple": ('ok = name not in (None, "ort-folded")\n', 'ok = p not in (None, "int8")\n'),
    "a match case": ('match b:\n    case "trt":\n        pass\n', 'match p:\n    case "fp16":\n        pass\n'),
    "startswith a prefix": ('gpu = name.startswith("ort-")\n', 'gpu = device.startswith("cuda")\n'),
    "endswith a suffix": ('engine = name.endswith("-trt")\n', 'engine = path.endswith(".onnx")\n'),
    "endswith a tuple of pieces": ('gpu = name.endswith(("-cuda", "-trt"))\n', 'f = p.endswith((".png", ".jpg"))\n'),
    "in a constant of names": ('GPU = ("torch", "trt")\nif name in GPU:\n    pass\n',
                               'LOW = ("bf16", "int8")\nif p in LOW:\n    pass\n'),
    "equal to a constant": ('TORCH = "torch"\nif name == TORCH:\n    pass\n', 'FP = "fp32"\nif p == FP:\n    pass\n'),
    "a regular expression": ('import re\nif re.match(r"ort", name):\n    pass\n',
                             'import re\nm = re.match(r"import (\\w+)", line)\n'),
    "a frozenset constant": ('GPU = frozenset({"trt", "ort-cuda"})\nok = name in GPU\n',
                             'LOW = frozenset({"bf16", "int8"})\nok = p in LOW\n'),
    "a set() constant": ('GPU = set(["trt"])\nok = name in GPU\n', 'LOW = set(["int8"])\nok = p in LOW\n'),
    "a union of constants": ('A = frozenset({"trt"})\nB = A | {"torch"}\nok = name in B\n',
                             'A = frozenset({"int8"})\nB = A | {"bf16"}\nok = p in B\n'),
    "a dict literal dispatched": ('f = {"trt": build, "ort": load}[name]\n', 'f = {"fp32": a, "int8": b}[p]\n'),
    "a dict constant dispatched": ('H = {"trt": build, "ort": load}\nf = H[name]\n',
                                   'H = {"fp32": a, "int8": b}\nf = H[p]\n'),
    "dict() dispatched": ('H = dict(trt=build, torch=run)\nf = H[name]\n', 'H = dict(fp32=a, int8=b)\nf = H[p]\n'),
    "a .get dispatch": ('H = {"trt": build}\nf = H.get(name, default)\n', 'H = {"fp32": a}\nf = H.get(p, default)\n'),
    "fnmatch": ('from fnmatch import fnmatch\nok = fnmatch(name, "ort*")\n',
                'from fnmatch import fnmatch\nok = fnmatch(path, "*.onnx")\n'),
    "fnmatch.fnmatchcase": ('import fnmatch\nok = fnmatch.fnmatchcase(name, "*-trt")\n',
                            'import fnmatch\nok = fnmatch.fnmatchcase(name, "sorted*")\n'),
    "a glob pattern that matches a name": ('import fnmatch\ngpu = fnmatch.filter(names, "o?t-c*")\n',
                                           'import fnmatch\nall_ = fnmatch.filter(names, "*")\n'),
    "a path pattern": ('ok = Path(name).match("*-trt")\n', 'ok = Path(name).match("*.onnx")\n'),
    "argparse choices": ('p.add_argument("--backend", choices=("trt", "ort"))\n',
                         'p.add_argument("--kind", choices=("gpu", "cpu"))\n'),
    "choices from a constant": ('SERVED = ["trt", "ort"]\np.add_argument("--backend", choices=SERVED)\n',
                                'KINDS = ["gpu", "cpu"]\np.add_argument("--kind", choices=KINDS)\n'),
    "an imported constant": ('from pipeline.planted_names import GPU_NAMES\nok = name in GPU_NAMES\n',
                             'from pipeline.planted_precisions import LOW\nok = p in LOW\n'),
    "an imported constant, renamed": ('from pipeline.planted_names import GPU_NAMES as G\nok = name not in G\n',
                                      'from pipeline.planted_precisions import LOW as L\nok = p not in L\n'),
    "a module's constant": ('import pipeline.planted_names as n\nok = name in n.GPU_NAMES\n',
                            'import pipeline.planted_precisions as n\nok = p in n.LOW\n'),
    "an imported table dispatched": ('from pipeline.planted_names import HANDLERS\nf = HANDLERS.get(name)\n',
                                     'from pipeline.planted_precisions import LOW\nf = sorted(LOW)\n'),
    "a relative import": ('from .planted_names import GPU_NAMES\nok = name in GPU_NAMES\n',
                          'from .planted_precisions import LOW\nok = p in LOW\n'),
}
ROOTS = ("pipeline", "pipeline/serve", "scripts", "models")


@pytest.mark.parametrize("root", ROOTS)
def test_each_form_is_caught_in_each_root(root):
    scanner = Scanner(planted_modules)
    missed = [form for form, (src, _) in FORMS.items() if not offences(Path(root, "planted.py"), src, scanner)]
    assert missed == []


@pytest.mark.parametrize("root", ROOTS)
def test_each_near_miss_passes_in_each_root(root):
    scanner = Scanner(planted_modules)
    flagged = {form: found for form, (_, near) in FORMS.items()
               if (found := offences(Path(root, "planted.py"), near, scanner))}
    assert flagged == {}


def test_a_relative_import_resolves_from_its_own_package():
    """From pipeline/serve/deeper/, `.planted_names` is pipeline.serve.deeper.planted_names (none: nothing to flag)
    and `..planted_names` pipeline.serve's (flagged)."""
    scanner = Scanner(planted_modules)
    src, _ = FORMS["a relative import"]
    assert offences(Path("pipeline/serve/deeper/planted.py"), src, scanner) == []
    assert offences(Path("pipeline/serve/deeper/planted.py"), src.replace("from .", "from .."), scanner) != []
    assert offences(Path("pipeline/serve/__init__.py"), src, scanner) != []  # a package's own: pipeline.serve's


def test_only_pipeline_backends_is_exempt():
    scanner = Scanner(planted_modules)
    assert all(offences(Path("pipeline/backends/planted.py"), src, scanner) == [] for src, _ in FORMS.values())


@pytest.mark.parametrize("qualified", OTHER_MEANINGS)
def test_each_other_meaning_is_still_there_and_spells_a_name(qualified):
    """An entry that no longer exists or holds no name's spelling is stale: remove it."""
    module, name = qualified.rsplit(".", 1)
    source, package = repo_module(module) or ("", False)
    assert Scanner().constants(ast.parse(source), "elsewhere", package).get(name)


def test_what_asks_the_descriptor_passes():
    source = '''
fine = precision == "fp32" or backend_class(name).DESCRIPTOR.runs_weights
served = {d.name: d for d in descriptors() if d.triton}
f = served[name]; g = served.get(name)
p.add_argument("--backend", choices=tuple(served))
s.startswith("t")
'''
    assert Scanner(planted_modules).comparisons(source) == []
