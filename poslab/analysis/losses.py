"""``poslab report losses DIR...``: validation loss and bits per byte of language-model runs side by side; this
module reads the runs and computes everything the report shows (``losses_summary``: what ``losses.json`` holds).

One row per successful run; runs of one corpus and encoding that differ in another setting (``model.d_model``,
``trainer.max_steps`` ...) show it in a column of its own, and when a config has several seeds a second table
gives their means (``poslab.runs.results``: grouped by the whole config minus the seed; statistics from
``poslab.analysis.stats``). Runs whose status is not ``success``, failed jobs and jobs without results are listed
under the table. Three layers, as the zoo's and the length report: ``losses_render`` draws the tables and the CSV
from the summary alone (``poslab report losses --from losses.json``), ``losses_report`` runs both.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from poslab.analysis.output import sample_notes, training_steps
from poslab.analysis.stats import over_seeds
from poslab.errors import MissingRunError
from poslab.runs.files import RESULTS_FILE
from poslab.runs.results import (
    FinishedRun,
    Runs,
    collect_runs,
    differing_settings,
    setting_values,
    validation_documents,
)


def is_language_model_result(result: dict[str, Any]) -> bool:
    return "val_loss" in (result.get("figures") or {})


def data_cell(result: dict[str, Any]) -> str:
    """What a reader of the run's figures must know about its data (``results.json``'s ``data_notes``)."""
    notes = " ".join(result.get("data_notes") or [])
    if "trains on" in notes:
        return "trained on a test split (see below)"
    return "validated on a test split" if "validates on" in notes else ""


def labels(run: FinishedRun) -> tuple[str, str]:
    """The columns every row has: corpus and encoding."""
    return (str(run.result.get("corpus", "?")), str(run.result["label"]))


def load_losses(directories: list[str | Path]) -> tuple[list[FinishedRun], list[str], Runs]:
    """The successful language-model runs below ``directories`` in table order, the settings that tell runs of one
    corpus and encoding apart, and everything found (the jobs listed apart)."""
    found = collect_runs(list(directories), keep=is_language_model_result)
    if not found.counted:
        listed = " ".join(found.notes())
        raise MissingRunError(
            f"no language-model {RESULTS_FILE} of a successful run below {', '.join(map(str, directories))}"
            + (f": {listed}" if listed else ".")
        )
    keys = differing_settings(found.counted, labels)
    runs = sorted(found.counted, key=lambda r: (*labels(r), setting_values(r, keys), r.result["seed"]))
    return runs, keys, found


def run_summary(run: FinishedRun, keys: list[str], steps: tuple[int | None, int | None]) -> dict[str, Any]:
    result, figures = run.result, run.result["figures"]
    corpus, encoding = labels(run)
    return {
        "corpus": corpus,
        "encoding": encoding,
        "settings": list(setting_values(run, keys)),
        "seed": result["seed"],
        "steps": list(steps),
        "val_documents": validation_documents(result),
        "parameters": result.get("parameters", 0),
        "val_loss": figures["val_loss"],
        "val_bpb": figures["val_bpb"],
        "data": data_cell(result),
        "run": str(run.path),
    }


def config_summaries(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per config (corpus, encoding, settings), in table order: its seeds and each figure over them (mean,
    95% t-interval, per seed: ``stats.over_seeds``)."""
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = defaultdict(list)
    for run in runs:
        groups[(run["corpus"], run["encoding"], *run["settings"])].append(run)
    return [
        {
            "corpus": corpus,
            "encoding": encoding,
            "settings": list(settings),
            "seeds": len(members),
            **{key: over_seeds({m["seed"]: m[key] for m in members}) for key in ("val_loss", "val_bpb")},
        }
        for (corpus, encoding, *settings), members in groups.items()
    ]


def compute_losses(directories: list[str | Path]) -> dict[str, Any]:
    """Everything the report shows, per seed where a figure has seeds: ``losses.json``, what rendering reads."""
    runs, keys, found = load_losses(directories)
    steps = {str(run.path): training_steps(run.path, run.result) for run in runs}
    documents = {str(run.path): validation_documents(run.result) for run in runs}
    notes = sample_notes(steps, [run.result for run in runs], documents) + found.notes()
    rows = [run_summary(run, keys, steps[str(run.path)]) for run in runs]
    return {"report": "losses", "setting_keys": keys, "runs": rows, "configs": config_summaries(rows), "notes": notes}
