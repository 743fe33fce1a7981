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

from poslab.analysis.corpus_statistics import (
    AGAINST,
    DEGENERATE,
    IN_ORDER,
    POST_HOC,
    SUMMARY_FILE,
    UNRESOLVED,
    no_width,
)
from poslab.analysis.output import AnalysisResult
from poslab.analysis.tables import csv_text, markdown_table
from poslab.io import number_or_nan


def value_of(row: dict[str, Any], corpus: str) -> float | None:
    """A quantity's value for ``corpus`` (NaN where the summary has null), None where the corpus has none."""
    if corpus not in row["values"]:
        return None
    return number_or_nan(row["values"][corpus])


def value_cell(value: float | None, interval: list | None = None) -> str:
    """A figure (``—`` where undefined), with its interval over documents where the summary has one."""
    if value is None or math.isnan(value):
        return "—"
    cell = _figure(value)
    bounds = [number_or_nan(x) for x in interval or []]
    if len(bounds) == 2 and all(math.isfinite(x) for x in bounds):
        cell += " [degenerate]" if no_width(bounds) else f" [{_figure(bounds[0])}, {_figure(bounds[1])}]"
    return cell


def _figure(value: float) -> str:
    return f"{value:.1f}" if abs(value) >= 100 else f"{value:.3f}"


def interval_of(summary: dict[str, Any], corpus: str, quantity: str) -> list | None:
    return summary.get("intervals", {}).get(corpus, {}).get(quantity)


def documents_cell(row: dict[str, Any]) -> str:
    """How the pairs read over documents (post hoc: the direction was chosen after looking); ``n/a`` without
    intervals or where not compared."""
    reading = row.get("order_over_documents")
    if reading is None:
        return "n/a"
    kinds = [r["reading"] for r in row["pair_readings"]]
    counts = ", ".join(f"{kinds.count(k)} {k}" for k in (IN_ORDER, AGAINST, UNRESOLVED, DEGENERATE) if k in kinds)
    return f"{reading} ({counts})"


def order_cell(row: dict[str, Any]) -> str:
    """Whether every pair of corpora is in U*'s order (point values): ``n/a`` where not every corpus has a value."""
    same = row.get("same_order")
    return "n/a" if same is None else "yes" if same else "no"


def verdict_cell(row: dict[str, Any]) -> str:
    """The verdict in docs/verdicts.md's categories: none for a post hoc reading (intervals over documents, the
    direction chosen after looking), not testable without an interval, ``n/a`` where not compared."""
    if row.get("verdict") is None:
        return "n/a"
    return row["verdict"] if row["verdict"] == POST_HOC else f"{row['verdict']} (no interval)"


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
#: the column of the pairs read over documents
OVER_DOCUMENTS = "pairs over documents (95%; post hoc)"


def statistics_table(summary: dict[str, Any]) -> str:
    """One row per quantity: its value per corpus with its interval over documents, its direction, how many pairs
    agree with U* (point values), whether all do (a post hoc reading), how the pairs read over documents and the
    verdict (none: post hoc; not testable without intervals)."""
    rows, corpora, ustar = summary["rows"], summary["corpora"], summary["ustar"]
    heads = [f"{c} (reference U* {ustar[c]:+.2f})" if c in ustar else c for c in corpora]
    header = ["construct", "quantity", *heads, "direction", "pairs in U*'s order", ORDER, OVER_DOCUMENTS, "verdict"]
    body = [
        [
            row["construct"],
            row["quantity"],
            *(value_cell(value_of(row, c), interval_of(summary, c, row["quantity"])) for c in corpora),
            row["direction"] if row["agree"] is not None else "—",
            agree_cell(row),
            order_cell(row),
            documents_cell(row),
            verdict_cell(row),
        ]
        for row in rows
    ]
    return markdown_table(header, body)


def differences_table(rows: list[dict[str, Any]]) -> str:
    """Every pair of corpora with a U*, per quantity: the difference with its interval over documents and how it
    reads in the quantity's direction."""
    body = [
        [row["quantity"], row["direction"], r["pair"], value_cell(r["difference"], r["interval"]), r["reading"]]
        for row in rows
        for r in row.get("pair_readings") or []
    ]
    return markdown_table(["quantity", "direction", "pair a/b", "a - b [95% over documents]", "reading"], body)


def statistics_csv(summary: dict[str, Any]) -> str:
    """The table's figures as numbers: each corpus's value with its interval's bounds (empty without one)."""
    rows, corpora = summary["rows"], summary["corpora"]
    bounds = [f"{c}_{end}" for c in corpora for end in ("low", "high")]
    header = ["construct", "quantity", *corpora, *bounds, "direction", "agree", "pairs", "same_order"]
    header += ["over_documents", "verdict", "missing", "disagreeing"]
    body = [
        [
            row["construct"],
            row["quantity"],
            *(value_of(row, c) for c in corpora),
            *(x for c in corpora for x in (interval_of(summary, c, row["quantity"]) or [None, None])),
            row["direction"],
            row["agree"],
            row["pairs"],
            order_cell(row),
            row.get("order_over_documents") or "n/a",
            row.get("verdict") or "n/a",
            ";".join(row.get("missing") or []),
            ";".join(row["disagreeing"]),
        ]
        for row in rows
    ]
    return csv_text(header, body)


def plot_statistics(summary: dict[str, Any]) -> Any:
    """One bar panel per quantity, the corpora ordered by U* (deepest first), each bar with its interval over
    documents where the summary has one; a value not computed reads n/a."""
    from poslab.analysis.plotting import plt

    stats, rows, ustar = summary["statistics"], summary["rows"], summary["ustar"]
    corpora = sorted(stats, key=lambda c: (ustar.get(c, math.inf), c))  # deepest well first
    fig, axes = plt.subplots(2, 4, figsize=(16, 7))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, row in zip(axes.flat, rows):
        name = row["quantity"]
        heights = np.array([number_or_nan(stats[c].get(name)) for c in corpora], dtype=float)
        ax.bar(range(len(corpora)), heights, color=[colours[i % len(colours)] for i in range(len(corpora))])
        bounds = np.array([[number_or_nan(x) for x in interval_of(summary, c, name) or [None, None]] for c in corpora])
        if np.isfinite(bounds).all() and np.isfinite(heights).all():
            errors = np.abs(bounds.T - heights)  # the interval may not be centred on the figure
            ax.errorbar(range(len(corpora)), heights, yerr=errors, fmt="none", ecolor="black", capsize=4, lw=1)
        for i in np.flatnonzero(np.isnan(heights)):  # not computed: said so, not drawn as a bar of height 0
            ax.text(i, 0.5, "n/a", transform=ax.get_xaxis_transform(), ha="center", va="center", color="grey")
        labels = [f"{c}\nU* {ustar[c]:+.2f}" if c in ustar else c for c in corpora]
        ax.set_xticks(range(len(corpora)), labels, fontsize=7)
        ax.set_xlim(-0.6, len(corpora) - 0.4)  # every corpus's place, a missing bar's too
        agree = "" if row["agree"] is None else f"\n{row['agree']} of {row['pairs']} pairs ({row['direction']})"
        over = row.get("order_over_documents")
        agree += f"; over documents: {over}" if over else ""
        # the definition, so a reader need not know the quantity's name
        ax.set_title(f"{name}\n{row['definition']}{agree}", fontsize=8)
    bars = " (bars: 95% over documents)" if summary.get("intervals") else ""
    fig.suptitle(f"Corpus-only statistics, corpora ordered by U* (deepest first){bars}")
    fig.tight_layout()
    return fig


def report_lines(summary: dict[str, Any]) -> list[str]:
    """The lines above the table: the sample, the intervals, where U* comes from, the chance level, which
    quantities order the corpora as U* does and their verdict."""
    corpora, counts, ustar, rows = summary["corpora"], summary["counts"], summary["ustar"], summary["rows"]
    lines = [
        f"Corpus-only statistics: {summary['split']} split, up to {summary['documents']} documents per corpus (with "
        "2+ paragraphs): "
        + ", ".join(f"{c} {counts[c]['documents']} documents / {counts[c]['paragraphs']} paragraphs" for c in corpora)
        + ".",
        interval_line(summary),
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
    return lines + [order_line(rows), *documents_line(rows), verdict_line(rows)]


def interval_line(summary: dict[str, Any]) -> str:
    """What the intervals are, or that there are none (a summary written before them)."""
    if not summary.get("intervals"):
        return "No intervals: this summary was written before the intervals over documents."
    return (
        f"Intervals: 95%, t-intervals of the standard error over {summary['replicates']} bootstrap resamples of "
        "each corpus's documents (a difference: both corpora's, independent, Welch's degrees of freedom). They say "
        "how far a figure would move on other documents like these; the documents are the corpus's first in file "
        "order, not a random sample of it."
    )


def documents_line(rows: list[dict[str, Any]]) -> list[str]:
    """The quantities whose every pair lies in U*'s order over documents (post hoc), where intervals exist."""
    read = [r for r in rows if r.get("order_over_documents") is not None]
    if not read:
        return []
    in_order = [r["quantity"] for r in read if r["order_over_documents"] == IN_ORDER]
    return [
        f"Every pair in U*'s order over documents (95%, in the direction chosen after looking): "
        f"{', '.join(in_order) or 'none'} (of {len(read)} quantities compared)."
    ]


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
    """What the orderings are as verdicts (docs/verdicts.md): none, being post hoc, or not testable without an
    interval."""
    compared = [r for r in rows if r.get("verdict") is not None]
    if not compared:
        return "Verdict: none (no quantity compared)."
    if all(r["verdict"] == POST_HOC for r in compared):
        return (
            f"Verdict (docs/verdicts.md) of each of the {len(compared)} compared: none, a post hoc reading: each "
            "quantity's direction is the one that agrees with more pairs, chosen after looking, so its order over "
            "documents is a lead, not evidence; a claim fixed before looking (a direction, a pair) reads its "
            "pair's interval below."
        )
    return (
        f"Verdict (docs/verdicts.md) of each of the {len(compared)} compared: not testable, one measurement per "
        "corpus with no interval; the orderings above are point values, not evidence either way."
    )


def render_corpora(summary: dict[str, Any], directory: Path) -> AnalysisResult:
    """The report and its files from ``summary`` alone, for ``directory``."""
    tables = ["", statistics_table(summary)]
    if any(row.get("pair_readings") for row in summary["rows"]):
        tables += ["", "Pairs of corpora, each quantity in its direction:", "", differences_table(summary["rows"])]
    report = "\n".join([*report_lines(summary), *tables])
    csv = statistics_csv(summary)
    result = AnalysisResult.with_tables("corpus", report, directory, csv, summary, SUMMARY_FILE, "corpus_statistics")
    result.add_figure("corpus_statistics.png", plot_statistics(summary))
    return result
