"""Plots as PNG (matplotlib, Agg) with an SVG twin that report.html embeds as a picture."""
from __future__ import annotations

from pathlib import Path

from pipeline.artifacts.atomic import atomic_path


def save_fig(fig, path: Path) -> None:
    """The plot as PNG, and as an SVG twin that report.html embeds as a picture (pipeline.htmlreport)."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    with atomic_path(Path(path).with_suffix(".svg")) as tmp:
        fig.savefig(tmp, format="svg", bbox_inches="tight")


def plt_():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
