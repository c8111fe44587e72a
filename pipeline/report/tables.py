"""How a report writes its values: numbers in tables (tests parse them back), dB, percentages,
speed-ups, and report.json's values (numpy scalars, paths, inf/nan)."""
from __future__ import annotations

import math
from pathlib import Path

from pipeline.htmlreport.document import Table


def fmt(v) -> str:
    """Number formatting shared by Markdown tables (tests parse it back)."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        if math.isnan(v):
            return "nan"
        if v == 0:
            return "0"
        if abs(v) < 1e-2 or abs(v) >= 1e6:
            return f"{v:.3e}"
        return f"{v:.1f}" if abs(v) >= 1000 else f"{v:.4g}"
    return str(v)


def db(v) -> str:
    """A PSNR (or its change) in dB: always two decimals, so a column reads evenly."""
    return "-" if v is None else f"{v:.2f}"


def loss(v) -> str:
    """A quality loss (Y-PSNR dB or SSIM) the same way in every table: four decimals, never an exponent (a column
    of 0.0794 next to another's 7.940e-02 read as two quantities)."""
    return "-" if v is None else f"{v:.4f}"


def percent(fraction, decimals: int = 1) -> str:
    """A fraction (roofline, utilisation, a share) as a percentage a person reads: 0.0996 -> '10.0 %' ('10 %' with
    decimals=0)."""
    return "-" if fraction is None else f"{100 * fraction:.{decimals}f} %"


def roofline_share(fraction) -> str:
    """A roofline share: percent(), except that a row at 100 % says why (its rate beat the GEMM's and became the
    peak, pipeline.bench.results.apply_peak) instead of a bare 100.0 % that reads like a bug."""
    if fraction is not None and fraction >= 0.9995:
        return "100 % (this row set the peak)"
    return percent(fraction)


def speedup(ratio) -> str:
    """A speed-up (baseline time / our time) as the ratio and the change in speed a person reads:
    4.0 -> '4.00x (+300 %)', 0.5 -> '0.50x (-50 %)'."""
    return "-" if ratio is None else f"{ratio:.2f}x ({100 * (ratio - 1):+.0f} %)"


def runs_phrase(n: int, kind: str = "") -> str:
    """How many runs a reported time is the median of: 'medians of 3 alternating runs', or 'one run' (no median
    of one)."""
    return f"medians of {n} {kind}runs" if n != 1 else f"one {kind}run"


def budgets(rows) -> str:
    """The quality budgets the rows were held to, from their measured-loss summaries (each row's `precision` and
    `quality`, set by pipeline.quality): 'bf16 0.02 dB, int8 0.1 dB', or 'none measured'."""
    held = {r.get("precision"): r["quality"]["budget_db"] for r in rows if r.get("quality")}
    return ", ".join(f"{p} {b:g} dB" for p, b in sorted(held.items())) or "none measured"


def _column_form(values) -> str | None:
    """One way to write a column's floats, so a column does not mix 0.0101, 6.900e-03 and 0.1649: exponents for all
    when one needs it, else the decimals that give its smallest value 4 significant digits (at most 6), less the
    trailing zeros every value would have."""
    floats = [abs(v) for v in values if type(v) is float and math.isfinite(v) and v != 0]
    if not floats:
        return None
    if any(v < 1e-2 or v >= 1e6 for v in floats):
        return ".3e"
    places = min(6, max(max(0, 3 - math.floor(math.log10(v))) for v in floats))
    while places and all(format(v, f".{places}f").endswith("0") for v in floats):  # no zeros every cell ends in
        places -= 1
    return f".{places}f"


def _cell_value(v, form: str | None) -> str:
    if form is None or type(v) is not float or not math.isfinite(v) or v == 0:
        return fmt(v)
    return format(v, form)


def table(header: list[str], rows: list[list]) -> Table:
    """A report table (pipeline.htmlreport.document) with every value written by fmt, each column's floats in one
    form (_column_form)."""
    width = max((len(r) for r in rows), default=0)
    forms = [_column_form([r[j] for r in rows if j < len(r)]) for j in range(width)]
    return Table(tuple(header), tuple(tuple(_cell_value(c, forms[j]) for j, c in enumerate(r)) for r in rows))


def fidelity_cell(f: dict | None) -> str:
    """A row's `fidelity` (pipeline.quality.fidelity.summary) in one cell: 'mean (worst)', or '-' (fp32)."""
    if not f:
        return "-"
    return f"{f['mean_db']:.1f} ({f['worst_db']:.1f})"


def parse_table(md: str, first_header: str, has: str | None = None) -> list[dict[str, str]]:
    """Rows of the first Markdown table whose first header cell is `first_header` (and that has a column
    `has`), as dicts header -> cell text (for tests/tools)."""
    lines = md.splitlines()
    for i, ln in enumerate(lines):
        cells = [c.strip() for c in ln.strip().strip("|").split("|")]
        if ln.startswith("|") and cells[0] == first_header and (has is None or has in cells) \
                and (i == 0 or not lines[i - 1].startswith("|")):
            rows = []
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                rows.append(dict(zip(cells, [c.strip() for c in row.strip().strip("|").split("|")], strict=False)))
            return rows
    return []


def json_default(o):
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(type(o).__name__)


def sanitize(o):
    """JSON has no inf/nan: write them as strings 'inf', '-inf', 'nan' (readers: float(x))."""
    if isinstance(o, float) and not math.isfinite(o):
        return "nan" if math.isnan(o) else ("inf" if o > 0 else "-inf")
    if isinstance(o, dict):
        return {k: sanitize(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [sanitize(v) for v in o]
    return o
