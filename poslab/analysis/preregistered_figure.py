"""The pre-registered claims as a forest plot: each claim's A - B at its place with its 95% interval, coloured by
verdict, one panel per unit so that no two scales share an axis: language models (bits/byte), then the synthetic
tasks by their claim's figure (accuracy, 0 to 1; flip-flop's read error, percentage points; any other figure its
own panel). A row with a difference is drawn whatever its verdict (a not-testable one in black, its interval where
it has one); a row without one (not computed, no runs, not scored) is named on its axis only. Drawn from
``preregistered.json`` alone (``poslab.analysis.preregistered``)."""

from __future__ import annotations

from typing import Any

from poslab.analysis.claims import parse_claim
from poslab.analysis.plotting import note_sparse_panel, plt

COLOURS = {"reproduced": "tab:green", "contradicted": "tab:red", "not resolved": "tab:grey", "not testable": "black"}
LENGTH_PANEL = "language models: A - B bits/byte"
ACCURACY_PANEL = "synthetic tasks: A - B accuracy (0 to 1)"


def panel_of(row: dict[str, Any]) -> str:
    """The panel (its unit) a row's difference is drawn in."""
    if row["report"] == "length":
        return LENGTH_PANEL
    figure = parse_claim(row["claim"]).figure
    if figure is None or "accuracy" in figure:
        return ACCURACY_PANEL
    if figure.startswith("read_error_pct"):
        return "synthetic tasks: A - B read error (percentage points)"
    return f"synthetic tasks: A - B {figure}"


def panels(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The rows by panel: language models first, then each unit of the synthetic tasks in registry order (an empty
    synthetic-task panel where there is none, so the figure always shows both reports)."""
    found: dict[str, list[dict[str, Any]]] = {LENGTH_PANEL: []}
    for row in rows:
        found.setdefault(panel_of(row), []).append(row)
    if len(found) == 1:
        found["synthetic tasks"] = []
    return found


def draw_panel(ax: Any, title: str, rows: list[dict[str, Any]]) -> None:
    drawn = 0
    for y, row in enumerate(reversed(rows)):
        if row["mean"] is None:
            continue
        colour = COLOURS.get(row["verdict"], "black")
        if row["low"] is not None and row["high"] is not None:
            ax.plot([row["low"], row["high"]], [y, y], color=colour, linewidth=2)
        ax.plot([row["mean"]], [y], "o", color=colour, markersize=4)
        drawn += 1
    ax.axvline(0.0, color="black", linewidth=0.8)
    ax.set_yticks(range(len(rows)), [f"{r['claim']} ({r['place']}, {r['multiple']})" for r in reversed(rows)],
                  fontsize=7)  # fmt: skip
    ax.tick_params(axis="x", labelsize=7)
    ax.set_title(title, fontsize=9, loc="left")
    note_sparse_panel(ax, drawn, "" if drawn else "no claim with a figure here")


def preregistered_figure(summary: dict[str, Any]) -> plt.Figure:
    by_panel = panels(summary["rows"])
    heights = [max(1, len(rows)) for rows in by_panel.values()]
    fig, axes = plt.subplots(
        len(by_panel), 1, figsize=(8, 1.2 + 0.28 * sum(heights) + 0.5 * len(by_panel)), height_ratios=heights,
        squeeze=False,
    )  # fmt: skip
    for ax, (title, rows) in zip(axes[:, 0], by_panel.items()):
        draw_panel(ax, title, rows)
    handles = [plt.Line2D([], [], color=c, marker="o", label=v) for v, c in COLOURS.items()]
    fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig
