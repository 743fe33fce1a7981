"""``poslab analyze hrope RUN_DIR...``: the hRoPE write-up's table, well curves, shuffle test and interventions.

Each run is analysed on its own held-out documents (``poslab.analysis.hrope``); runs are then grouped by arm
(the encoding, and its frequency allocation when the runs have several) and corpus, and their seeds summarised:
the seed mean with a 95% bootstrap interval over seeds and documents together (``nested_interval``), the
standard deviation over seeds, and each seed's own interval over documents (the per-run table). Written to
``--output-dir`` (default: the first multirun directory's ``analysis/hrope/``, or ``RUN_DIR/analysis/hrope/``
for one run): ``hrope_table.md`` (printed too), ``hrope_runs.json``, ``hrope_runs.csv``, ``hrope_well.png``,
``hrope_shuffle.png``; each run's own figures also go to its loggers.
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

from poslab.analysis.hrope import (
    INTERVENTION_READINGS,
    INTERVENTIONS,
    RunAnalysis,
    analyze_run,
    nested_difference,
    nested_interval,
    seed_mean,
    u_readings,
)
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


FREQUENCY_ORDER = ("split", "full", "interleaved", "token_first")
#: how each intervention reading's cells are written: log attention (3 decimals), attention mass (3 decimals)
READING_LABELS = {
    "same_pairs": "same pairs",
    "persistent_mass": "persistent cross mass",
    "real_cross_mass": "real cross mass",
}


def corpus_label(name: str) -> str:
    return CORPUS_LABELS.get(name, name)


def fmt(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:+.{digits}f}".replace("-", "−")


def fmt_ci(value: float, ci: tuple[float, float], digits: int = 2) -> str:
    return f"{fmt(value, digits)} [{fmt(ci[0], digits)}, {fmt(ci[1], digits)}]"


def seed_summary(values: list[float]) -> str:
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return "n/a"
    spread = f" ± {np.std(finite, ddof=1):.2f}" if len(finite) > 1 else ""
    return f"{fmt(float(np.mean(finite)))}{spread} ({len(finite)})"


class Arms:
    """The arms of a report: each run's encoding, with its frequency allocation when the runs have more than one
    (``hrope_axial:interleaved``); in the write-up's order (MODEL_ORDER, then FREQUENCY_ORDER)."""

    def __init__(self, analyses: list[RunAnalysis]) -> None:
        self.with_allocation = len({a.frequencies for a in analyses if a.frequencies is not None}) > 1

    def of(self, analysis: RunAnalysis) -> str:
        return analysis.arm if self.with_allocation else analysis.encoding

    @staticmethod
    def order(names: set[str]) -> list[str]:
        def key(name: str) -> tuple[int, int, str]:
            encoding, _, frequencies = name.partition(":")
            return (
                MODEL_ORDER.index(encoding) if encoding in MODEL_ORDER else len(MODEL_ORDER),
                FREQUENCY_ORDER.index(frequencies) if frequencies in FREQUENCY_ORDER else -1,
                name,
            )

        return sorted(names, key=key)


def grouped(analyses: list[RunAnalysis]) -> dict[tuple[str, str], list[RunAnalysis]]:
    arms = Arms(analyses)
    groups: dict[tuple[str, str], list[RunAnalysis]] = defaultdict(list)
    for a in analyses:
        groups[(arms.of(a), corpus_label(a.corpus))].append(a)
    return groups


def ordered_models(names: set[str]) -> list[str]:
    return Arms.order(names)


def ordered_corpora(groups: dict[tuple[str, str], Any]) -> list[str]:
    labels = list(CORPUS_LABELS.values())
    return sorted({c for _, c in groups}, key=lambda c: (labels.index(c) if c in labels else 99, c))


def cross_pairs(analysis: RunAnalysis) -> int:
    """The query/key pairs in different paragraphs behind a run's well (every displacement >= 1 shown)."""
    return int(analysis.well.pairs[1:].sum())


def depth_table(analyses: list[RunAnalysis]) -> str:
    """The write-up's layout: models x corpora, U* (seed mean ± sd (seeds)); the write-up's values in columns
    of their own, labelled as a reference, for the corpora it has."""
    groups = grouped(analyses)
    corpora = ordered_corpora(groups)
    models = ordered_models({m for m, _ in groups})
    references = {m: REFERENCE_DEPTHS.get(m.partition(":")[0], {}) for m in models}
    referenced = [c for c in corpora if any(c in references[m] for m in models)]
    header = [*corpora, *(f"{c}: {REFERENCE_LABEL}" for c in referenced)]
    lines = ["| U* | " + " | ".join(header) + " |", "|---|" + "---|" * len(header)]
    for model in models:
        cells = []
        for corpus in corpora:
            runs = groups.get((model, corpus), [])
            cells.append(seed_summary([r.well.depth for r in runs]) if runs else "—")
        cells += [fmt(references[model].get(corpus)) for corpus in referenced]
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def validation_bpb(run_dir: str) -> float:
    """The run's last validation bits per byte (``results.json``), nan when it has none."""
    path = Path(run_dir) / RESULTS_FILE
    value = (read_json(path).get("figures") or {}).get("val_bpb") if path.is_file() else None
    return math.nan if value is None else float(value)


def rope_runs(groups: dict[tuple[str, str], list[RunAnalysis]], corpus: str) -> list[RunAnalysis]:
    return groups.get(("rope", corpus), [])


def summary_table(analyses: list[RunAnalysis]) -> str:
    """Per arm and corpus, seed means with 95% intervals over seeds and documents together: validation bits/byte,
    U*, the shuffle test (ΔU*, and ΔU* minus RoPE's under the same shuffle), the interventions under every
    reading. The allocation study's table."""
    groups = grouped(analyses)
    header = ["arm", "corpus", "seeds", "val bits/byte", "U*", "ΔU* shuffle", "ΔU* − RoPE's"]
    for reading in INTERVENTION_READINGS:
        header += [f"merge: {READING_LABELS[reading]}", f"split: {READING_LABELS[reading]}"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for corpus in ordered_corpora(groups):
        baseline = [r.main.shuffle_change for r in rope_runs(groups, corpus)]
        for arm in ordered_models({m for m, c in groups if c == corpus}):
            runs = groups[(arm, corpus)]
            bpb = [validation_bpb(r.run_dir) for r in runs]
            finite_bpb = [b for b in bpb if math.isfinite(b)]
            changes = [r.main.shuffle_change for r in runs]
            versus = nested_difference(changes, baseline) if baseline and arm != "rope" else None
            cells = [
                arm,
                corpus,
                str(len(runs)),
                f"{np.mean(finite_bpb):.3f}" if finite_bpb else "n/a",
                fmt_ci(*nested_interval([r.main.depth for r in runs])),
                fmt_ci(*nested_interval(changes)),
                "—" if versus is None else fmt_ci(*versus),
            ]
            for reading in INTERVENTION_READINGS:
                for kind in INTERVENTIONS:
                    cells.append(fmt_ci(*nested_interval([r.interventions[reading][kind] for r in runs]), 3))
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def per_run_table(analyses: list[RunAnalysis]) -> str:
    arms = Arms(analyses)
    order = ordered_models({arms.of(a) for a in analyses})
    header = ["model", "corpus", "seed", "steps", "docs", "shuffled docs", "pairs", "val bits/byte", "U* [95% CI]"]
    header += ["at k", "ΔU* shuffle [95% CI]"]
    header += [f"{kind}: {READING_LABELS[r]} [CI]" for r in INTERVENTION_READINGS for kind in INTERVENTIONS]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for a in sorted(analyses, key=lambda a: (corpus_label(a.corpus), order.index(arms.of(a)), a.seed)):
        main = a.main
        cells = [
            arms.of(a),
            corpus_label(a.corpus),
            str(a.seed),
            steps_cell(*training_steps(a.run_dir)),
            str(a.documents),
            str(a.shuffled_documents),
            str(cross_pairs(a)),
            fmt(validation_bpb(a.run_dir), 3).lstrip("+"),
            fmt_ci(main.depth.value, main.depth.interval),
            str(main.well.location),
            fmt_ci(main.shuffle_change.value, main.shuffle_change.interval),
        ]
        for reading in INTERVENTION_READINGS:
            for kind in INTERVENTIONS:
                estimate = a.interventions[reading][kind]
                cells.append(fmt_ci(estimate.value, estimate.interval, 3))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def excludes_zero(ci: tuple[float, float]) -> bool:
    return math.isfinite(ci[0]) and (ci[0] > 0 or ci[1] < 0)


def robustness_tables(analyses: list[RunAnalysis], trend: str = "linear") -> str:
    """U* and the shuffle test under every reading of ``u_readings``, and which of the write-up's claims hold
    under which readings (a claim that holds under one only is said to)."""
    groups = grouped(analyses)
    readings = list(analyses[0].depths)
    corpora = ordered_corpora(groups)
    header = "| arm | corpus | " + " | ".join(readings) + " |\n|---|---|" + "---|" * len(readings)
    u_rows, shuffle_rows = [header], [header]
    for corpus in corpora:
        for arm in ordered_models({m for m, c in groups if c == corpus}):
            runs = groups[(arm, corpus)]
            u_rows.append(
                f"| {arm} | {corpus} | "
                + " | ".join(seed_summary([r.depths[name].depth.value for r in runs]) for name in readings)
                + " |"
            )
            shuffle_rows.append(
                f"| {arm} | {corpus} | "
                + " | ".join(
                    fmt_ci(*nested_interval([r.depths[name].shuffle_change for r in runs])) for name in readings
                )
                + " |"
            )
    claims: list[tuple[str, dict[str, bool]]] = []
    for corpus in corpora:
        arms = ordered_models({m for m, c in groups if c == corpus})
        for arm in (a for a in arms if a.startswith("hrope_axial")):
            control = arm.replace("hrope_axial", "rand_axial", 1)
            if control in arms:
                claims.append(
                    (
                        f"{corpus}: {arm} deeper than {control} (seed means)",
                        {
                            name: seed_mean([r.depths[name].depth for r in groups[(arm, corpus)]])
                            < seed_mean([r.depths[name].depth for r in groups[(control, corpus)]])
                            for name in readings
                        },
                    )
                )
        if ("rope", corpus) in groups:
            for arm in (a for a in arms if a != "rope"):
                claims.append(
                    (
                        f"{corpus}: the shuffle moves {arm}'s U* beyond RoPE's (interval of the difference excludes 0)",
                        {
                            name: excludes_zero(
                                nested_difference(
                                    [r.depths[name].shuffle_change for r in groups[(arm, corpus)]],
                                    [r.depths[name].shuffle_change for r in groups[("rope", corpus)]],
                                )[1]
                            )
                            for name in readings
                        },
                    )
                )
    for arm in ordered_models({m for m, _ in groups}):
        present = [c for c in corpora if (arm, c) in groups]
        if arm.startswith("hrope_axial"):  # the write-up's corpus ordering of its depth: Code < WikiText-2 < ...
            for deeper, shallower in zip(present, present[1:]):
                claims.append(
                    (
                        f"{arm}: deeper on {deeper} than on {shallower} (seed means)",
                        {
                            name: seed_mean([r.depths[name].depth for r in groups[(arm, deeper)]])
                            < seed_mean([r.depths[name].depth for r in groups[(arm, shallower)]])
                            for name in readings
                        },
                    )
                )
    lines = [f"- {text}: {holds_under(verdicts)}" for text, verdicts in claims]
    return "\n\n".join(
        [
            "U* (seed mean ± sd (seeds)) under each reading: "
            + "; ".join(f"{r.name}: {r.description}" for r in u_readings(trend)),
            "\n".join(u_rows),
            "ΔU* shuffle (seed mean [95% interval over seeds and documents]) under each reading:",
            "\n".join(shuffle_rows),
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
        f"Sample: {len(analyses)} run(s); per run {span(documents)} held-out documents ({span(shuffled)} with four "
        f"or more paragraphs for the shuffle test), {span(pairs)} query/key pairs across paragraphs, "
        f"{span(trained)} training steps (per run: the last table)."
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


def csv_row(analysis: RunAnalysis) -> dict[str, Any]:
    """One run's CSV row: the main figures, U* and ΔU* under every reading, every intervention reading."""
    summary = analysis.summary()
    row = {k: summary[k] for k in ("encoding", "frequencies", "corpus", "seed", "documents", "shuffled_documents")}
    row["val_bpb"] = validation_bpb(analysis.run_dir)
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
    rows = [csv_row(a) for a in analyses]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
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
    shuffle = "whole paragraphs between the first and the last" if settings.get("keep_ends", True) else "all paragraphs"
    result.report = "\n\n".join(
        [
            f"## U* (seed mean ± sd (seeds); the write-up's values in the {REFERENCE_LABEL} columns)",
            depth_table(analyses),
            "\n".join(sample_lines(analyses)),
            "## Per arm: bits/byte, U*, shuffle test, interventions "
            "(seed mean [95% interval over seeds and documents])",
            summary_table(analyses),
            f"Shuffle: {shuffle} permuted; ΔU* = U*(shuffled) − U* on the same documents; ΔU* − RoPE's: under the "
            "same shuffles of the same documents. Interventions (after minus before): "
            + "; ".join(f"{READING_LABELS[k]}: {v}" for k, v in INTERVENTION_READINGS.items())
            + " (log attention for same pairs, attention mass for the other two).",
            "## U* robustness",
            robustness_tables(analyses, settings.get("trend", "linear")),
            "## Per run (intervals over documents)",
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
            for reading, by_kind in analysis.interventions.items():
                for kind, estimate in by_kind.items():
                    if math.isfinite(estimate.value):
                        scalars[f"hrope/{kind}/{reading}"] = estimate.value
            curve = [
                [k, r, int(n)] for k, (r, n) in enumerate(zip(analysis.summary()["residual"], analysis.well.pairs))
            ]
            tables = {"hrope/well_curve": (["displacement", "mean_residual", "pairs"], curve)}
            log_analysis(analysis.config, analysis.run_dir, scalars, {"hrope/well": directory / wells}, tables)
        return None

    result.after_write.append(log_to_the_runs_loggers)
    return result
