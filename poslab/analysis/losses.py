"""``poslab report losses DIR...``: validation loss and bits per byte of language-model runs side by side.

One row per successful run; runs of one corpus and encoding that differ in another setting (``model.d_model``,
``trainer.max_steps`` ...) show it in a column of its own, and when a config has several seeds a second table
gives their means (``poslab.analysis.results``: grouped by the whole config minus the seed). Runs whose
status is not ``success``, failed jobs and jobs without results are listed under the table.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from statistics import mean
from typing import Any

from poslab.analysis.output import (
    AnalysisResult,
    sample_notes,
    steps_cell,
    training_steps,
)
from poslab.analysis.results import (
    FinishedRun,
    collect_runs,
    differing_settings,
    setting_values,
    validation_documents,
)
from poslab.errors import MissingRunError
from poslab.run_files import RESULTS_FILE, default_analysis_dir


def is_language_model_result(result: dict[str, Any]) -> bool:
    return "val_loss" in (result.get("figures") or {})


def data_cell(result: dict[str, Any]) -> str:
    """What a reader of the run's figures must know about its data (``results.json``'s ``data_notes``)."""
    notes = " ".join(result.get("data_notes") or [])
    if "trains on" in notes:
        return "trained on a test split (see below)"
    return "validated on a test split" if "validates on" in notes else ""


def report_losses(directories: list[str | Path]) -> AnalysisResult:
    """The runs' validation figures side by side; ``losses.md`` for the first directory's ``analysis/losses/``."""
    found = collect_runs(list(directories), keep=is_language_model_result)
    if not found.counted:
        listed = " ".join(found.notes())
        raise MissingRunError(
            f"no language-model {RESULTS_FILE} of a successful run below {', '.join(map(str, directories))}"
            + (f": {listed}" if listed else ".")
        )

    def labels(run: FinishedRun) -> tuple[str, str]:
        return (str(run.result.get("corpus", "?")), str(run.result["label"]))

    keys = differing_settings(found.counted, labels)
    runs = sorted(found.counted, key=lambda r: (*labels(r), setting_values(r, keys), r.result["seed"]))
    header = [
        "corpus",
        "encoding",
        *keys,
        "seed",
        "steps",
        "val documents",
        "parameters",
        "val loss (nats)",
        "val bits/byte",
        "data",
        "run",
    ]
    steps = {str(run.path): training_steps(run.path, run.result) for run in runs}
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    groups: dict[tuple[str, ...], list[FinishedRun]] = defaultdict(list)
    for run in runs:
        result, figures = run.result, run.result["figures"]
        values = setting_values(run, keys)
        groups[(*labels(run), *values)].append(run)
        cells = [*labels(run), *values, str(result["seed"]), steps_cell(*steps[str(run.path)])]
        cells += [f"{validation_documents(result):,}", f"{result.get('parameters', 0):,}"]
        cells += [f"{figures['val_loss']:.4f}", f"{figures['val_bpb']:.4f}", data_cell(result), str(run.path)]
        lines.append("| " + " | ".join(cells) + " |")
    if any(len(members) > 1 for members in groups.values()):  # several seeds of one config: their means
        header = ["corpus", "encoding", *keys, "seeds", "mean val loss (nats)", "mean val bits/byte"]
        lines += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for group, members in groups.items():
            loss = mean(m.result["figures"]["val_loss"] for m in members)
            bpb = mean(m.result["figures"]["val_bpb"] for m in members)
            lines.append("| " + " | ".join([*group, str(len(members)), f"{loss:.4f}", f"{bpb:.4f}"]) + " |")
    documents = {str(run.path): validation_documents(run.result) for run in runs}
    notes = sample_notes(steps, [run.result for run in runs], documents) + found.notes()
    report = "\n".join(lines + (["", *notes] if notes else []))
    result = AnalysisResult("losses", report, default_analysis_dir("losses", list(directories), [r.path for r in runs]))
    result.add_text("losses.md", report)
    return result
