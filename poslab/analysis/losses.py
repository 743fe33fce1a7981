"""``poslab report losses DIR...``: validation loss and bits per byte of language-model runs side by side."""

from __future__ import annotations

from pathlib import Path

from poslab.analysis.output import AnalysisResult
from poslab.errors import MissingRunError
from poslab.io import read_json
from poslab.run_files import RESULTS_FILE, default_analysis_dir


def report_losses(directories: list[str | Path]) -> AnalysisResult:
    """The runs' validation figures side by side; ``losses.md`` for the first directory's ``analysis/losses/``."""
    rows = []
    for directory in directories:
        for path in sorted(Path(directory).rglob(RESULTS_FILE)):
            result = read_json(path)
            figures = result.get("figures", {})
            if "val_loss" not in figures:
                continue  # not a language-model run
            rows.append(
                (
                    result.get("corpus", "?"),
                    result["label"],
                    result["seed"],
                    result["steps"],
                    figures["val_loss"],
                    figures["val_bpb"],
                    result.get("parameters", 0),
                    path.parent,
                )
            )
    if not rows:
        raise MissingRunError(f"no language-model {RESULTS_FILE} below {', '.join(map(str, directories))}.")
    rows.sort(key=lambda r: (r[0], r[1], r[2]))
    lines = [
        "| corpus | encoding | seed | steps | parameters | val loss (nats) | val bits/byte | run |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {c} | {label} | {seed} | {steps} | {params:,} | {loss:.4f} | {bpb:.4f} | {run} |"
        for c, label, seed, steps, loss, bpb, params, run in rows
    ]
    report = "\n".join(lines)
    runs = [Path(row[-1]) for row in rows]
    result = AnalysisResult("losses", report, default_analysis_dir("losses", list(directories), runs))
    result.add_text("losses.md", report)
    return result
