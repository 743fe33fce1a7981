"""Matplotlib without a screen, Chinese drawn with a CJK font (``poslab.analysis.fonts``), figures written atomically
as PNG."""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from poslab.analysis.fonts import use_cjk_fallback  # noqa: E402
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


def plain_number(value: float) -> str:
    """A tick label a reader need not work out: ``2,048``, not ``2^11``; ``0.5`` as it is."""
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:g}"


def length_axis(ax: plt.Axes, lengths: list[float], axis: str = "x") -> None:
    """A log-2 length axis ticked at ``lengths`` only, labelled in plain numbers (128, 256, ..., 2,048): matplotlib
    labels a base-2 axis ``2^7 ... 2^11``, which makes a reader do sums. No minor ticks (they would be unlabelled
    marks between lengths that were never evaluated). Set after the last plot call: a scale change resets ticks."""
    from matplotlib.ticker import NullLocator

    ticks = sorted(set(lengths))
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log", base=2)
    (ax.set_xticks if axis == "x" else ax.set_yticks)(ticks, [plain_number(t) for t in ticks])
    (ax.xaxis if axis == "x" else ax.yaxis).set_minor_locator(NullLocator())


def powers_of_two(low: float, high: float, most: int = 7) -> list[int]:
    """Powers of two from ``low`` to ``high``, every second (fourth, ...) one where there are more than ``most``,
    ``high``'s own power kept: the ticks of a position axis from 1 to a long evaluation length."""
    exponents = list(range(math.ceil(math.log2(max(low, 1))), math.floor(math.log2(high)) + 1))
    step = max(1, math.ceil(len(exponents) / most))
    return [2**e for e in exponents[::-1][::step][::-1]]


def constant_note(values: Any) -> str:
    """What a heat map's title says when every cell drawn holds one value (``"0 in every cell"``): an even colour
    reads as a rendering fault or a scale with no contrast otherwise. Empty when the cells differ or none is drawn."""
    finite = np.asarray(values, dtype=float)
    finite = finite[np.isfinite(finite)]
    if finite.size == 0 or not np.all(finite == finite[0]):
        return ""
    return f"{finite[0]:.3g} in every cell"


def save_figure(fig: plt.Figure, path: str | Path, dpi: int = 120) -> Path:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    plt.close(fig)
    return write_atomic(path, buffer.getvalue())


__all__ = [
    "NO_DATA",
    "ONE_POINT",
    "constant_note",
    "length_axis",
    "note_sparse_panel",
    "plain_number",
    "plt",
    "powers_of_two",
    "save_figure",
    "whole_number_axis",
]
