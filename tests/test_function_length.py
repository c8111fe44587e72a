"""`make lint`'s function-length check (scripts/check_function_length.py): it finds a long function, and
pipeline/ has none."""
from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("check_function_length", ROOT / "scripts" / "check_function_length.py")
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)


def test_a_function_over_the_limit_is_named(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(check.LIMIT - 1))
    (tmp_path / "ok.py").write_text(f"def short():\n{body}\n")  # exactly LIMIT lines
    (tmp_path / "pkg").mkdir()
    inner = "\n".join("    " + line for line in body.splitlines())
    (tmp_path / "pkg" / "long.py").write_text(f"class A:\n    def long(self):\n{inner}\n        y = 1\n")
    assert check.offenders([tmp_path]) == [f"{tmp_path / 'pkg' / 'long.py'}:2 long {check.LIMIT + 1} lines"]


def test_pipeline_has_no_function_over_the_limit():
    assert check.offenders([ROOT / "pipeline"]) == []
