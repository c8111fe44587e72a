"""`make lint`'s function-length check: every function under the given folders is at most LIMIT lines (from its
`def` to its last line, docstring included), so each reads on one screen. Prints each offender as
`path:line name N lines` and exits 1."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

LIMIT = 60


def offenders(roots: list[Path], limit: int = LIMIT) -> list[str]:
    found = []
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    n = node.end_lineno - node.lineno + 1
                    if n > limit:
                        found.append(f"{path}:{node.lineno} {node.name} {n} lines")
    return found


def main(argv: list[str]) -> int:
    bad = offenders([Path(a) for a in argv or ["pipeline"]])
    for line in bad:
        print(f"{line} (over {LIMIT})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
