"""``poslab analyze hrope RUN_DIR...``: the hRoPE write-up's table, well curves, shuffle test and interventions.

Each run is analysed on its own held-out documents (``poslab.analysis.hrope``); runs are then grouped by
(encoding, corpus) and their seeds summarised: mean, standard deviation over seeds, and each seed's bootstrap
interval over documents. Written to ``--output-dir`` (default: the first multirun directory's ``analysis/hrope/``,
or ``RUN_DIR/analysis/hrope/`` for one run): ``hrope_table.md`` (printed too), ``hrope_runs.json``,
``hrope_runs.csv``, ``hrope_well.png``, ``hrope_shuffle.png``; each run's own figures also go to its loggers.
"""

from __future__ import annotations

import csv
import io
import logging
import math
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from poslab.analysis.hrope import RunAnalysis, analyze_run
from poslab.analysis.logging import log_analysis
from poslab.analysis.output import (
    REFERENCE_LABEL,
    AnalysisResult,
    sample_notes,
    steps_cell,
    training_steps,
)
from poslab.analysis.results import SUCCESS, run_status
from poslab.errors import MissingRunError
from poslab.io import read_json
from poslab.run_files import RESULTS_FILE, default_analysis_dir, find_runs

log = logging.getLogger("poslab")

#: how the write-up names the corpora (wikitext2_offline: trained on enwiki, evaluated on WikiText-2 test)
CORPUS_LABELS = {
    "python_code": "Code",
    "wikitext2": "WikiText-2",
    "wikitext2_offline": "WikiText-2",
    "openwebtext": "OpenWebText",
}
#: the write-up's U* table (three seeds, 8 layers x 512)
REFERENCE_DEPTHS = {
    "hrope_axial": {"Code": -0.77, "WikiText-2": -0.48, "OpenWebText": -0.31},
    "rand_axial": {"Code": -0.24, "WikiText-2": -0.22, "OpenWebText": -0.33},
}
MODEL_ORDER = ("hrope_axial", "rand_axial", "period_axial", "rope")


def corpus_label(name: str) -> str:
    return CORPUS_LABELS.get(name, name)


def fmt(value: float, digits: int = 2) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:+.{digits}f}".replace("-", "−")


def seed_summary(values: list[float]) -> str:
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return "n/a"
    spread = f" ± {np.std(finite, ddof=1):.2f}" if len(finite) > 1 else ""
    return f"{fmt(float(np.mean(finite)))}{spread} ({len(finite)})"


def grouped(analyses: list[RunAnalysis]) -> dict[tuple[str, str], list[RunAnalysis]]:
    groups: dict[tuple[str, str], list[RunAnalysis]] = defaultdict(list)
    for a in analyses:
        groups[(a.encoding, corpus_label(a.corpus))].append(a)
    return groups


def ordered_models(names: set[str]) -> list[str]:
    return [m for m in MODEL_ORDER if m in names] + sorted(names - set(MODEL_ORDER))


def cross_pairs(analysis: RunAnalysis) -> int:
    """The query/key pairs in different paragraphs behind a run's well (every displacement >= 1 shown)."""
    return int(analysis.well.pairs[1:].sum())


def depth_table(analyses: list[RunAnalysis]) -> str:
    """The write-up's layout: models x corpora, U* (seed mean ± sd (seeds)); the write-up's values in columns
    of their own, labelled as a reference, for the corpora it has."""
    groups = grouped(analyses)
    corpora = sorted(
        {c for _, c in groups},
        key=lambda c: list(CORPUS_LABELS.values()).index(c) if c in CORPUS_LABELS.values() else 99,
    )
    models = ordered_models({m for m, _ in groups})
    referenced = [c for c in corpora if any(c in REFERENCE_DEPTHS.get(m, {}) for m in models)]
    header = [*corpora, *(f"{c}: {REFERENCE_LABEL}" for c in referenced)]
    lines = ["| U* | " + " | ".join(header) + " |", "|---|" + "---|" * len(header)]
    for model in models:
        cells = []
        for corpus in corpora:
            runs = groups.get((model, corpus), [])
            cells.append(seed_summary([r.well.depth for r in runs]) if runs else "—")
        cells += [fmt(REFERENCE_DEPTHS.get(model, {}).get(corpus)) for corpus in referenced]
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def per_run_table(analyses: list[RunAnalysis]) -> str:
    lines = [
        "| model | corpus | seed | steps | docs | pairs | U* [95% CI] | at k | ΔU* shuffle [95% CI] "
        "| fake-merge Δ [CI] | fake-split Δ [CI] |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for a in sorted(
        analyses,
        key=lambda a: (
            corpus_label(a.corpus),
            MODEL_ORDER.index(a.encoding) if a.encoding in MODEL_ORDER else 9,
            a.seed,
        ),
    ):
        lines.append(
            f"| {a.encoding} | {corpus_label(a.corpus)} | {a.seed} | {steps_cell(*training_steps(a.run_dir))} "
            f"| {a.documents} | {cross_pairs(a)} | {fmt(a.well.depth)} "
            f"[{fmt(a.depth_interval[0])}, {fmt(a.depth_interval[1])}] | {a.well.location} | "
            f"{fmt(a.shuffle_change)} [{fmt(a.shuffle_interval[0])}, {fmt(a.shuffle_interval[1])}] | "
            f"{fmt(a.merge_change, 3)} [{fmt(a.merge_interval[0], 3)}, {fmt(a.merge_interval[1], 3)}] | "
            f"{fmt(a.split_change, 3)} [{fmt(a.split_interval[0], 3)}, {fmt(a.split_interval[1], 3)}] |"
        )
    return "\n".join(lines)


def excludes_zero(ci: tuple[float, float]) -> bool:
    return math.isfinite(ci[0]) and (ci[0] > 0 or ci[1] < 0)


def summary_table(analyses: list[RunAnalysis]) -> str:
    """Per model and corpus: seed means of the shuffle change and the interventions, and how many seeds'
    intervals exclude zero."""
    lines = [
        "| model | corpus | ΔU* shuffle: mean ± sd (CI excl. 0) "
        "| fake-merge Δ (CI excl. 0) | fake-split Δ (CI excl. 0) |",
        "|---|---|---|---|---|",
    ]
    for (model, corpus), runs in sorted(grouped(analyses).items(), key=lambda kv: (kv[0][1], kv[0][0])):

        def cell(values: list[float], cis: list[tuple[float, float]]) -> str:
            return f"{seed_summary(values)} ({sum(excludes_zero(c) for c in cis)}/{len(cis)})"

        lines.append(
            f"| {model} | {corpus} | {cell([r.shuffle_change for r in runs], [r.shuffle_interval for r in runs])} | "
            f"{cell([r.merge_change for r in runs], [r.merge_interval for r in runs])} | "
            f"{cell([r.split_change for r in runs], [r.split_interval for r in runs])} |"
        )
    return "\n".join(lines)


def run_label(analysis: RunAnalysis) -> str:
    return f"{analysis.encoding}/{corpus_label(analysis.corpus)} seed {analysis.seed}"


def sample_lines(analyses: list[RunAnalysis]) -> list[str]:
    """What the figures rest on (runs, documents, pairs, training steps), and a warning line for each kind of
    sample too small for the intervals or the comparison with the write-up."""
    documents = [a.documents for a in analyses]
    pairs = [cross_pairs(a) for a in analyses]
    saved = {a.run_dir: read_json(path) for a in analyses if (path := Path(a.run_dir) / RESULTS_FILE).is_file()}
    steps = {run_label(a): training_steps(a.run_dir, saved.get(a.run_dir, {})) for a in analyses}
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
        f"Sample: {len(analyses)} run(s); per run {span(documents)} held-out documents, {span(pairs)} query/key "
        f"pairs across paragraphs, {span(trained)} training steps (per run: the last table)."
    ]
    return lines + sample_notes(steps, list(saved.values()), {run_label(a): a.documents for a in analyses})


def plot_wells(analyses: list[RunAnalysis], shuffled: bool = False) -> Any:
    """One panel per corpus, one line per model (seed mean; thin lines: single seeds); one legend beside the
    panels, where it covers no curve, and a model's colour the same in every panel."""
    from matplotlib.ticker import MaxNLocator

    from poslab.plotting import plt  # Agg, and the CJK font for corpora named in Chinese

    groups = grouped(analyses)
    corpora = sorted({c for _, c in groups})
    models = ordered_models({m for m, _ in groups})
    fig, axes = plt.subplots(
        1, len(corpora), figsize=(4.6 * len(corpora) + 1.8, 4), squeeze=False, layout="constrained"
    )
    handles: dict[str, Any] = {}
    for ax, corpus in zip(axes[0], corpora):
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
            (handles[model],) = ax.plot(range(1, len(mean) + 1), mean, color=color, marker="o", markersize=3)
        ax.axhline(0.0, color="grey", linewidth=0.6)
        ax.set_title(corpus + (" (paragraphs shuffled)" if shuffled else ""))
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
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


def runs_csv(analyses: list[RunAnalysis]) -> str:
    buffer = io.StringIO()
    fields = [
        "encoding",
        "corpus",
        "seed",
        "documents",
        "U*",
        "U*_at",
        "shuffled_U*",
        "shuffle_change",
        "merge_change",
        "split_change",
        "run_dir",
    ]
    writer = csv.DictWriter(buffer, fieldnames=fields, extrasaction="ignore")
    writer.writeheader()
    for a in analyses:
        writer.writerow(a.summary())
    return buffer.getvalue()


def analyze_hrope(paths: list[str], documents: int = 200, **settings: Any) -> AnalysisResult:
    """Analyse every run under ``paths``: the printed report, and the tables and plots for the first multirun
    directory's ``analysis/hrope/`` (or ``RUN_DIR/analysis/hrope/`` for one run, or ``--output-dir``)."""
    found = find_runs(paths)
    # a run whose training did not succeed (results.json status: diverged ...) is left out and listed
    skipped = [(run, status) for run in found if (status := run_status(run)) != SUCCESS]
    runs = [run for run in found if run not in {r for r, _ in skipped}]
    left_out = (
        f"{len(skipped)} run(s) left out, their status is not {SUCCESS}: "
        + ", ".join(f"{run} ({status})" for run, status in skipped)
        if skipped
        else ""
    )
    if not runs:
        raise MissingRunError(f"no run to analyse under {', '.join(map(str, paths))}: {left_out}.")
    analyses = []
    for number, run in enumerate(runs, 1):
        log.info("analyze hrope: run %d/%d %s", number, len(runs), run)
        analyses.append(analyze_run(run, documents=documents, **settings))
    result = AnalysisResult("hrope", "", default_analysis_dir("hrope", paths, runs))
    wells = result.add_figure("hrope_well.png", plot_wells(analyses))
    shuffled = result.add_figure("hrope_shuffle.png", plot_wells(analyses, shuffled=True))
    result.report = "\n\n".join(
        [
            f"## U* (seed mean ± sd (seeds); the write-up's values in the {REFERENCE_LABEL} columns)",
            depth_table(analyses),
            "\n".join(sample_lines(analyses)),
            "## Shuffle test and interventions (seed means; seeds whose 95% bootstrap interval excludes 0)",
            summary_table(analyses),
            "## Per run",
            per_run_table(analyses),
            f"Documents per run: up to {documents}; trend {settings.get('trend', 'linear')}; "
            f"plots: {wells}, {shuffled}.",
            *([left_out] if left_out else []),
        ]
    )
    result.add_text("hrope_table.md", result.report)
    result.add_text("hrope_runs.csv", runs_csv(analyses))
    result.add_json("hrope_runs.json", [a.summary() for a in analyses])

    def log_to_the_runs_loggers(directory: Path) -> str | None:
        for analysis in analyses:
            scalars = {
                f"hrope/{k}": float(v)
                for k, v in analysis.summary().items()
                if k in ("U*", "shuffle_change", "merge_change", "split_change") and v is not None and math.isfinite(v)
            }
            curve = [
                [k, r, int(n)] for k, (r, n) in enumerate(zip(analysis.summary()["residual"], analysis.well.pairs))
            ]
            tables = {"hrope/well_curve": (["displacement", "mean_residual", "pairs"], curve)}
            log_analysis(analysis.config, analysis.run_dir, scalars, {"hrope/well": directory / wells}, tables)
        return None

    result.after_write.append(log_to_the_runs_loggers)
    return result
