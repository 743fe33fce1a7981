"""``poslab analyze increments RUN_DIR``: the analysis computed from the checkpoint (``compute``), drawn from its
summary (``render``), then logged to the run's own loggers; ``--from increments_analysis.json`` draws it again
from the summary alone (``render.rerender_increments``: no run, no model)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from poslab.analysis.increments.compute import IncrementsOptions, increments_summary
from poslab.analysis.increments.readings import SCORE_BYTES, BoundaryRow, boundary_rows
from poslab.analysis.increments.render import category_rows, render_increments
from poslab.analysis.logging import log_analysis
from poslab.analysis.output import AnalysisResult
from poslab.runs.files import ANALYSIS_DIR


def analyze_increments(run_dir: str | Path, options: IncrementsOptions) -> AnalysisResult:
    """The three analyses of one run; files for ``RUN_DIR/analysis/increments/`` (or ``--output-dir``)."""
    summary, cfg = increments_summary(run_dir, options)
    result = render_increments(summary, Path(run_dir) / ANALYSIS_DIR / "increments")
    pictures = [name for name in result.files if name.endswith(".png")]
    result.after_write.append(lambda directory: log_to_the_runs_loggers(cfg, run_dir, summary, directory, pictures))
    return result


def boundary_key(row: BoundaryRow) -> str:
    """The logger's scalar of one boundary reading: ``analysis/boundary_auc/<subset>/<score>/<layer>`` or
    ``analysis/boundary_ceiling/<subset>/<ceiling>``."""
    if row.reading in SCORE_BYTES:
        return f"analysis/boundary_auc/{row.subset}/{row.reading}/{row.layer}"
    return f"analysis/boundary_ceiling/{row.subset}/{row.reading}"


def log_to_the_runs_loggers(
    cfg: DictConfig, run_dir: str | Path, summary: dict[str, Any], directory: Path, pictures: list[str]
) -> str | None:
    """The figures, tables and pictures to the run's loggers (``log_analysis``); the line saying which."""
    categories, boundaries = category_rows(summary), boundary_rows(summary["boundaries"]["subsets"])
    scalars = {f"analysis/boundary_auc/{name}": auc for name, auc in summary["boundary_auc"].items()}
    scalars |= {boundary_key(r): r.auc for r in boundaries}
    scalars |= {f"analysis/boundary_gaps/{r.subset}": r.gaps for r in boundaries}
    scalars |= {f"analysis/delta/{row.layer}/{row.category}": row.mean for row in categories}
    images = {Path(name).stem: directory / name for name in pictures}
    tables = {
        key: (list(records[0]), [list(r.values()) for r in records])
        for key, records in (
            ("analysis/categories", [asdict(row) for row in categories]),
            ("analysis/boundaries", [asdict(row) for row in boundaries]),
        )
        if records
    }
    used = log_analysis(cfg, run_dir, scalars, images, tables or None)
    return f"logged to: {', '.join(used)}" if used else None
