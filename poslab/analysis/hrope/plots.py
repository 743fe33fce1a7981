"""The hRoPE report's figures: the wells (mean residual log attention by paragraph displacement), one panel per
corpus, from the runs read back from the summary (render layer: matplotlib is imported here only)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from poslab.analysis.hrope.runs import RunAnalysis
from poslab.analysis.hrope.seeds import grouped, ordered_models


def plot_wells(analyses: list[RunAnalysis], shuffled: bool = False) -> Any:
    """One panel per corpus, one line per model (seed mean; thin lines: single seeds); one legend beside the
    panels, where it covers no curve, and a model's colour the same in every panel. The displacement axis has
    whole-number ticks over the displacements drawn; a panel with no point drawn says "no data", one with a single
    displacement "one point", and why (a small run: too few query/key pairs, or no document to shuffle)."""
    from poslab.analysis.plotting import (  # Agg, the CJK font for Chinese names
        note_sparse_panel,
        plt,
        whole_number_axis,
    )

    groups = grouped(analyses)
    corpora = sorted({c for _, c in groups})
    models = ordered_models({m for m, _ in groups})
    fig, axes = plt.subplots(
        1, len(corpora), figsize=(4.6 * len(corpora) + 1.8, 4), squeeze=False, layout="constrained"
    )
    handles: dict[str, Any] = {}
    for ax, corpus in zip(axes[0], corpora):
        drawn: set[int] = set()  # the displacements with a point in this panel
        for model in (m for m in models if (m, corpus) in groups):
            color = f"C{models.index(model) % 10}"
            curves = []
            for run in groups[(model, corpus)]:
                curve = (run.shuffled_well if shuffled else run.well).residual[1:]
                curves.append(curve)
                ax.plot(range(1, len(curve) + 1), curve, color=color, alpha=0.3, linewidth=0.8)
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # displacements no seed has: nan, not drawn
                mean = np.nanmean(np.vstack(curves), axis=0)
            drawn |= {k + 1 for k in np.flatnonzero(np.isfinite(mean))}
            (handles[model],) = ax.plot(range(1, len(mean) + 1), mean, color=color, marker="o", markersize=3)
        ax.set_title(corpus + (" (paragraphs shuffled)" if shuffled else ""))
        if drawn:
            ax.axhline(0.0, color="grey", linewidth=0.6)
            whole_number_axis(ax, 1, max(drawn))
        runs = [r for (_, c), members in groups.items() if c == corpus for r in members]
        note_sparse_panel(ax, len(drawn), sparse_well_reason(runs, drawn, shuffled))
        # two lines: on one, the label is wider than a single panel
        ax.set_xlabel("paragraph displacement\n(boundaries between key and query)")
        ax.set_ylabel("mean residual log attention")
    fig.legend(
        handles.values(),
        handles.keys(),
        loc="outside right upper",
        fontsize=8,
        title="line: seed mean\nthin lines: each seed",
        title_fontsize=8,
    )
    return fig


def sparse_well_reason(runs: list[RunAnalysis], drawn: set[int], shuffled: bool) -> str:
    """Why a panel of ``plot_wells`` draws no point, or one: the second line of its note."""
    if shuffled and not any(r.shuffled_documents for r in runs):
        return "no held-out document has the four or more\nparagraphs a shuffle needs"
    if not drawn:
        return "too few query/key pairs at every displacement"
    return f"displacement {min(drawn)}: the others have\ntoo few query/key pairs"
