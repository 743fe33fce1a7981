"""``poslab report zoo DIR``: the zoo's runs read and computed (``poslab.analysis.zoo``), then drawn
(``poslab.analysis.zoo_render``) into ``DIR/analysis/zoo/``: ``zoo.md``, ``zoo.csv``, ``zoo.json`` and the PNGs."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from poslab.analysis.claims import parse_claim
from poslab.analysis.output import AnalysisResult, short_run_warning
from poslab.analysis.zoo import (
    baselines,
    load_zoo,
    overall_ranking,
    runs_by_task,
    task_rows,
    training_seconds,
    unranked_reason,
    zoo_summary,
)
from poslab.analysis.zoo_claims import claim_summary
from poslab.analysis.zoo_diagnostics import diagnostics_markdown, diagnostics_summary, plot_diagnostics
from poslab.analysis.zoo_render import claims_table, plot_accuracy, plot_heatmap, runs_csv, zoo_markdown
from poslab.runs.files import ANALYSIS_DIR


def report_zoo(directory: str | Path, claims: Sequence[str] = ()) -> AnalysisResult:
    """The zoo's tables (the overall ranking, then one per task, then each of ``claims``: ``zoo_claims``) and its
    files, for ``DIR/analysis/zoo/``."""
    for claim in claims:  # a malformed claim stops before any run is read
        parse_claim(claim)
    runs, notes = load_zoo(directory)
    by_task = runs_by_task(runs)
    tables = {task: task_rows(members) for task, members in by_task.items()}
    train_lengths = {task: members[0].train_length for task, members in by_task.items()}
    floors = {task: baselines(members) for task, members in by_task.items()}
    reasons = {task: unranked_reason(members, tables[task], floors[task]) for task, members in by_task.items()}
    ranking = overall_ranking(tables, {task: why for task, why in reasons.items() if why})
    order = ranking.order + sorted({r.encoding for r in runs} - set(ranking.order))
    seconds = training_seconds(runs)
    warning = short_run_warning({f"{r.task} {r.encoding} seed {r.seed}": r.steps for r in runs})
    notes = ([warning] if warning else []) + notes
    checked = [claim_summary(runs, claim) for claim in claims]
    diagnostics = diagnostics_summary(by_task, order)
    tables_text = zoo_markdown(tables, train_lengths, floors, ranking, seconds, order)
    text = "\n\n".join(
        part for part in (tables_text, diagnostics_markdown(diagnostics), claims_table(checked)) if part
    ) + ("\n\n" + "\n".join(notes) if notes else "")
    summary, default = zoo_summary(tables, floors, ranking, seconds), Path(directory) / ANALYSIS_DIR / "zoo"
    if diagnostics:  # a zoo without the diagnostic tasks' figures writes the summary it always did
        summary["diagnostics"] = diagnostics
    if checked:  # a report without claims writes the summary it always did
        summary["claims"] = checked
    result = AnalysisResult.with_tables("zoo", text, default, runs_csv(runs), summary, "zoo.json")
    result.add_figure("zoo_accuracy.png", plot_accuracy(tables, train_lengths, floors, order))
    result.add_figure("zoo_heatmap.png", plot_heatmap(tables, order))
    if diagnostics:
        result.add_figure("zoo_diagnostics.png", plot_diagnostics(diagnostics))
    return result
