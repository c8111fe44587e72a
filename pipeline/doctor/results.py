"""One doctor check's outcome, and the exit code a whole run ends with."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

PASS, FAIL, SKIP, INFO = "pass", "fail", "skip", "info"

# Exit codes of `python -m pipeline doctor` (docs/gpu.md, "Doctor"). 2 stays the CLI's code for a bad argument.
EXIT_OK = 0  # everything present here ran and passed
EXIT_FAILED = 1  # at least one check failed (one `FAIL` line each, with its fix)
EXIT_NO_GPU = 3  # nothing failed, but there is no CUDA GPU, so the GPU checks did not run


@dataclass
class Check:
    """name: what was checked; status: pass / fail / skip (cannot run here, not a failure) / info (a fact);
    detail: what was found or measured; fix: for a failure (or a skip a user can act on), what to do."""

    name: str
    status: str
    detail: str = ""
    fix: str = ""
    data: dict = field(default_factory=dict)

    def line(self) -> str:
        text = f"{self.status.upper():<4} {self.name}: {self.detail}"
        return text + (f" -> fix: {self.fix}" if self.fix and self.status in (FAIL, SKIP) else "")

    def to_dict(self) -> dict:
        return asdict(self)


def exit_code(checks: list[Check], gpu_present: bool) -> int:
    if any(c.status == FAIL for c in checks):
        return EXIT_FAILED
    return EXIT_OK if gpu_present else EXIT_NO_GPU
