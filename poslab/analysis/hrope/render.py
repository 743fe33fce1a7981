"""The render layer of the hRoPE report: from the summary (``hrope.json``, ``compute.hrope_summary``) alone, the
printed report and its files: ``hrope_table.md`` (every table via ``poslab.analysis.tables.markdown_table``),
``hrope_runs.csv`` (via ``tables.csv_text``), the wells' PNGs (``poslab.analysis.hrope.plots``), and two views
of the summary kept for their readers (docs/hrope, docs/reproduction): ``hrope_runs.json`` (the runs' entries
as before) and ``hrope_arms.json`` (per arm and corpus, and the comparisons). No model, no run directory.

The runs come back as ``RunAnalysis.from_summary``; the figures over seeds that rest on per-seed values alone
(t-intervals, paired and Welch differences: no random draws) are recomputed from them by
``poslab.analysis.hrope.seeds``, and the bootstrap over seeds and documents, which needs the document resamples
gone after compute, is read from the summary's ``arms``.

Changed in the split: ``hrope_runs.csv`` lines end in ``\n`` (the one CSV writer's), not ``\r\n``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

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
)
from poslab.analysis.output import REFERENCE_LABEL, AnalysisResult, sample_notes, steps_cell
from poslab.analysis.stats import Interval, split_seeds
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


#: how the secondary bootstrap columns were drawn, by the arms' ``bootstrap_design`` (``seeds.arm_summary``); a
#: summary written before it was recorded drew one document resample per seed
BOOTSTRAP_NOTES = {
    "crossed": "a bootstrap over seeds and documents, crossed (one document resample for every seed of a "
    "replicate: they read the same documents; secondary: with 3 seeds it under-covers the seed scatter).",
    None: "a bootstrap over seeds, then documents within each seed (secondary: with 3 seeds it under-covers the "
    "seed scatter).",
}


def intervals_note(arms: list[dict[str, Any]]) -> str:
    """How the report's intervals over seeds are made (printed under the summary table)."""
    designs = {arm.get("bootstrap_design") for arm in arms}
    design = designs.pop() if len(designs) == 1 else None
    return (
        "Intervals: Student-t over seeds (the seed is the unit of replication; every run of a corpus reads the same "
        f"held-out documents); seeds that split into two outcomes (a jump over {SPLIT_GAP} in U* or ΔU*) are listed "
        f"one by one. The last two columns: {BOOTSTRAP_NOTES.get(design, BOOTSTRAP_NOTES[None])}"
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


def seed_cell(values: list[float], digits: int = 2) -> str:
    """A figure over seeds: mean [95% t-interval over seeds], and the per-seed values where the seeds split."""
    finite = [v for v in values if math.isfinite(v)]
    note = split_note(values, digits) if split_seeds(finite, SPLIT_GAP) else ""
    return interval_cell(Interval.of(finite), digits) + note


def depth_cell(values: list[float]) -> str:
    """The U* table's cell: ``−0.48 [−0.90, −0.06] sd 0.17 (3)`` (t-interval over seeds); one seed ``−0.30 (1)``."""
    finite = [v for v in values if math.isfinite(v)]
    interval = Interval.of(finite)
    if interval.n == 0:
        return "n/a"
    spread = f" sd {np.std(finite, ddof=1):.2f}" if interval.n > 1 else ""
    note = split_note(values) if split_seeds(finite, SPLIT_GAP) else ""
    return f"{interval_cell(interval)}{spread} ({interval.n}){note}"


def interval_from(saved: dict[str, Any]) -> Interval:
    """An ``Interval.as_dict()`` back (None: nan)."""
    return Interval.from_dict(saved)


def depth_table(analyses: list[RunAnalysis]) -> str:
    """The write-up's layout: models x corpora, U* (seed mean [95% t-interval over seeds] sd (seeds)); the
    write-up's values in columns of their own, labelled as a reference, for the corpora it has."""
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
            cells.append(depth_cell([r.well.depth for r in runs]) if runs else "—")
        cells += [fmt(references[model].get(corpus)) for corpus in referenced]
        rows.append(cells)
    return markdown_table(header, rows)


def figure_cell(figure: dict[str, Any], digits: int = 2) -> str:
    """A ``seed_figure`` as a cell: mean [95% t-interval over seeds], with the per-seed values where they split."""
    values = [math.nan if v is None else v for v in figure["per_seed"]]
    return interval_cell(interval_from(figure), digits) + (split_note(values, digits) if figure["split"] else "")


def bootstrap_cell(figure: dict[str, Any]) -> str:
    low, high = figure["bootstrap_seeds_documents"]
    return "n/a" if low is None or high is None else f"[{fmt(low)}, {fmt(high)}]"


def render_summary(summaries: list[dict[str, Any]]) -> str:
    """Per arm and corpus, seed means with 95% t-intervals over seeds: validation bits/byte, U*, the shuffle test
    (ΔU*, and ΔU* minus RoPE's, paired by seed), the interventions under every reading; last, the secondary
    bootstrap over seeds and documents for U* and ΔU*. The allocation study's table, from the summary's
    ``arms`` (``seeds.arm_summaries``)."""
    header = ["arm", "corpus", "seeds", "val bits/byte", "U*", "ΔU* shuffle", "ΔU* − RoPE's"]
    for reading in INTERVENTION_READINGS:
        header += [f"merge: {READING_LABELS[reading]}", f"split: {READING_LABELS[reading]}"]
    header += ["U*: bootstrap seeds, documents", "ΔU* shuffle: bootstrap seeds, documents"]
    rows = []
    for s in summaries:
        versus = s["shuffle_change_minus_rope"]
        cells = [
            s["arm"],
            s["corpus"],
            str(len(s["seeds"])),
            interval_from(s["val_bpb"]).cell(3),
            figure_cell(s["U*"]),
            figure_cell(s["shuffle_change"]),
            "—" if versus is None else interval_cell(interval_from(versus["difference"])),
        ]
        for reading in INTERVENTION_READINGS:
            cells += [figure_cell(s["interventions"][reading][kind], 3) for kind in INTERVENTIONS]
        cells += [bootstrap_cell(s["U*"]), bootstrap_cell(s["shuffle_change"])]
        rows.append(cells)
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
    """The claims under the main reading: A − B with its 95% interval over seeds, the test, t, the verdict."""
    if not found:
        return "(none: the runs have no pair of arms or corpora to compare)"
    rows = []
    for claim in found:
        d = claim.differences["main"]
        t = "n/a" if math.isnan(d.t) else f"{d.t:+.2f}".replace("-", "−").replace("inf", "∞")
        rows.append([claim.text, interval_cell(d.interval), d.test, t, claim.verdict()])
    return markdown_table(["comparison", "A − B [95% CI]", "test", "t", "verdict"], rows)


def robustness_tables(analyses: list[RunAnalysis], trend: str = "linear", found: list[Claim] | None = None) -> str:
    """U* and the shuffle test under every reading of ``u_readings`` (t-intervals over seeds), and which of the
    write-up's claims (``claims``, or ``found``) hold under which readings (one that holds under one only is
    said to). A claim holds where its seed-level difference's interval lies on its side of 0."""
    groups = grouped(analyses)
    readings = list(analyses[0].depths)
    header = ["arm", "corpus", *readings]
    u_rows, shuffle_rows = [], []
    for corpus in ordered_corpora(groups):
        for arm in ordered_models({m for m, c in groups if c == corpus}):
            runs = groups[(arm, corpus)]
            u_rows.append([arm, corpus, *(depth_cell([depth_of(name)(r) for r in runs]) for name in readings)])
            shuffle_rows.append([arm, corpus, *(seed_cell([shuffle_of(name)(r) for r in runs]) for name in readings)])
    found = claims(analyses) if found is None else found
    lines = [f"- {c.text} ({c.rule}): {holds_under({name: c.holds(name) for name in readings})}" for c in found]
    return "\n\n".join(
        [
            "U* (seed mean [95% t-interval over seeds] sd (seeds)) under each reading: "
            + "; ".join(f"{r.name}: {r.description}" for r in u_readings(trend)),
            markdown_table(header, u_rows),
            "ΔU* shuffle (seed mean [95% t-interval over seeds]) under each reading:",
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
            f"## U* (seed mean [95% t-interval over seeds] sd (seeds); the write-up's values in the "
            f"{REFERENCE_LABEL} columns)",
            depth_table(analyses),
            "\n".join(sample_lines(analyses)),
            "## Per arm: bits/byte, U*, shuffle test, interventions (seed mean [95% t-interval over seeds])",
            render_summary(summary["arms"]),
            f"Shuffle: {shuffle} permuted; ΔU* = U*(shuffled) − U* on the same documents; ΔU* − RoPE's: under the "
            "same shuffles of the same documents, paired by seed. Interventions (after minus before): "
            + "; ".join(f"{READING_LABELS[k]}: {v}" for k, v in INTERVENTION_READINGS.items())
            + " (log attention for same pairs, attention mass for the other two). "
            + intervals_note(summary["arms"]),
            *([not_applicable] if not_applicable else []),
            "## Comparisons (main reading; A − B over seeds: paired by seed on one corpus, Welch's across corpora)",
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
    """The report and its files from ``summary`` alone, for ``directory``."""
    analyses = [RunAnalysis.from_summary(entry) for entry in summary["runs"]]
    result = AnalysisResult("hrope", "", directory)
    wells = result.add_figure("hrope_well.png", plot_wells(analyses))
    shuffled = result.add_figure("hrope_shuffle.png", plot_wells(analyses, shuffled=True))
    result.report = report_text(summary, analyses, (wells, shuffled))
    result.add_text("hrope_table.md", result.report)
    result.add_text("hrope_runs.csv", runs_csv(analyses))
    result.add_json("hrope_runs.json", [without_run_files(entry) for entry in summary["runs"]])
    result.add_json("hrope_arms.json", {"arms": summary["arms"], "comparisons": summary["comparisons"]})
    result.add_json(SUMMARY_FILE, summary)
    return result


def without_run_files(entry: dict[str, Any]) -> dict[str, Any]:
    """A run's ``hrope_runs.json`` entry: its summary entry without the facts of its run directory and its
    document replicates (the summary keeps both)."""
    return {key: value for key, value in entry.items() if key not in ("run_files", "replicates")}
