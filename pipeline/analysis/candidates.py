"""Which backends an analysis (compare, bench) runs for a model and precision."""
from __future__ import annotations

from pipeline import backends as B


def candidate_statuses(model: str | None, precision: str, only: list[str] | tuple[str, ...] | None = None,
                       weights=None, onnx=None) -> list[B.BackendStatus]:
    """The status (available or why not) of each backend in `only`, or by default of every backend but the aliases
    (ort-cpu repeats `ort`'s session on a machine whose best provider is the CPU one)."""
    aliases = {d.name for d in B.descriptors() if d.alias_of is not None}
    return [st for st in B.available(model, precision, weights, onnx=onnx)
            if (st.name in only if only else st.name not in aliases)]
