"""``poslab report grid DIR``: the grid's runs read and computed (``poslab.analysis.extrapolation``), then drawn
(``poslab.analysis.grid_render``) into ``--output-dir`` (default: ``DIR/analysis/grid/``):
``extrapolation_grid.md``, ``extrapolation_grid.csv``, ``grid.json`` and ``extrapolation_grid.png``.
``--from grid.json`` renders the same files again from the summary alone (no runs), beside it by default."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from poslab.analysis.extrapolation import compute_grid
from poslab.analysis.grid_render import grid_csv, grid_markdown, plot_grid
from poslab.analysis.output import AnalysisResult, read_summary
from poslab.runs.files import ANALYSIS_DIR

SUMMARY_FILE = "grid.json"


def render_grid(summary: dict[str, Any], directory: Path) -> AnalysisResult:
    """The report's text and files from ``summary`` (``extrapolation.grid_summary``) alone."""
    text, csv = grid_markdown(summary), grid_csv(summary)
    result = AnalysisResult.with_tables("grid", text, directory, csv, summary, SUMMARY_FILE, "extrapolation_grid")
    result.add_figure("extrapolation_grid.png", plot_grid(summary))
    return result


def report_grid(directory: str | Path, reference: str | None = None) -> AnalysisResult:
    """The grid's report lines and tables (beside ``reference``'s figures, when given) for ``DIR/analysis/grid/``."""
    return render_grid(compute_grid(directory, reference), Path(directory) / ANALYSIS_DIR / "grid")


def rerender_grid(path: str | Path) -> AnalysisResult:
    """``--from``: the files again from a ``grid.json`` this report wrote, beside it by default."""
    return render_grid(read_summary(path, "grid", "rows"), Path(path).parent)
