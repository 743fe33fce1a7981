"""The render layer of ``poslab analyze corpus``: the report, ``corpus_statistics.md`` (via
``poslab.analysis.tables.markdown_table``), ``corpus_statistics.csv`` (via ``tables.csv_text``) and
``corpus_statistics.png`` from the summary (``corpus_statistics.json``, ``corpus_statistics.corpus_summary``)
alone: no corpus, no embedder, so ``--from corpus_statistics.json`` re-renders.

The summary writes an undefined value (NaN) as null; it is shown "—" in the table, ``nan`` in the CSV and "n/a"
in the figure, as before the split. Changed in the split: the table's value columns are no longer marked
right-aligned (``---:``): the one markdown writer has no alignment.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from poslab.analysis.corpus_statistics import SUMMARY_FILE
from poslab.analysis.output import AnalysisResult
from poslab.analysis.tables import csv_text, markdown_table
from poslab.io import number_or_nan


def value_of(row: dict[str, Any], corpus: str) -> float | None:
    """A quantity's value for ``corpus`` (NaN where the summary has null), None where the corpus has none."""
    if corpus not in row["values"]:
        return None
    return number_or_nan(row["values"][corpus])


def value_cell(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "—"
    return f"{value:.1f}" if abs(value) >= 100 else f"{value:.3f}"


def reproduces_cell(reproduces: bool | None) -> str:
    return "n/a" if reproduces is None else "yes" if reproduces else "no"


def agree_cell(row: dict[str, Any]) -> str:
    """``2 of 3 (not wiki/web)``: the corpus pairs the quantity orders as U* does, and those it does not."""
    if row["agree"] is None:
        return "—"
    agree = f"{row['agree']} of {row['pairs']}"
    return agree + (f" (not {', '.join(row['disagreeing'])})" if row["disagreeing"] else "")


def statistics_table(rows: list[dict[str, Any]], corpora: list[str], ustar: dict[str, float]) -> str:
    """One row per quantity: its value per corpus, its direction, how many pairs agree with U*, reproduced."""
    heads = [f"{c} (reference U* {ustar[c]:+.2f})" if c in ustar else c for c in corpora]
    header = ["construct", "quantity", *heads, "direction", "agrees with U*", "reproduces"]
    body = [
        [
            row["construct"],
            row["quantity"],
            *(value_cell(value_of(row, c)) for c in corpora),
            row["direction"] if row["agree"] is not None else "—",
            agree_cell(row),
            reproduces_cell(row["reproduces"]),
        ]
        for row in rows
    ]
    return markdown_table(header, body)


def statistics_csv(rows: list[dict[str, Any]], corpora: list[str]) -> str:
    header = ["construct", "quantity", *corpora, "direction", "agree", "pairs", "reproduces", "disagreeing"]
    body = [
        [
            row["construct"],
            row["quantity"],
            *(value_of(row, c) for c in corpora),
            row["direction"],
            row["agree"],
            row["pairs"],
            reproduces_cell(row["reproduces"]),
            ";".join(row["disagreeing"]),
        ]
        for row in rows
    ]
    return csv_text(header, body)


def plot_statistics(stats: dict[str, dict[str, float]], rows: list[dict[str, Any]], ustar: dict[str, float]) -> Any:
    """One bar panel per quantity, the corpora ordered by U* (deepest first); a value not computed reads n/a."""
    from poslab.analysis.plotting import plt

    corpora = sorted(stats, key=lambda c: (ustar.get(c, math.inf), c))  # deepest well first
    fig, axes = plt.subplots(2, 4, figsize=(16, 7))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, row in zip(axes.flat, rows):
        heights = np.array([stats[c].get(row["quantity"], float("nan")) for c in corpora], dtype=float)
        ax.bar(range(len(corpora)), heights, color=[colours[i % len(colours)] for i in range(len(corpora))])
        for i in np.flatnonzero(np.isnan(heights)):  # not computed: said so, not drawn as a bar of height 0
            ax.text(i, 0.5, "n/a", transform=ax.get_xaxis_transform(), ha="center", va="center", color="grey")
        labels = [f"{c}\nU* {ustar[c]:+.2f}" if c in ustar else c for c in corpora]
        ax.set_xticks(range(len(corpora)), labels, fontsize=7)
        ax.set_xlim(-0.6, len(corpora) - 0.4)  # every corpus's place, a missing bar's too
        agree = "" if row["agree"] is None else f"\n{row['agree']} of {row['pairs']} pairs ({row['direction']})"
        # the definition, so a reader need not know the quantity's name
        ax.set_title(f"{row['quantity']}\n{row['definition']}{agree}", fontsize=8)
    fig.suptitle("Corpus-only statistics, corpora ordered by U* (deepest first)")
    fig.tight_layout()
    return fig


def report_lines(summary: dict[str, Any]) -> list[str]:
    """The lines above the table: the sample, where U* comes from, the chance level, what reproduces U*."""
    corpora, counts, ustar, rows = summary["corpora"], summary["counts"], summary["ustar"], summary["rows"]
    lines = [
        f"Corpus-only statistics: {summary['split']} split, up to {summary['documents']} documents per corpus (with "
        "2+ paragraphs): "
        + ", ".join(f"{c} {counts[c]['documents']} documents / {counts[c]['paragraphs']} paragraphs" for c in corpora)
        + ".",
        f"U* from {summary['ustar_source']}: " + (", ".join(f"{c} {v:+.2f}" for c, v in ustar.items()) or "none") + ".",
    ]
    if len(ustar) < 2:
        lines.append("Fewer than two corpora have a U*, so no ordering can be compared.")
    else:
        lines.append(
            f"Chance level: a quantity in random order reproduces the ordering of {len(ustar)} corpora in its better "
            f"direction with probability 2/{len(ustar)}! = {2 / math.factorial(len(ustar)):.2g}."
        )
    if not summary["embeddings"]:
        lines.append("Embedding coherence not computed (--no-embeddings).")
    return lines + [reproduced_line(rows)]


def reproduced_line(rows: list[dict[str, Any]]) -> str:
    full = [r["quantity"] for r in rows if r["reproduces"]]
    compared = [r for r in rows if r["reproduces"] is not None]
    shown = (", ".join(full) if full else "none") + f" (of {len(compared)} quantities compared)."
    missing = len(rows) - len(compared)
    return (
        "Reproduce the U* ordering fully: "
        + (shown if compared else "n/a")
        + (f" ({missing} quantities not compared: no two corpora with both a value and a U*.)" if missing else "")
    )


def render_corpora(summary: dict[str, Any], directory: Path) -> AnalysisResult:
    """The report and its files from ``summary`` alone, for ``directory``."""
    rows, corpora, ustar = summary["rows"], summary["corpora"], summary["ustar"]
    report = "\n".join([*report_lines(summary), "", statistics_table(rows, corpora, ustar)])
    csv = statistics_csv(rows, corpora)
    result = AnalysisResult.with_tables("corpus", report, directory, csv, summary, SUMMARY_FILE, "corpus_statistics")
    result.add_figure("corpus_statistics.png", plot_statistics(summary["statistics"], rows, ustar))
    return result
