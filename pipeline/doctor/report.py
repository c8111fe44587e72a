"""doctor.md and doctor.json: the facts, every check with its status, and one line per failure with its fix."""
from __future__ import annotations

import contextlib
import json
import platform
import time
from pathlib import Path

from pipeline.artifacts.atomic import atomic_write
from pipeline.doctor.results import EXIT_FAILED, EXIT_NO_GPU, EXIT_OK, FAIL, Check
from pipeline.htmlreport import write_html

_VERDICTS = {EXIT_OK: "everything present here passed", EXIT_FAILED: "some checks failed",
             EXIT_NO_GPU: "no CUDA GPU: the host-side checks ran; the GPU checks did not"}


def to_json(checks: list[Check], code: int) -> dict:
    return {"exit_code": code, "verdict": _VERDICTS[code], "host": platform.node(), "python": platform.python_version(),
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "checks": [c.to_dict() for c in checks],
            "failures": [c.line() for c in checks if c.status == FAIL]}


def to_markdown(checks: list[Check], code: int) -> str:
    lines = ["# srdeploy doctor", "", f"Result: **{_VERDICTS[code]}** (exit {code}).", "",
             "| check | status | detail | fix |", "|---|---|---|---|"]
    for c in checks:
        cells = [c.name, c.status.upper(), c.detail, c.fix if c.status != "pass" else ""]
        lines.append("| " + " | ".join(x.replace("|", "\\|").replace("\n", " ") for x in cells) + " |")
    failures = [c for c in checks if c.status == FAIL]
    if failures:
        lines += ["", "## Failures", ""] + [f"- {c.name}: {c.detail} — fix: {c.fix}" for c in failures]
    lines += ["", "Exit codes: 0 everything present passed; 1 a check failed; 3 no CUDA GPU (nothing failed)."]
    return "\n".join(lines) + "\n"


def write(output: Path, checks: list[Check], code: int) -> tuple[Path, Path]:
    output.mkdir(parents=True, exist_ok=True)
    md, js = output / "doctor.md", output / "doctor.json"
    atomic_write(md, to_markdown(checks, code).encode())
    with contextlib.suppress(ImportError):  # a bare GPU Python (`make gpu-check`) may lack Jinja2: doctor.md has it all
        write_html(md)  # doctor.html beside it
    atomic_write(js, (json.dumps(to_json(checks, code), indent=2) + "\n").encode())
    return md, js
