"""Which candidate runs, from facts alone: `decide` loads, times and measures nothing.

    Candidate(backend, precision, cost, refused, note)   one backend x precision and what is known of it
    Facts(candidates, notes)                             every candidate weighed, and the ones that could not run
    decide(facts) -> Candidate | None                    the fastest within budget (None: none is)
    why(pick, reused="") -> str                          the line saying what `--precision auto` runs, and why

The facts come from whoever measured them: `--precision auto` (select) loads each candidate, asks the quality gate
and times it on one image; `preview` runs each on samples of the user's input and estimates the whole job. Both
hand them here, so "the fastest within budget" is decided in this one place.
"""
from __future__ import annotations

from dataclasses import dataclass

from pipeline.quality import kept_text


@dataclass(frozen=True)
class Candidate:
    """One backend x precision and what was measured of it."""

    backend: str
    precision: str
    cost: float | None   # lower is faster: ms on one image (auto), a job's estimated seconds (preview); None: unknown
    refused: str = ""    # why it may not run (the quality gate's line, a failure); "" while within budget
    note: str = ""       # a fact said beside it (the rule that let it through)

    @property
    def runs(self) -> str:
        return f"{self.backend} {self.precision}"


@dataclass(frozen=True)
class Facts:
    """Every candidate weighed, in the order they are preferred on a tie, and why the others could not run."""

    candidates: tuple[Candidate, ...]
    notes: tuple[str, ...] = ()

    def timed(self) -> list[Candidate]:
        """The candidates within budget with a cost, in their order."""
        return [c for c in self.candidates if not c.refused and c.cost is not None]


def decide(facts: Facts) -> Candidate | None:
    """The fastest candidate within budget (the first of equals, in the facts' order), or None when none is."""
    timed = facts.timed()
    return min(timed, key=lambda c: c.cost or 0.0) if timed else None


def why(pick: dict, reused: str = "") -> str:
    """What `--precision auto` runs and why, one short line, then one indented line per fact (what was timed, each
    candidate left out and why, whether the pick was reused): as one line it ran to ~900 characters. The sr console
    wraps them. `pick` is the stored pick (select's record): the reason of a fresh pick and of a reused one alike."""
    ratio = (f", {pick['fp32_ms'] / pick['ms']:.1f}x fp32's {pick['fp32_ms']:.0f} ms"
             if pick["fp32_ms"] and pick["precision"] != "fp32" else "")
    facts = ([kept_text(pick["gain_kept"])] if pick.get("gain_kept") else []) + [f"timed: {pick['times']}",
                                                                                  *pick["notes"]]
    return (f"precision auto: {pick['backend']} {pick['precision']} is the fastest within budget here "
            f"({pick['ms']:.0f} ms at {size(pick)}{ratio})"
            + "".join(f"\n  {f}" for f in facts + ([reused] if reused else [])))


def size(pick: dict) -> str:
    """'256x256': the image a pick's candidates were timed on."""
    return f"{pick['size']}x{pick['size']}"
