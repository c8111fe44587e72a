"""Every TensorRT Python name our code uses must exist in TensorRT 11.4.

TensorRT cannot be imported here (no GPU libraries), but the `tensorrt-cu13-bindings` wheel is installed and
its pybind11 extension module holds, as C strings, the name of every class, method, property and enum
member it binds. The collector below walks our modules with `ast`: it follows values that come from the
`tensorrt` module (trt.Builder(...) -> builder -> builder.create_network(...) -> network ...) and records
every attribute used on them; each must appear in the binary's strings (or the package's __init__.py).
"""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCANNED_DIRS = ("pipeline", "models", "scripts")


# -- the TensorRT 11.4 name set ------------------------------------------------------------------------
def bindings_dir() -> Path | None:
    for entry in map(Path, sys.path):
        for name in ("tensorrt_bindings", "tensorrt"):
            d = entry / name
            if d.is_dir() and list(d.glob("tensorrt*.so")):
                return d
    return None


def binary_names(so_file: Path) -> tuple[set[str], set[str]]:
    """(identifier tokens anywhere in the binary's strings, identifiers that are whole C strings).

    The linker merges string literals that are suffixes of others ("INPUT" lives inside
    "CONDITIONAL_INPUT\\0", "Logger" inside "ILogger\\0"), so a name may only exist as the tail of a
    whole string; `exists` below accepts that, and nothing looser."""
    data = so_file.read_bytes()
    tokens = set(m.decode() for m in re.findall(rb"[A-Za-z_][A-Za-z0-9_]*", data))
    whole = set(m.decode() for m in re.findall(rb"(?<=\x00)[A-Za-z_][A-Za-z0-9_]*(?=\x00)", data))
    return tokens, whole


def python_names(init_file: Path) -> set[str]:
    """Names the package's pure-Python __init__.py adds (e.g. __version__, volume, nptype)."""
    tree = ast.parse(init_file.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
    return names


class TrtNames:
    def __init__(self, tokens: set[str], whole: set[str], extra: set[str]):
        self.tokens = tokens | extra
        self.suffixes = {w[i:] for w in whole for i in range(len(w))}

    def exists(self, name: str) -> bool:
        return name in self.tokens or name in self.suffixes


@pytest.fixture(scope="module")
def trt_names() -> TrtNames:
    d = bindings_dir()
    if d is None:
        pytest.fail("tensorrt-cu13-bindings is not installed: `.venv/bin/pip install -e '.[test]'`")
    so = sorted(d.glob("tensorrt*.so"))[0]
    init = d / "__init__.py"
    version = re.search(r'__version__\s*=\s*"([^"]+)"', init.read_text())
    assert version and version.group(1).startswith("11.4"), f"expected the TensorRT 11.4 bindings, got {version}"
    tokens, whole = binary_names(so)
    return TrtNames(tokens, whole, python_names(init))


# -- the collector -----------------------------------------------------------------------------------
def _annotate_scopes(tree: ast.AST) -> None:
    """node._scope = the innermost enclosing function (0 = module), so locals of different functions
    (e.g. argparse's `parser` and TensorRT's `parser`) are never confused."""
    def visit(node, scope):
        node._scope = scope
        inner = id(node) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) else scope
        for child in ast.iter_child_nodes(node):
            visit(child, inner)
    visit(tree, 0)


def _key(expr):
    """(scope, 'x') for a local name; ('self', 'self.engine') for an attribute chain (instance state is
    shared by the methods of a class); None otherwise."""
    if isinstance(expr, ast.Name):
        return (expr._scope, expr.id)
    if isinstance(expr, ast.Attribute):
        chain, node = [expr.attr], expr.value
        while isinstance(node, ast.Attribute):
            chain.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name):
            return ("attr", ".".join([node.id, *reversed(chain)]))
    return None


class TrtUseCollector:
    """Attribute names used on the tensorrt module and on values derived from it, per file."""

    def __init__(self, tree: ast.AST):
        _annotate_scopes(tree)
        self.tree = tree
        self.aliases: set[str] = set()
        self.direct: set[str] = set()  # from tensorrt import X
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name == "tensorrt":
                        self.aliases.add(a.asname or a.name)
            elif isinstance(node, ast.ImportFrom) and node.module == "tensorrt":
                for a in node.names:
                    self.direct.add(a.name)
                    self.aliases.add(a.asname or a.name)
        self.tainted: set = set()
        self.locals: dict[int, set[str]] = {}  # scope -> parameters and assigned names (they shadow globals)
        for node in ast.walk(tree):
            if isinstance(node, ast.arg):
                self.locals.setdefault(node._scope, set()).add(node.arg)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node._scope:
                self.locals.setdefault(node._scope, set()).add(node.id)

    def is_tainted(self, expr) -> bool:
        if isinstance(expr, ast.Name):
            if expr.id in self.aliases or (expr._scope, expr.id) in self.tainted:
                return True
            # a module-level value used inside a function, unless a local of that function shadows it
            return expr.id not in self.locals.get(expr._scope, ()) and (0, expr.id) in self.tainted
        if isinstance(expr, ast.Attribute):
            return _key(expr) in self.tainted or self.is_tainted(expr.value)
        if isinstance(expr, ast.Call):
            return self.is_tainted(expr.func)
        return False

    def _assign(self, target, value) -> bool:
        if isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)) \
                and len(target.elts) == len(value.elts):
            return any([self._assign(t, v) for t, v in zip(target.elts, value.elts, strict=True)])
        k = _key(target)
        if k is not None and k not in self.tainted and self.is_tainted(value):
            self.tainted.add(k)
            return True
        return False

    def propagate(self) -> None:
        """Fixed point: a method may use self.x that a method further down assigns."""
        changed = True
        while changed:
            changed = False
            for node in ast.walk(self.tree):
                if isinstance(node, ast.Assign):
                    for t in node.targets:
                        changed |= self._assign(t, node.value)
                elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
                    changed |= self._assign(node.target, node.value)

    def used(self) -> list[tuple[str, int]]:
        if not self.aliases:
            return []
        self.propagate()
        out = [(n, 0) for n in sorted(self.direct)]
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Attribute) and self.is_tainted(node.value):
                out.append((node.attr, node.lineno))
        return out


def collect(source: str) -> list[tuple[str, int]]:
    return TrtUseCollector(ast.parse(source)).used()


def our_trt_modules() -> list[Path]:
    files = []
    for d in SCANNED_DIRS:
        for f in sorted((REPO / d).rglob("*.py")) if (REPO / d).is_dir() else []:
            text = f.read_text(errors="replace")
            if re.search(r"^\s*(import tensorrt\b|from tensorrt\b)", text, re.M):
                files.append(f)
    return files


# -- tests -------------------------------------------------------------------------------------------
def test_our_tensorrt_calls_exist_in_trt_11_4(trt_names):
    files = our_trt_modules()
    rel = {f.relative_to(REPO).as_posix() for f in files}
    assert {"pipeline/engine/build.py", "pipeline/backends/trt_backend.py"} <= rel, rel
    missing, seen = [], set()
    for f in files:
        for name, line in collect(f.read_text()):
            seen.add(name)
            if not trt_names.exists(name):
                missing.append(f"{f.relative_to(REPO)}:{line}: {name}")
    assert not missing, "names not in TensorRT 11.4: " + ", ".join(missing)
    # The collector really followed our objects through builder/network/config/context.
    for expected in ("Builder", "OnnxParser", "create_network", "create_builder_config", "set_memory_pool_limit",
                     "builder_optimization_level", "create_optimization_profile", "set_shape", "set_shape_input",
                     "build_serialized_network", "get_plugin_registry", "load_library", "Runtime",
                     "deserialize_cuda_engine", "create_execution_context", "set_input_shape", "set_tensor_address",
                     "execute_async_v3", "set_optimization_profile_async", "get_tensor_shape", "IProgressMonitor"):
        assert expected in seen, f"collector did not see {expected}"


def test_scanner_catches_bogus_names(trt_names):
    src = '''
import tensorrt as trt
logger = trt.Logger(trt.Logger.WARNING)
builder = trt.Builder(logger)
network = builder.create_network(0)
network.add_bogus_layer_zz(1)
class Runner:
    def run(self):
        ctx, s = self.context, 1
        ctx.execute_async_v4(s)          # TRT has v3, not v4
        self.context.enqueue_v9(s)
    def load(self):
        self.engine = trt.Runtime(logger).deserialize_cuda_engine(b"")
        self.context = self.engine.create_execution_context()
        self.engine.num_io_tensorz
flag = trt.NetworkDefinitionCreationFlag.EXTRA_FAST_MODE
def unrelated(network, parser):
    parser.add_argument("--x")           # a local of another function, not TensorRT's: not checked
    return network.execute_async_v4()
'''
    used = dict(collect(src))
    bogus = {"add_bogus_layer_zz", "enqueue_v9", "num_io_tensorz", "EXTRA_FAST_MODE"}
    assert bogus <= set(used)
    assert "execute_async_v4" in used  # through the tuple assignment ctx, s = self.context, ...
    for name in bogus | {"execute_async_v4"}:
        assert not trt_names.exists(name), name
    for name in ("Logger", "WARNING", "Builder", "create_network", "create_execution_context", "Runtime",
                 "deserialize_cuda_engine", "NetworkDefinitionCreationFlag", "execute_async_v3", "INPUT"):
        assert trt_names.exists(name), name
    assert "add_argument" not in used
    assert sum(1 for n, _ in collect(src) if n == "execute_async_v4") == 1  # not the one in unrelated()
    assert collect("import numpy as np\nnp.zeros(1).execute_async_v4()\n") == []
