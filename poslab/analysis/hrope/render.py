"""The render layer of the hRoPE report: from the summary (``hrope.json``, ``compute.hrope_summary``) alone, the
printed report and its files: ``hrope_table.md`` (every table via ``poslab.analysis.tables.markdown_table``),
``hrope_runs.csv`` (via ``tables.csv_text``), the wells' PNGs (``poslab.analysis.hrope.plots``), and two views
of the summary kept for their readers (docs/hrope, docs/reproduction): ``hrope_runs.json`` (the runs' entries
as before) and ``hrope_arms.json`` (per arm and corpus, and the comparisons). No model, no run directory.

The runs come back as ``RunAnalysis.from_summary``, with the document replicates their entries keep; every
figure over seeds and documents (``poslab.analysis.hrope.intervals``: no random draws) is computed again from them
by ``poslab.analysis.hrope.seeds`` (``summary_figures``), and the summary's ``arms`` and ``comparisons`` are
rewritten with them, so a summary written by an earlier version renders with the current intervals.

Changed in the split: ``hrope_runs.csv`` lines end in ``\n`` (the one CSV writer's), not ``\r\n``.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from poslab.analysis.hrope.intervals import SEEDS_DOCUMENTS, SEEDS_ONLY, Crossed, over_seeds_documents
from poslab.analysis.hrope.plots import plot_wells
from poslab.analysis.hrope.readings import INTERVENTION_READINGS, INTERVENTIONS, u_readings
from poslab.analysis.hrope.runs import RunAnalysis
from poslab.analysis.hrope.seeds import (
    SPLIT_GAP,
    Arms,
    Claim,
    claims,
    corpus_label,
    cross_pairs,
    depth_of,
    grouped,
    ordered_corpora,
    ordered_models,
    shuffle_of,
    summary_figures,
)
from poslab.analysis.hrope.shape import SHAPE
from poslab.analysis.output import REFERENCE_LABEL, AnalysisResult, sample_notes, steps_cell
from poslab.analysis.stats import Estimate, Interval, split_seeds
from poslab.analysis.tables import csv_text, markdown_table

#: the write-up's U* table (three seeds, 8 layers x 512)
REFERENCE_DEPTHS = {
    "hrope_axial": {"Code": -0.77, "WikiText-2": -0.48, "OpenWebText": -0.31},
    "rand_axial": {"Code": -0.24, "WikiText-2": -0.22, "OpenWebText": -0.33},
}


#: how each intervention reading's cells are written: log attention (3 decimals), attention mass (3 decimals)
READING_LABELS = {
    "same_pairs": "same pairs",
    "persistent_mass": "persistent cross mass",
    "real_cross_mass": "real cross mass",
}


def fmt(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:+.{digits}f}".replace("-", "−")


def fmt_ci(value: float, ci: tuple[float, float], digits: int = 2) -> str:
    return f"{fmt(value, digits)} [{fmt(ci[0], digits)}, {fmt(ci[1], digits)}]"


def intervals_note() -> str:
    """How the report's intervals are made (printed under the summary table)."""
    return (
        "Intervals: 95%, over seeds and held-out documents (poslab/analysis/hrope/intervals.py): the seed mean ± "
        "t(seeds − 1) × sqrt(seed term + document term), the seed term the seeds' variance / seeds (their scatter "
        "on these documents), the document term the variance of the seed mean over the documents' bootstrap "
        "resamples (the same resamples in every run of a corpus: seeds and documents crossed); A − B on one corpus "
        'paired by seed and by resample, across corpora Welch\'s. The verdicts read these. "seeds only": the '
        "Student-t interval over the seeds alone, the documents held fixed (secondary); a figure whose runs keep no "
        "document replicates (a summary written before they were kept; bits/byte of runs whose results hold no "
        "per-document losses) has only it, and says so. Bits/byte: resamples of the validation split's documents "
        "(all of them, the figure's own), not of the analysis's. Seeds that split into two outcomes (a jump over "
        f"{SPLIT_GAP} in U* or ΔU*) are listed one by one."
    )


def interval_cell(interval: Interval, digits: int = 2) -> str:
    """``−0.48 [−0.90, −0.06]``: a mean and its 95% interval (one seed: the value alone; none: n/a)."""
    if interval.n == 0:
        return "n/a"
    if not interval.has_interval:
        return fmt(interval.mean, digits)
    return fmt_ci(interval.mean, (interval.low, interval.high), digits)


def split_note(values: list[float], digits: int = 2) -> str:
    """`` (split: −0.05 / −0.02 / −0.90)``: the per-seed values, where a mean describes no run that happened."""
    return " (split: " + " / ".join(fmt(v, digits) for v in values) + ")"


#: said after a cell whose interval is over seeds only (its runs keep no document replicates)
SEEDS_ONLY_MARK = " (seeds only)"


def crossed_cell(crossed: Crossed, values: list[float], digits: int = 2, spread: bool = False,
                 mark: bool = True) -> str:  # fmt: skip
    """A figure over seeds: mean [95% interval over seeds and documents] (``mark``: "(seeds only)" after the
    t-interval over seeds where the runs keep no document replicates), ``spread``: the seeds' sd and their number,
    and the per-seed values where the seeds split."""
    interval = crossed.shown
    finite = [v for v in values if math.isfinite(v)]
    if interval.n == 0:
        return "n/a"
    cell = interval_cell(interval, digits)
    if spread:
        cell += (f" sd {np.std(finite, ddof=1):.{digits}f}" if interval.n > 1 else "") + f" ({interval.n})"
    if mark and not crossed.has_documents and interval.has_interval:
        cell += SEEDS_ONLY_MARK
    return cell + (split_note(values, digits) if split_seeds(finite, SPLIT_GAP) else "")


def estimates_cell(estimates: list[Estimate], digits: int = 2, spread: bool = False, mark: bool = True) -> str:
    """``crossed_cell`` of the runs' estimates of one figure (one per seed, in the group's order)."""
    crossed = over_seeds_documents(dict(enumerate(estimates)))
    return crossed_cell(crossed, [e.value for e in estimates], digits, spread, mark)


def depth_cell(estimates: list[Estimate]) -> str:
    """The U* table's cell: ``−0.48 [−0.90, −0.06] sd 0.17 (3)`` (the interval over seeds and documents; over
    seeds only where the runs keep no document replicates, said so); one seed ``−0.30 (1)``."""
    return estimates_cell(estimates, spread=True)


def interval_from(saved: dict[str, Any]) -> Interval:
    """An ``Interval.as_dict()`` back (None: nan)."""
    return Interval.from_dict(saved)


def depth_table(analyses: list[RunAnalysis]) -> str:
    """The write-up's layout: models x corpora, U* (seed mean [95% interval over seeds and documents] sd (seeds));
    the write-up's values in columns of their own, labelled as a reference, for the corpora it has."""
    groups = grouped(analyses)
    corpora = ordered_corpora(groups)
    models = ordered_models({m for m, _ in groups})
    references = {m: REFERENCE_DEPTHS.get(m.partition(":")[0], {}) for m in models}
    referenced = [c for c in corpora if any(c in references[m] for m in models)]
    header = ["U*", *corpora, *(f"{c}: {REFERENCE_LABEL}" for c in referenced)]
    rows = []
    for model in models:
        cells = [model]
        for corpus in corpora:
            runs = groups.get((model, corpus), [])
            cells.append(depth_cell([r.main.depth for r in sorted(runs, key=lambda r: r.seed)]) if runs else "—")
        cells += [fmt(references[model].get(corpus)) for corpus in referenced]
        rows.append(cells)
    return markdown_table(header, rows)


def figure_cell(figure: dict[str, Any], digits: int = 2, mark: bool = True) -> str:
    """A ``seeds.figure`` as a cell: mean [95% interval over seeds and documents], or the t-interval over seeds
    followed by "(seeds only)" (``mark``) where the runs keep no document replicates; the per-seed values where
    the seeds split."""
    values = [math.nan if v is None else v for v in figure["per_seed"]]
    over = figure.get("over", SEEDS_ONLY)
    interval = interval_from(figure if over == SEEDS_DOCUMENTS else figure.get("seeds_only", figure))
    cell = interval_cell(interval, digits)
    if over != SEEDS_DOCUMENTS and mark and interval.has_interval:
        cell += SEEDS_ONLY_MARK
    return cell + (split_note(values, digits) if figure["split"] else "")


def versus_cell(versus: dict[str, Any], digits: int, mark: bool) -> str:
    """A − B (``intervals.Crossed.as_dict``) as a cell: ``figure_cell`` without per-seed values."""
    return figure_cell({**versus, "per_seed": [], "split": False}, digits, mark)


def bits_per_byte_cell(figure: dict[str, Any], mark: bool) -> str:
    """Bits/byte over an arm's seeds: ``1.405 [1.39, 1.42]`` (``Interval.cell``: unsigned, a degenerate interval
    said so), over seeds and documents where the runs keep replicates, else over seeds only ("(seeds only)" after
    it where ``mark``: a column that has the others)."""
    documents = figure.get("over") == SEEDS_DOCUMENTS
    interval = interval_from(figure if documents else figure["seeds_only"])
    cell = interval.cell(3)
    return cell + (SEEDS_ONLY_MARK if mark and not documents and interval.has_interval else "")


def seeds_only_cell(figure: dict[str, Any], digits: int = 2) -> str:
    """The secondary cell: the t-interval over seeds alone (the documents fixed)."""
    return interval_cell(interval_from(figure["seeds_only"]), digits)


def has_documents(figures: list[dict[str, Any] | None]) -> bool:
    """Whether any of a column's figures is over seeds and documents (else its header says "seeds only")."""
    return any(f is not None and f.get("over") == SEEDS_DOCUMENTS for f in figures)


def render_summary(summaries: list[dict[str, Any]]) -> str:
    """Per arm and corpus: validation bits/byte and its difference from RoPE's (paired by seed and resample), then
    U*, the shuffle test (ΔU*, and ΔU* minus RoPE's, paired by seed and resample) and the interventions under every
    reading, each with its 95% interval over seeds and documents; last, the t-intervals over seeds alone of U* and
    ΔU* (secondary). The allocation study's table, from the summary's ``arms`` (``seeds.arm_summaries``). A column
    none of whose runs keep document replicates says "(seeds only)" in its header; in a column that has them, a
    cell without says it."""
    interventions = [(reading, kind) for reading in INTERVENTION_READINGS for kind in INTERVENTIONS]
    with_documents = {
        (reading, kind): has_documents([s["interventions"][reading][kind] for s in summaries])
        for reading, kind in interventions
    }
    bpb_documents = has_documents([s["val_bpb"] for s in summaries])
    versus_documents = has_documents([s.get("val_bpb_minus_rope") for s in summaries])
    bpb_mark = "" if bpb_documents else SEEDS_ONLY_MARK
    header = ["arm", "corpus", "seeds", f"val bits/byte{bpb_mark}"]
    header += [f"− RoPE's{'' if versus_documents else SEEDS_ONLY_MARK}", "U*", "ΔU* shuffle", "ΔU* − RoPE's"]
    for reading, kind in interventions:
        mark = "" if with_documents[(reading, kind)] else SEEDS_ONLY_MARK
        header.append(f"{kind}: {READING_LABELS[reading]}{mark}")
    header += ["U*: seeds only", "ΔU* shuffle: seeds only"]
    rows = []
    for s in summaries:
        bpb_versus, versus = s.get("val_bpb_minus_rope"), s["shuffle_change_minus_rope"]
        cells = [
            s["arm"],
            s["corpus"],
            str(len(s["seeds"])),
            bits_per_byte_cell(s["val_bpb"], bpb_documents),
            "—" if bpb_versus is None else versus_cell(bpb_versus, 3, versus_documents),
            figure_cell(s["U*"]),
            figure_cell(s["shuffle_change"]),
            "—" if versus is None else figure_cell({**versus, "per_seed": [], "split": False}),
        ]
        for reading, kind in interventions:
            cells.append(figure_cell(s["interventions"][reading][kind], 3, mark=with_documents[(reading, kind)]))
        cells += [seeds_only_cell(s["U*"]), seeds_only_cell(s["shuffle_change"])]
        rows.append(cells)
    return markdown_table(header, rows)


def ks_cell(values: list[int | None]) -> str:
    """Per-seed displacements, ``3 / 3 / 2`` (n/a: none)."""
    return " / ".join("n/a" if v is None else str(v) for v in values) if values else "n/a"


def shape_table(summaries: list[dict[str, Any]]) -> str:
    """The well's shape per arm and corpus (H3, ``poslab.analysis.hrope.shape``), from the summary's ``arms``: the
    displacement where each seed's well is deepest, the last displacement read, growth r(2) − r(1) and its
    difference from RoPE's (paired by seed and resample), recovery r(last) − U*, each with its 95% interval over
    seeds and documents, and the t-intervals over seeds alone (secondary)."""
    documents = has_documents([s["shape"][name] for s in summaries for name in SHAPE])
    versus_documents = has_documents([s["shape"].get("growth_minus_rope") for s in summaries])
    mark, versus_mark = ("" if d else SEEDS_ONLY_MARK for d in (documents, versus_documents))
    header = ["arm", "corpus", "deepest at k (per seed)", "last k", f"r(2) − r(1){mark}", "r(2) − r(1): seeds only"]
    header += [f"r(2) − r(1) − RoPE's{versus_mark}", f"r(last) − U*{mark}", "r(last) − U*: seeds only"]
    rows = []
    for s in summaries:
        shape = s["shape"]
        versus = shape.get("growth_minus_rope")
        rows.append([
            s["arm"],
            s["corpus"],
            ks_cell(shape["deepest_at"]),
            ks_cell(sorted({k for k in shape["last"] if k is not None})),
            figure_cell(shape["growth"], mark=documents),
            seeds_only_cell(shape["growth"]),
            "—" if versus is None else versus_cell(versus, 2, versus_documents),
            figure_cell(shape["recovery"], mark=documents),
            seeds_only_cell(shape["recovery"]),
        ])  # fmt: skip
    return markdown_table(header, rows)


def per_run_table(analyses: list[RunAnalysis]) -> str:
    """One row per run: its training steps, sample, bits/byte, and its figures with intervals over documents."""
    arms = Arms(analyses)
    order = ordered_models({arms.of(a) for a in analyses})
    header = ["model", "corpus", "seed", "steps", "docs", "shuffled docs", "pairs", "val bits/byte", "U* [95% CI]"]
    header += ["at k", "ΔU* shuffle [95% CI]"]
    header += [f"{kind}: {READING_LABELS[r]} [CI]" for r in INTERVENTION_READINGS for kind in INTERVENTIONS]
    rows = []
    for a in sorted(analyses, key=lambda a: (corpus_label(a.corpus), order.index(arms.of(a)), a.seed)):
        main = a.main
        cells = [
            arms.of(a),
            corpus_label(a.corpus),
            str(a.seed),
            steps_cell(a.facts.steps, a.facts.recipe_steps),
            str(a.documents),
            str(a.shuffled_documents),
            str(cross_pairs(a)),
            fmt(a.facts.val_bpb, 3).lstrip("+"),
            fmt_ci(main.depth.value, main.depth.interval),
            str(main.well.location),
            fmt_ci(main.shuffle_change.value, main.shuffle_change.interval),
        ]
        for reading in INTERVENTION_READINGS:
            for kind in INTERVENTIONS:
                estimate = a.interventions[reading][kind]
                cells.append(fmt_ci(estimate.value, estimate.interval, 3))
        rows.append(cells)
    return markdown_table(header, rows)


def comparison_table(found: list[Claim]) -> str:
    """The claims under the main reading: A − B with its 95% interval over seeds and documents, the t-interval over
    seeds alone beside it (secondary), the test, t, the verdict (read on the first)."""
    if not found:
        return "(none: the runs have no pair of arms or corpora to compare)"
    rows = []
    for claim in found:
        d = claim.differences["main"]
        difference = d.difference()
        t = "n/a" if math.isnan(difference.t) else f"{difference.t:+.2f}".replace("-", "−").replace("inf", "∞")
        shown = interval_cell(d.interval) if d.has_documents else "n/a (no document replicates)"
        rows.append([claim.text, shown, interval_cell(d.seeds_only), d.test, t, claim.verdict()])
    header = ["comparison", "A − B [95% CI over seeds and documents]", "over seeds only", "test", "t", "verdict"]
    return markdown_table(header, rows)


def robustness_tables(analyses: list[RunAnalysis], trend: str = "linear", found: list[Claim] | None = None) -> str:
    """U* and the shuffle test under every reading of ``u_readings`` (intervals over seeds and documents where the
    runs keep the reading's document replicates, else over seeds only, said so), and which of the write-up's
    claims (``claims``, or ``found``) hold under which readings (one that holds under one only is said to). A
    claim holds where its difference's interval lies on its side of 0."""
    groups = grouped(analyses)
    readings = list(analyses[0].depths)
    header = ["arm", "corpus", *readings]
    u_rows, shuffle_rows = [], []
    for corpus in ordered_corpora(groups):
        for arm in ordered_models({m for m, c in groups if c == corpus}):
            runs = sorted(groups[(arm, corpus)], key=lambda r: r.seed)
            depths = (estimates_cell([depth_of(n)(r) for r in runs], spread=True) for n in readings)
            u_rows.append([arm, corpus, *depths])
            shuffle_rows.append([arm, corpus, *(estimates_cell([shuffle_of(n)(r) for r in runs]) for n in readings)])
    found = claims(analyses) if found is None else found
    lines = []
    for c in found:
        seeds_only = [name for name in readings if not c.over_documents(name)]
        note = f" ({', '.join(seeds_only)}: over seeds only)" if seeds_only else ""
        held = holds_under({name: c.holds(name, seeds_only=True) for name in readings})
        lines.append(f"- {c.text} ({c.rule}): {held}{note}")
    return "\n\n".join(
        [
            "U* (seed mean [95% interval over seeds and documents] sd (seeds)) under each reading: "
            + "; ".join(f"{r.name}: {r.description}" for r in u_readings(trend)),
            markdown_table(header, u_rows),
            "ΔU* shuffle (seed mean [95% interval over seeds and documents]) under each reading:",
            markdown_table(header, shuffle_rows),
            "Claims under each reading:\n"
            + ("\n".join(lines) if lines else "(none: the runs have no pair of arms to compare)"),
        ]
    )


def holds_under(verdicts: dict[str, bool]) -> str:
    held = [name for name, ok in verdicts.items() if ok]
    failed = [name for name, ok in verdicts.items() if not ok]
    if not failed:
        return f"holds under all {len(held)} readings"
    if not held:
        return "holds under none"
    if len(held) == 1:
        return f"holds only under {held[0]}"
    return f"holds under {', '.join(held)}; not under {', '.join(failed)}"


def run_label(analysis: RunAnalysis) -> str:
    return f"{analysis.arm}/{corpus_label(analysis.corpus)} seed {analysis.seed}"


def sample_lines(analyses: list[RunAnalysis]) -> list[str]:
    """What the figures rest on (runs, documents, pairs, training steps), and a warning line for each kind of
    sample too small for the intervals or the comparison with the write-up."""
    documents = [a.documents for a in analyses]
    shuffled = [a.shuffled_documents for a in analyses]
    pairs = [cross_pairs(a) for a in analyses]
    saved = {a.run_dir: a.facts.results for a in analyses if a.facts.results is not None}
    steps = {run_label(a): (a.facts.steps, a.facts.recipe_steps) for a in analyses}
    trained = [done for done, _ in steps.values() if done is not None]

    def span(values: list[int]) -> str:
        return (
            "n/a"
            if not values
            else f"{min(values):,}"
            if min(values) == max(values)
            else f"{min(values):,}–{max(values):,}"
        )

    lines = [
        f"Sample: {len(analyses)} run(s); per run {span(documents)} held-out documents ({span(shuffled)} with four "
        f"or more paragraphs for the shuffle test), {span(pairs)} query/key pairs across paragraphs, "
        f"{span(trained)} training steps (per run: the last table)."
    ]
    return lines + sample_notes(steps, list(saved.values()), {run_label(a): a.documents for a in analyses})


def csv_row(analysis: RunAnalysis) -> dict[str, Any]:
    """One run's CSV row: the main figures, U* and ΔU* under every reading, every intervention reading."""
    summary = analysis.summary()
    keys = ("encoding", "frequencies", "variant", "intervened", "corpus", "seed", "documents", "shuffled_documents")
    row = {k: summary[k] for k in keys if k in summary}
    row["val_bpb"] = analysis.facts.val_bpb
    row |= {k: summary[k] for k in ("U*", "U*_at", "shuffled_U*", "shuffle_change")}
    row |= {f"shape_{k}": summary["shape"][k] for k in ("growth", "recovery", "last")}
    for name, values in summary["readings"].items():
        row[f"U*[{name}]"] = values["U*"]
        row[f"shuffle_change[{name}]"] = values["shuffle_change"]
    for reading, values in summary["interventions"].items():
        for kind in INTERVENTIONS:
            row[f"{kind}[{reading}]"] = values[kind]
    row["run_dir"] = analysis.run_dir
    return row


def runs_csv(analyses: list[RunAnalysis]) -> str:
    """``hrope_runs.csv``: one row per run (``csv_row``), every run's columns in the order they first appear."""
    rows = [csv_row(a) for a in analyses]
    header = list(dict.fromkeys(key for row in rows for key in row))
    return csv_text(header, ([row.get(key) for key in header] for row in rows))


#: the one summary the report renders from (``poslab analyze hrope --from hrope.json``)
SUMMARY_FILE = "hrope.json"


def left_out_line(left_out: list[dict[str, str]]) -> str:
    """The runs the report left out (their training did not succeed), or "" for none."""
    if not left_out:
        return ""
    shown = ", ".join(f"{run['run_dir']} ({run['status']})" for run in left_out)
    return f"{len(left_out)} run(s) left out, their status is not success: {shown}"


def intervention_note(analyses: list[RunAnalysis]) -> str:
    """Which arms' interventions changed another coordinate than the paragraph index (``compute.hierarchy``), and
    that the write-up's interventions do not apply to them; "" when every arm's changed the paragraph index."""
    arms = Arms(analyses)
    other = sorted({(arms.of(a), a.intervened) for a in analyses if a.intervened != "paragraph"})
    if not other:
        return ""
    names = ", ".join(arm for arm, _ in other)
    coordinates = " / ".join(sorted({coordinate for _, coordinate in other}))
    return (
        f"Not applicable to {names}: the write-up's interventions change the paragraph index alone, which these "
        f"arms do not read. Their interventions change the index they read as segments ({coordinates}) instead: "
        "the fake merge joins the two segments meeting at the paragraph boundary, the fake split starts a segment "
        "at the token nearest the longest paragraph's middle that does not start one; the readings count the pairs "
        "by the paragraph labels, as every arm's do. Their figures are a response to a segment boundary, not the "
        "paragraph-index response of the other arms."
    )


def report_text(summary: dict[str, Any], analyses: list[RunAnalysis], figures: tuple[str, str]) -> str:
    """The printed report (and ``hrope_table.md``): every table and note, in the report's order; ``figures``:
    the wells' PNGs it names."""
    settings = summary["settings"]
    trend = settings.get("trend", "linear")
    shuffle = "whole paragraphs between the first and the last" if settings.get("keep_ends", True) else "all paragraphs"
    found = claims(analyses)
    left_out = left_out_line(summary["left_out"])
    not_applicable = intervention_note(analyses)
    return "\n\n".join(
        [
            f"## U* (seed mean [95% interval over seeds and documents] sd (seeds); the write-up's values in the "
            f"{REFERENCE_LABEL} columns)",
            depth_table(analyses),
            "\n".join(sample_lines(analyses)),
            "## Per arm: bits/byte, U*, shuffle test, interventions "
            "(seed mean [95% interval over seeds and documents])",
            render_summary(summary["arms"]),
            f"Shuffle: {shuffle} permuted; ΔU* = U*(shuffled) − U* on the same documents; ΔU* − RoPE's: under the "
            "same shuffles of the same documents, paired by seed. Interventions (after minus before): "
            + "; ".join(f"{READING_LABELS[k]}: {v}" for k, v in INTERVENTION_READINGS.items())
            + " (log attention for same pairs, attention mass for the other two). "
            + intervals_note(),
            *([not_applicable] if not_applicable else []),
            "## The well's shape (H3: suppression grows to about 2-5 paragraphs, then shrinks; main reading)",
            shape_table(summary["arms"]),
            "; ".join(f"{name}: {text}" for name, text in SHAPE.items())
            + ". Seed mean [95% interval over seeds and documents]; r(2) − r(1) − RoPE's paired by seed and resample; "
            "deepest at: U*'s displacement in each seed; last k: the largest displacement with enough pairs (the "
            "same for every run of a corpus: the pairs are the documents').",
            "## Comparisons (main reading; A − B over seeds and documents: paired by seed and resample on one corpus, "
            "Welch's across corpora)",
            comparison_table(found),
            "## U* robustness",
            robustness_tables(analyses, trend, found),
            "## Per run (intervals over documents)",
            per_run_table(analyses),
            f"Documents per run: up to {settings['documents']}; trend {trend}; plots: {figures[0]}, {figures[1]}.",
            *([left_out] if left_out else []),
        ]
    )


def render_hrope(summary: dict[str, Any], directory: Path) -> AnalysisResult:
    """The report and its files from ``summary`` alone, for ``directory``: its arms and comparisons computed again
    from its runs (``seeds.summary_figures``), as the summary it writes holds them."""
    analyses = [RunAnalysis.from_summary(entry) for entry in summary["runs"]]
    summary = {**summary, **summary_figures(analyses)}
    result = AnalysisResult("hrope", "", directory)
    wells = result.add_figure("hrope_well.png", plot_wells(analyses))
    shuffled = result.add_figure("hrope_shuffle.png", plot_wells(analyses, shuffled=True))
    result.report = report_text(summary, analyses, (wells, shuffled))
    result.add_text("hrope_table.md", result.report)
    result.add_text("hrope_runs.csv", runs_csv(analyses))
    result.add_json("hrope_runs.json", [without_run_files(entry) for entry in summary["runs"]])
    result.add_json("hrope_arms.json", {"arms": summary["arms"], "comparisons": summary["comparisons"]})
    result.files[SUMMARY_FILE] = summary_json(summary)
    return result


#: a JSON list of numbers as ``json.dumps(..., indent=2)`` writes it, one number a line (a real newline is never
#: inside a JSON string: it is written ``\n``)
NUMBER_LIST = re.compile(r"\[\n\s*((?:-?[0-9][0-9.eE+-]*|null)(?:,\n\s*(?:-?[0-9][0-9.eE+-]*|null))*)\n\s*\]")


def summary_json(summary: dict[str, Any]) -> bytes:
    """``hrope.json``: indented JSON (``AnalysisResult.add_json``'s) with every list of numbers on one line: each
    run keeps about twenty lists of a thousand document replicates, which one number a line would make 2.5 times
    as large. The same JSON value."""
    text = json.dumps(summary, indent=2, default=str)
    return (NUMBER_LIST.sub(lambda m: "[" + ", ".join(re.split(r",\n\s*", m.group(1))) + "]", text) + "\n").encode()


def without_run_files(entry: dict[str, Any]) -> dict[str, Any]:
    """A run's ``hrope_runs.json`` entry: its summary entry without the facts of its run directory and its
    document replicates (the summary keeps both)."""
    return {key: value for key, value in entry.items() if key not in ("run_files", "replicates")}
