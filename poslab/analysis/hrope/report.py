"""``poslab analyze hrope RUN_DIR...``: the hRoPE write-up's table, well curves, shuffle test and interventions.

Each run is analysed on its own held-out documents (``poslab.analysis.hrope.compute``); runs are then grouped by
arm (the encoding, and its frequency allocation when the runs have several) and corpus, and their seeds
summarised (``poslab.analysis.hrope.seeds``, ``poslab.analysis.hrope.intervals``). Every run of a corpus reads the
same held-out documents and draws the same document resamples, so every figure over seeds is the seed mean with its
95% interval over seeds and documents (crossed: seed term + document term, t on seeds − 1 df), which the verdicts
read (docs/verdicts.md), beside the Student-t interval over the seeds alone (the documents held fixed; secondary);
per-seed values are printed where the seeds split (``split_seeds``). Comparisons are judged on that interval of
A − B: two arms on one corpus share data under a seed (training batch i is a function of (seed, i); the same
held-out documents and resamples), so they are paired by seed and by resample; two corpora share nothing, so
Welch's. A comparison whose interval holds 0 is "not separated". The well's shape (H3: growth r(2) − r(1), recovery
r(last) − U*) and the bits/byte (resamples of the validation documents' losses, where results.json keeps them)
have their intervals over seeds and documents too. Each seed's own interval over documents is in the per-run
table.

Written to ``--output-dir`` (default: the first multirun directory's ``analysis/hrope/``, or
``RUN_DIR/analysis/hrope/`` for one run) by ``poslab.analysis.hrope.render``: ``hrope.json`` (the one summary:
settings, runs left out, each run's entry with the facts of its directory, the arms and the comparisons),
``hrope_table.md`` (printed too), ``hrope_runs.json`` (per run), ``hrope_arms.json`` (per arm and corpus:
per-seed values, the intervals, and every comparison with its test and verdict), ``hrope_runs.csv``,
``hrope_well.png``, ``hrope_shuffle.png``; each run's own figures also go to its loggers. ``--from hrope.json``
renders the same files again from the summary alone (no model, no run directory; nothing logged), beside it by
default; ``--from A/hrope.json B/hrope.json --output-dir DIR`` merges the summaries of runs analysed apart into
the report of all of them (each entry keeps its document replicates for the intervals over seeds and documents).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

from poslab.analysis.hrope.compute import analyze_run, hrope_summary, merged_summary
from poslab.analysis.hrope.render import SUMMARY_FILE, render_hrope
from poslab.analysis.hrope.runs import RunAnalysis
from poslab.analysis.logging import log_analysis
from poslab.analysis.output import AnalysisResult, read_summary
from poslab.errors import MissingRunError
from poslab.runs.files import default_analysis_dir, find_runs
from poslab.runs.results import SUCCESS, run_status

log = logging.getLogger("poslab")


def runs_to_analyse(paths: list[str]) -> tuple[list[Path], list[tuple[Path, str]]]:
    """The finished runs under ``paths``, and those left out with their status (their training did not succeed:
    results.json status diverged ...)."""
    found = find_runs(paths)
    skipped = [(run, status) for run in found if (status := run_status(run)) != SUCCESS]
    runs = [run for run in found if run not in {r for r, _ in skipped}]
    if not runs:
        shown = ", ".join(f"{run} ({status})" for run, status in skipped)
        raise MissingRunError(
            f"no run to analyse under {', '.join(map(str, paths))}: {len(skipped)} run(s) left out, their status "
            f"is not {SUCCESS}: {shown}."
        )
    return runs, skipped


def analyze_hrope(paths: list[str], documents: int = 200, **settings: Any) -> AnalysisResult:
    """Analyse every run under ``paths``: the printed report, and the tables and plots for the first multirun
    directory's ``analysis/hrope/`` (or ``RUN_DIR/analysis/hrope/`` for one run, or ``--output-dir``)."""
    runs, skipped = runs_to_analyse(paths)
    analyses = []
    for number, run in enumerate(runs, 1):
        log.info("analyze hrope: run %d/%d %s", number, len(runs), run)
        analyses.append(analyze_run(run, documents=documents, **settings))
    resolved = {"documents": documents, "trend": "linear", "keep_ends": True, **settings}
    result = render_hrope(hrope_summary(analyses, resolved, skipped), default_analysis_dir("hrope", paths, runs))
    result.after_write.append(lambda directory: log_to_the_runs_loggers(analyses, directory / "hrope_well.png"))
    return result


def rerender_hrope(paths: str | Path | list[str]) -> AnalysisResult:
    """``--from``: the files again from a ``hrope.json`` this analysis wrote, beside it by default; from several,
    the report they make together (``merged_summary``: runs analysed apart, in other sessions or on other
    machines), for ``--output-dir``."""
    given = [str(paths)] if isinstance(paths, (str, Path)) else [str(p) for p in paths]
    summaries = [
        read_summary(p, "hrope", ("runs", "arms", "settings"), SUMMARY_FILE, "poslab analyze hrope") for p in given
    ]
    summary = summaries[0] if len(summaries) == 1 else merged_summary(summaries, given)
    return render_hrope(summary, Path(given[0]).parent)


def log_to_the_runs_loggers(analyses: list[RunAnalysis], wells: Path) -> str | None:
    """Each run's figures, its well curve and the wells' PNG to the loggers of its config."""
    for analysis in analyses:
        summary = analysis.summary()
        scalars = {
            f"hrope/{k}": float(v)
            for k, v in summary.items()
            if k in ("U*", "shuffle_change", "merge_change", "split_change") and v is not None and math.isfinite(v)
        }
        for reading, by_kind in analysis.interventions.items():
            for kind, estimate in by_kind.items():
                if math.isfinite(estimate.value):
                    scalars[f"hrope/{kind}/{reading}"] = estimate.value
        curve = [[k, r, int(n)] for k, (r, n) in enumerate(zip(summary["residual"], analysis.well.pairs))]
        tables = {"hrope/well_curve": (["displacement", "mean_residual", "pairs"], curve)}
        log_analysis(analysis.config, analysis.run_dir, scalars, {"hrope/well": wells}, tables)
    return None
