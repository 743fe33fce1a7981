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


def order_cell(row: dict[str, Any]) -> str:
    """Whether every pair of corpora is in U*'s order (point values): ``n/a`` where not every corpus has a value."""
    same = row.get("same_order")
    return "n/a" if same is None else "yes" if same else "no"


def verdict_cell(row: dict[str, Any]) -> str:
    """The verdict in docs/verdicts.md's categories: not testable (no interval), or ``n/a`` where not compared."""
    return "n/a" if row.get("verdict") is None else f"{row['verdict']} (no interval)"


def agree_cell(row: dict[str, Any]) -> str:
    """``2 of 3 (not wiki/web)``: the corpus pairs the quantity orders as U* does, and those it does not; a corpus
    without a value is named, its pairs not counted."""
    if row["agree"] is None:
        return "—"
    agree = f"{row['agree']} of {row['pairs']}"
    agree += f" (not {', '.join(row['disagreeing'])})" if row["disagreeing"] else ""
    return agree + (f" (no value: {', '.join(row['missing'])})" if row.get("missing") else "")


#: the order column's title: what it is and is not
ORDER = "same order as U* (point values, no interval; direction chosen post hoc)"


def statistics_table(rows: list[dict[str, Any]], corpora: list[str], ustar: dict[str, float]) -> str:
    """One row per quantity: its value per corpus, its direction, how many pairs agree with U*, whether all do (a
    post hoc reading of point values) and the verdict (not testable: no interval)."""
    heads = [f"{c} (reference U* {ustar[c]:+.2f})" if c in ustar else c for c in corpora]
    header = ["construct", "quantity", *heads, "direction", "pairs in U*'s order", ORDER, "verdict"]
    body = [
        [
            row["construct"],
            row["quantity"],
            *(value_cell(value_of(row, c)) for c in corpora),
            row["direction"] if row["agree"] is not None else "—",
            agree_cell(row),
            order_cell(row),
            verdict_cell(row),
        ]
        for row in rows
    ]
    return markdown_table(header, body)


def statistics_csv(rows: list[dict[str, Any]], corpora: list[str]) -> str:
    header = ["construct", "quantity", *corpora, "direction", "agree", "pairs", "same_order", "verdict", "missing"]
    body = [
        [
            row["construct"],
            row["quantity"],
            *(value_of(row, c) for c in corpora),
            row["direction"],
            row["agree"],
            row["pairs"],
            order_cell(row),
            row.get("verdict") or "n/a",
            ";".join(row.get("missing") or []),
            ";".join(row["disagreeing"]),
        ]
        for row in rows
    ]
    return csv_text([*header, "disagreeing"], body)


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
    """The lines above the table: the sample, where U* comes from, the chance level, which quantities order the
    corpora as U* does (point values) and their verdict."""
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
            f"Chance level: a quantity in random order puts {len(ustar)} corpora in U*'s order in its better "
            f"direction with probability 2/{len(ustar)}! = {2 / math.factorial(len(ustar)):.2g}."
        )
    if not summary["embeddings"]:
        lines.append("Embedding coherence not computed (--no-embeddings).")
    return lines + [order_line(rows), verdict_line(rows)]


def order_line(rows: list[dict[str, Any]]) -> str:
    """The quantities whose point values put every pair in U*'s order, of those compared; those not compared (a
    corpus without a value) named apart, not counted."""
    compared = [r for r in rows if r.get("same_order") is not None]
    same = [r["quantity"] for r in compared if r["same_order"]]
    shown = "n/a"
    if compared:
        shown = (", ".join(same) or "none") + f" (of {len(compared)} quantities compared)"
    missing = [r for r in rows if r.get("same_order") is None]
    apart = ", ".join(f"{r['quantity']} ({', '.join(r.get('missing') or []) or 'no pair'})" for r in missing)
    return f"{ORDER[0].upper()}{ORDER[1:]}, every pair: {shown}." + (
        f" Not compared, no value for every corpus with a U*: {apart}." if missing else ""
    )


def verdict_line(rows: list[dict[str, Any]]) -> str:
    """What the orderings are as verdicts (docs/verdicts.md): none can be more than not testable here."""
    compared = sum(r.get("verdict") is not None for r in rows)
    if not compared:
        return "Verdict: none (no quantity compared)."
    return (
        f"Verdict (docs/verdicts.md) of each of the {compared} compared: not testable, one measurement per corpus with "
        "no interval; the orderings above are point values, not evidence either way."
    )


def render_corpora(summary: dict[str, Any], directory: Path) -> AnalysisResult:
    """The report and its files from ``summary`` alone, for ``directory``."""
    rows, corpora, ustar = summary["rows"], summary["corpora"], summary["ustar"]
    report = "\n".join([*report_lines(summary), "", statistics_table(rows, corpora, ustar)])
    csv = statistics_csv(rows, corpora)
    result = AnalysisResult.with_tables("corpus", report, directory, csv, summary, SUMMARY_FILE, "corpus_statistics")
    result.add_figure("corpus_statistics.png", plot_statistics(summary["statistics"], rows, ustar))
    return result
