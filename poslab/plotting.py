"""Matplotlib without a screen, Chinese drawn with a CJK font (``poslab.fonts``), figures written atomically as PNG."""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from poslab.fonts import use_cjk_fallback  # noqa: E402
from poslab.io import write_atomic  # noqa: E402

# before any figure: a text's font is fixed when it is made
use_cjk_fallback(plt.rcParams)


#: what a panel with nothing drawn, or a single point, says (``note_sparse_panel``)
NO_DATA = "no data"
ONE_POINT = "one point"


def note_sparse_panel(ax: plt.Axes, points: int, why: str = "") -> str | None:
    """Say on ``ax`` that it draws no point ("no data") or a single one ("one point"), and ``why`` on a line
    below: an empty panel or a lone dot reads as a flat or missing curve otherwise. Nothing for two or more
    points; returns the note written. An empty panel's ticks go (they would count nothing)."""
    if points > 1:
        return None
    note = (NO_DATA if points == 0 else ONE_POINT) + (f"\n{why}" if why else "")
    ax.text(
        0.5,
        0.5 if points == 0 else 0.96,
        note,
        transform=ax.transAxes,
        ha="center",
        va="center" if points == 0 else "top",
        fontsize=8,
        color="dimgrey",
        bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 2},
    )
    if points == 0:
        ax.set_xticks([])
        ax.set_yticks([])
    return note


def whole_number_axis(ax: plt.Axes, low: float, high: float, axis: str = "x") -> None:
    """An axis that counts (displacements, steps): ticks on whole numbers only, over ``low`` .. ``high`` with half a
    unit either side, so that a range of one value shows that value and not 0.945, 0.960, ... (matplotlib's
    ``MaxNLocator(integer=True)`` alone falls back to fractions when fewer than two whole numbers are in view)."""
    from matplotlib.ticker import MaxNLocator

    which = ax.xaxis if axis == "x" else ax.yaxis
    which.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    (ax.set_xlim if axis == "x" else ax.set_ylim)(low - 0.5, high + 0.5)


def save_figure(fig: plt.Figure, path: str | Path, dpi: int = 120) -> Path:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    plt.close(fig)
    return write_atomic(path, buffer.getvalue())


__all__ = ["NO_DATA", "ONE_POINT", "note_sparse_panel", "plt", "save_figure", "whole_number_axis"]
