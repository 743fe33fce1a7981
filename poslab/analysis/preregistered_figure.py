"""The pre-registered claims as a forest plot: each claim's A - B at its place with its 95% interval, coloured by
verdict, language models (bits/byte) and synthetic tasks (each claim's own figure) in two panels; drawn from
``preregistered.json`` alone (``poslab.analysis.preregistered``)."""

from __future__ import annotations

from typing import Any

from poslab.analysis.plotting import note_sparse_panel, plt

COLOURS = {"reproduced": "tab:green", "contradicted": "tab:red", "not resolved": "tab:grey"}
PANELS = (("length", "language models: A - B bits/byte"), ("zoo", "synthetic tasks: A - B, the claim's figure"))


def preregistered_figure(summary: dict[str, Any]) -> plt.Figure:
    heights = [max(1, sum(r["report"] == report for r in summary["rows"])) for report, _ in PANELS]
    fig, axes = plt.subplots(2, 1, figsize=(8, 1.2 + 0.28 * sum(heights)), height_ratios=heights, squeeze=False)
    for ax, (report, title) in zip(axes[:, 0], PANELS):
        rows = [r for r in summary["rows"] if r["report"] == report]
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
        ax.set_title(title, fontsize=9, loc="left")
        note_sparse_panel(ax, drawn, "" if drawn else "no claim with a figure here")
    handles = [plt.Line2D([], [], color=c, marker="o", label=v) for v, c in COLOURS.items()]
    handles.append(plt.Line2D([], [], color="black", marker="o", linestyle="", label="not testable (no interval)"))
    fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig
