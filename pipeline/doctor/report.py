"""doctor.md and doctor.json: the facts, every check with its status, and one line per failure with its fix."""
from __future__ import annotations

import contextlib
import json
import platform
import time
from pathlib import Path

from pipeline.artifacts.atomic import atomic_write
from pipeline.doctor.results import EXIT_FAILED, EXIT_NO_GPU, EXIT_OK, FAIL, Check
from pipeline.htmlreport import Heading, Strong, Table, items, para, write_html
from pipeline.htmlreport import to_markdown as markdown

_VERDICTS = {EXIT_OK: "everything present here passed", EXIT_FAILED: "some checks failed",
             EXIT_NO_GPU: "no CUDA GPU: the host-side checks ran; the GPU checks did not"}


def to_json(checks: list[Check], code: int) -> dict:
    return {"exit_code": code, "verdict": _VERDICTS[code], "host": platform.node(), "python": platform.python_version(),
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "checks": [c.to_dict() for c in checks],
            "failures": [c.line() for c in checks if c.status == FAIL]}


def blocks(checks: list[Check], code: int) -> list:
    """doctor's report as blocks (pipeline.htmlreport.document): doctor.md and doctor.html are made from them."""
    out = [Heading("srdeploy doctor", 1), para("Result: ", Strong(_VERDICTS[code]), f" (exit {code})."),
           Table(("check", "status", "detail", "fix"),
                 tuple((c.name, c.status.upper(), c.detail, c.fix if c.status != "pass" else "") for c in checks))]
    failures = [c for c in checks if c.status == FAIL]
    if failures:
        out += [Heading("Failures"), items(*[f"{c.name}: {c.detail} — fix: {c.fix}" for c in failures])]
    return out + [para("Exit codes: 0 everything present passed; 1 a check failed; 3 no CUDA GPU (nothing failed).")]


def to_markdown(checks: list[Check], code: int) -> str:
    return markdown(blocks(checks, code))


def write(output: Path, checks: list[Check], code: int) -> tuple[Path, Path]:
    output.mkdir(parents=True, exist_ok=True)
    md, js = output / "doctor.md", output / "doctor.json"
    page = blocks(checks, code)
    atomic_write(md, markdown(page, output).encode())
    with contextlib.suppress(ImportError):  # a bare GPU Python (`make gpu-check`) may lack Jinja2: doctor.md has it all
        write_html(md, page)  # doctor.html beside it
    atomic_write(js, (json.dumps(to_json(checks, code), indent=2) + "\n").encode())
    return md, js
