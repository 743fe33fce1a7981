"""``poslab report losses DIR...``: the language-model runs read and computed (``poslab.analysis.losses``), then
drawn (``poslab.analysis.losses_render``) into ``--output-dir`` (default: the first directory's
``analysis/losses/``): ``losses.md``, ``losses.csv`` and ``losses.json``. ``--from losses.json`` renders the same
files again from the summary alone (no runs), beside it by default."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from poslab.analysis.losses import compute_losses
from poslab.analysis.losses_render import losses_csv, losses_markdown
from poslab.analysis.output import AnalysisResult, read_summary
from poslab.runs.files import default_analysis_dir

SUMMARY_FILE = "losses.json"


def render_losses(summary: dict[str, Any], directory: Path) -> AnalysisResult:
    """The report's text and files from ``summary`` (``losses.compute_losses``) alone."""
    text, csv = losses_markdown(summary), losses_csv(summary)
    return AnalysisResult.with_tables("losses", text, directory, csv, summary, SUMMARY_FILE)


def report_losses(directories: list[str | Path]) -> AnalysisResult:
    """The runs' validation figures side by side, for the first directory's ``analysis/losses/``."""
    summary = compute_losses(directories)
    runs = [Path(run["run"]) for run in summary["runs"]]
    return render_losses(summary, default_analysis_dir("losses", list(directories), runs))


def rerender_losses(path: str | Path) -> AnalysisResult:
    """``--from``: the files again from a ``losses.json`` this report wrote, beside it by default."""
    return render_losses(read_summary(path, "losses", "configs"), Path(path).parent)
