"""Which backend and precision run, from facts alone: nothing here loads, times or measures; and every line that
says why, written here.

    Candidate(backend, precision, cost, refused)         one backend x precision and what is known of it
    Facts(candidates, notes)                             every candidate weighed, and the ones that could not run
    decide(facts) -> Candidate | None                    the fastest within budget (None: none is)
    backend_pick(precision, order, ok, gpu, record, command) -> AutoPick   `--backend auto` at one precision
    why(pick, reused="") -> str                          the line saying what `--precision auto` runs, and why
    requested(name) / elsewhere(name) / auto_reason(pick) -> (why, brief)   the other reasons
    triton_pick(asked, engine_given, tensorrt_problem, engines=, files=) -> (name, why)    `triton`'s format

The facts come from whoever measured them: `--precision auto` (select) loads each candidate, asks the quality gate
and times it on one image; `preview` runs each on samples of the user's input and estimates the whole job; `--backend
auto` (auto) hands over what runs here, the expected order and `backends --measure`'s record. So "the fastest within
budget" and "the fastest backend here" are each decided in one place.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from pipeline.quality import kept_text

# A measured lead under this share of the slower time is noise on a shared machine: auto keeps the expected order.
NOISE = 0.10


class AutoPick(NamedTuple):
    name: str
    reason: str
    brief: str = ""  # the reason in a few words


ENGINE_GIVEN = AutoPick("trt", "an engine file was given", "engine file given")  # an engine runs only on TensorRT


@dataclass(frozen=True)
class Candidate:
    """One backend x precision and what was measured of it."""

    backend: str
    precision: str
    cost: float | None   # lower is faster: ms on one image (auto), a job's estimated seconds (preview); None: unknown
    refused: str = ""    # why it may not run (the quality gate's line, a failure); "" while within budget

    @property
    def runs(self) -> str:
        return f"{self.backend} {self.precision}"


@dataclass(frozen=True)
class Facts:
    """Every candidate weighed, in the order they are preferred on a tie, and the lines said about them (why one could
    not run or is refused, the rule that let one through)."""

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


def backend_pick(precision: str, order: tuple[str, ...], ok: set[str], gpu: bool, record: dict | None,
                 command: str) -> AutoPick:
    """`--backend auto` at `precision`: the fastest in this machine's measurement (`record`, `backends --measure`'s)
    of the backends that run here (`ok`), unless the expected pick was within NOISE of it; else the first of `order`
    (the descriptors' expected order) that runs here. `command` is the one that times them here."""
    expected = _expected_pick(precision, order, ok, gpu, command)
    timed = {n: t for n, t in (record or {}).get("ms", {}).items() if n in ok}
    if timed and record is not None:
        return _measured_pick(timed, record, expected)
    if expected is not None:
        return expected
    name = sorted(ok)[0]
    return AutoPick(name, f"{name} is the only kind available", "the only one available")


def _expected_pick(precision: str, order: tuple[str, ...], ok: set[str], gpu: bool, command: str) -> AutoPick | None:
    name = next((n for n in order if n in ok), None)
    if name is None:
        return None
    skipped = [n for n in order[:order.index(name)] if n not in ok]
    where = "on this GPU machine" if gpu else "on a CPU-only machine"
    note = f"; faster-ranked but unavailable: {', '.join(skipped)}" if skipped else ""
    return AutoPick(name, f"{name} is the expected fastest {precision} backend available {where}{note} "
                          f"(`{command}` times them here)",
                    "expected fastest on this GPU" if gpu else "expected fastest without a GPU")


def _measured_pick(timed: dict[str, float], record: dict, expected: AutoPick | None) -> AutoPick:
    """The fastest in the latest measurement, or the expected pick when it was measured within NOISE of it."""
    best = min(timed, key=lambda n: timed[n])
    parts = ", ".join(f"{n} {t:.0f} ms" for n, t in sorted(timed.items(), key=lambda kv: kv[1]))
    where = f"{record['size']}x{record['size']}, measured {record.get('when', '?')}: {parts}"
    keep = expected.name if expected is not None and expected.name in timed else None
    if keep and keep != best and timed[keep] - timed[best] <= NOISE * timed[keep]:
        return AutoPick(keep, f"{keep} is the expected fastest, and the measurement here is within noise of it "
                              f"(under {NOISE:.0%} apart; {where})", "expected fastest; measured within noise")
    return AutoPick(best, f"{best} is fastest measured on this machine ({where})", "fastest measured here")


def auto_reason(pick: AutoPick) -> tuple[str, str]:
    """(why, brief) of a backend `--backend auto` picked."""
    return f"auto: {pick.reason}", f"auto: {pick.brief or 'picked'}"


def requested(name: str) -> tuple[str, str]:
    """(why, brief) of a backend asked for by name."""
    return f"requested: {name}", "requested"


def elsewhere(name: str) -> tuple[str, str]:
    """(why, brief) of a GPU backend asked for by name on a machine without a GPU: loaded where it runs."""
    return f"requested: {name} (loaded on the nodes with a GPU)", "requested"


def triton_pick(asked: str | None, engine_given: bool, tensorrt_problem: str | None, *, engines: str,
                files: str) -> tuple[str, str]:
    """A Triton repository's format (`triton --backend`) and the line saying why: the one asked for; `engines` (the
    served backend that runs TensorRT engines) for a given engine, or where TensorRT can build the engine here
    (`tensorrt_problem` None); else `files` (the one that serves the exported file)."""
    if asked is not None:
        return asked, requested(asked)[0]
    if engine_given:
        return engines, ENGINE_GIVEN.reason
    if tensorrt_problem is None:
        return engines, "TensorRT can build the engine here"
    return files, (f"writing the ONNX Runtime model (--backend {files}): no TensorRT engine can be built here "
                   f"({tensorrt_problem})")
