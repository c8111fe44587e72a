"""Run the plugin GPU harness under compute-sanitizer (memcheck with leak check, then racecheck) and judge the reports.

    python3 scripts/sanitize_harness.py build/plugins/trt_plugin_gpu_harness [--output DIR] [--sanitizer PATH]

`make gpu-check` runs it when compute-sanitizer is installed. Standard library only (the GPU machine's bare Python).
Each sanitizer report is split into records (a `========= ` line and its indented continuation) and each record is
  - expected:  an out-of-memory API error the harness planted on purpose (it prints one `# planted out-of-memory
               probe` line per probe; the runtime and the driver each report it, so up to 2 records per probe),
  - cublas:    a hazard inside cuBLAS's own kernels (gemm/gemv/xmma/cutlass/nvjet...), reported apart from ours,
  - ours:      anything else, including leaks and errors in kernels that cannot be attributed: these fail.
Also fails when the harness fails under the tool or a summary counts more errors than the records found.
Exit 0 when clean, 1 otherwise; the full logs are written to --output.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

# --print-limit 0: every record printed (the default stops at 100, fewer than the harness's planted probes make)
TOOLS = {"memcheck": ["--tool", "memcheck", "--leak-check", "full", "--print-limit", "0"],
         "racecheck": ["--tool", "racecheck", "--print-limit", "0"]}
PREFIX = "========= "
PROBE_LINE = "# planted out-of-memory probe"
RECORDS_PER_PROBE = 2  # the runtime call (cudaMalloc) and the driver call under it (cuMemAlloc)
# Kernels of ours: namespace sr (plugins_trt/*/…Kernel.cu) or our sources by path.
OURS = re.compile(r"\bsr::|plugins_trt/|dynamicResizeKernel|deformIm2colKernel|biasFillKernel")
CUBLAS = re.compile(r"cublas|gemm|gemv|xmma|cutlass|nvjet|splitK", re.IGNORECASE)
OUT_OF_MEMORY = re.compile(r"out of memory|cudaErrorMemoryAllocation|CUDA_ERROR_OUT_OF_MEMORY")
NOT_RECORDS = re.compile(r"^(COMPUTE-SANITIZER|ERROR SUMMARY|LEAK SUMMARY|RACECHECK SUMMARY|Target application"
                         r"|Saved host backtrace)")
# "ERROR SUMMARY: N errors" counts; "ERROR SUMMARY: N errors were not printed" (a print limit) does not add to it
SUMMARY_ERRORS = re.compile(r"ERROR SUMMARY: (\d+) errors?\b(?! (?:was|were) not printed)"
                            r"|RACECHECK SUMMARY: .*?\((\d+) errors?")


@dataclass
class Verdict:
    expected: list[str] = field(default_factory=list)
    cublas: list[str] = field(default_factory=list)
    ours: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # the harness failed, counts that do not add up

    @property
    def ok(self) -> bool:
        return not self.ours and not self.problems


def records(report: str) -> list[str]:
    """Sanitizer records: a `========= text` line plus the `=========     ...` lines under it, joined."""
    out: list[list[str]] = []
    for line in report.splitlines():
        # the harness's own output shares the stream: a record can start in the middle of its unfinished line
        start = line.find(PREFIX.rstrip())
        if start < 0:
            continue
        line = line[start:]
        text = line[len(PREFIX):] if line.startswith(PREFIX) else ""
        if not text.strip():
            continue
        if text.startswith(" ") and out:  # continuation (backtrace, "and Read access at ...", address)
            out[-1].append(text.strip())
        elif NOT_RECORDS.match(text.strip()):
            out.append([])  # closes the previous record; ignored itself
        else:
            out.append([text.strip()])
    return ["\n".join(r) for r in out if r]


def judge(tool: str, report: str, harness_output: str, harness_rc: int) -> Verdict:
    v = Verdict()
    probes = harness_output.count(PROBE_LINE)
    allowed_oom = RECORDS_PER_PROBE * probes
    for rec in records(report):
        head = rec.splitlines()[0]
        # a planted probe's backtrace runs through the harness's own frames: judged before OURS
        if OUT_OF_MEMORY.search(head) and "API call" in head and len(v.expected) < allowed_oom:
            v.expected.append(rec)
        elif OURS.search(rec):
            v.ours.append(rec)
        elif tool == "racecheck" and CUBLAS.search(head):
            v.cublas.append(rec)
        else:
            v.ours.append(rec)  # cannot be attributed to cuBLAS or to a planted probe: counts as ours
    summarised = sum(int(a or b) for a, b in SUMMARY_ERRORS.findall(report))
    found = len(v.expected) + len(v.cublas) + len(v.ours)
    if summarised > found:
        v.problems.append(f"{tool}: the summary counts {summarised} error(s), only {found} record(s) were read")
    if harness_rc != 0:
        v.problems.append(f"{tool}: the harness exited {harness_rc} under the sanitizer")
    return v


def _first(rec: str) -> str:
    return rec.splitlines()[0][:200]


def run(harness: Path, output: Path, sanitizer: str) -> int:
    output.mkdir(parents=True, exist_ok=True)
    failed = False
    for tool, flags in TOOLS.items():
        proc = subprocess.run([sanitizer, *flags, str(harness)], capture_output=True, text=True)
        text = proc.stdout + proc.stderr
        (output / f"{tool}.log").write_text(text)
        v = judge(tool, text, text, proc.returncode)
        print(f"{tool}: {len(v.ours)} error(s) in our code, {len(v.cublas)} hazard(s) inside cuBLAS's own kernels "
              f"(not ours, reported apart), {len(v.expected)} planted out-of-memory probe record(s) "
              f"({text.count(PROBE_LINE)} probe(s)); log {output / f'{tool}.log'}")
        for rec in v.cublas[:5]:
            print(f"  cuBLAS: {_first(rec)}")
        for rec in v.ours:
            print(f"  FAIL: {_first(rec)}")
        for p in v.problems:
            print(f"  FAIL: {p}")
        failed |= not v.ok
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("harness", type=Path)
    ap.add_argument("--output", type=Path, default=Path("outputs/sanitizer"))
    ap.add_argument("--sanitizer", default="compute-sanitizer")
    args = ap.parse_args(argv)
    if not args.harness.is_file():
        print(f"error: no harness at {args.harness} (build the plugins first)", file=sys.stderr)
        return 2
    return run(args.harness, args.output, args.sanitizer)


if __name__ == "__main__":
    sys.exit(main())
