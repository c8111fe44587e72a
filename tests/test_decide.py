"""decide: which candidate runs, from facts alone (issue 68): the fastest within budget, the same rule for
`--precision auto`'s timings and preview's estimates; `--backend auto`'s pick from what runs here and a measurement;
the Triton repository's format. Nothing here loads a backend: the facts are given."""
from __future__ import annotations

from pipeline import backends
from pipeline.backends import Candidate, Facts, decide
from pipeline.backends.decide import backend_pick

SERVED = {"engines": "trt", "files": "ort"}  # what pipeline.serve passes: its two served backends


def test_the_fastest_within_budget_wins_and_a_refused_or_unmeasured_one_never_does():
    facts = Facts((Candidate("openvino", "fp32", 40.0), Candidate("openvino", "bf16", 30.0),
                   Candidate("openvino", "int8", 10.0, refused="int8 not used: over its budget"),
                   Candidate("ort", "fp32", None)))
    assert decide(facts) == Candidate("openvino", "bf16", 30.0)
    assert [c.runs for c in facts.timed()] == ["openvino fp32", "openvino bf16"]


def test_equal_costs_keep_the_facts_order_and_nothing_within_budget_decides_nothing():
    tie = Facts((Candidate("ort", "fp32", 20.0), Candidate("openvino", "fp32", 20.0)))
    assert decide(tie).backend == "ort"
    assert decide(Facts((Candidate("ort", "int8", 5.0, refused="failed"),), ("torch int8: does not run it",))) is None
    assert decide(Facts(())) is None


def test_backend_auto_takes_a_measured_lead_past_noise_else_the_expected_order():
    order, ok = ("ort-folded", "openvino", "ort"), {"openvino", "ort"}
    first = backend_pick("fp32", order, ok, False, None, "CMD")
    assert first.name == "openvino" and "faster-ranked but unavailable: ort-folded" in first.reason
    record = {"size": 256, "when": "now", "ms": {"openvino": 100.0, "ort": 50.0, "torch": 1.0}}  # torch: not here
    assert backend_pick("fp32", order, ok, False, record, "CMD").name == "ort"
    close = {**record, "ms": {"openvino": 100.0, "ort": 95.0}}
    assert backend_pick("fp32", order, ok, False, close, "CMD").name == "openvino"  # within NOISE: expected kept
    assert backend_pick("fp32", (), {"torch"}, False, None, "CMD").reason == "torch is the only kind available"


def test_the_triton_repository_format_is_asked_for_or_follows_tensorrt_here():
    assert backends.triton_pick("ort", False, None, **SERVED) == ("ort", "requested: ort")
    assert backends.triton_pick(None, True, "no TensorRT", **SERVED)[0] == "trt"
    assert backends.triton_pick(None, False, None, **SERVED)[0] == "trt"
    name, why = backends.triton_pick(None, False, "libnvinfer missing", **SERVED)
    assert name == "ort" and why.endswith("(libnvinfer missing)")
