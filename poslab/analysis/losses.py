"""``poslab report losses DIR...``: validation loss and bits per byte of language-model runs side by side; this
module reads the runs and computes everything the report shows (``losses_summary``: what ``losses.json`` holds).

One row per successful run; runs of one corpus and encoding that differ in another setting (``model.d_model``,
``trainer.max_steps`` ...) show it in a column of its own, and when a config has several seeds a second table
gives their means with the 95% interval over seeds (``poslab.runs.results``: grouped by the whole config minus the
seed; statistics from ``poslab.analysis.stats``) and, where every seed's results.json holds the same held-out
documents' sums at the context, the interval over seeds and documents (``stats.crossed_interval``, as ``report
length``). Runs of one corpus that read different text (``results.data_hash``) are corpora of their own, never
seeds of one config (``output.data_versions_apart``, shared with ``report length``), and a table whose runs ran on
different CPU models says so (``output.hosts_note``; docs/verdicts.md, "Mixed hosts"). Runs whose status is not
``success``, failed jobs and jobs without results are listed under the table. Three layers, as the zoo's and the
length report: ``losses_render`` draws the tables and the CSV from the summary alone (``poslab report losses
--from losses.json``), ``losses_report`` runs both.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from poslab.analysis.length import PLAIN
from poslab.analysis.output import data_versions_apart, hosts_note, sample_notes, training_steps
from poslab.analysis.stats import crossed_interval, linearised_ratio, over_seeds
from poslab.errors import MissingRunError
from poslab.runs.files import RESULTS_FILE
from poslab.runs.results import (
    FinishedRun,
    Runs,
    collect_runs,
    data_hash,
    differing_settings,
    host_of,
    setting_values,
    validation_documents,
)

FIGURES = ("val_loss", "val_bpb")
#: how far a run's document sums may sit from its own figure (they are rounded to 6 decimals in results.json)
DOCUMENTS_TOLERANCE = 1e-4


def is_language_model_result(result: dict[str, Any]) -> bool:
    return "val_loss" in (result.get("figures") or {})


def data_cell(result: dict[str, Any]) -> str:
    """What a reader of the run's figures must know about its data (``results.json``'s ``data_notes``)."""
    notes = " ".join(result.get("data_notes") or [])
    if "trains on" in notes:
        return "trained on a test split (see below)"
    return "validated on a test split" if "validates on" in notes else ""


def row_labels(corpus: dict[Path, str], run: FinishedRun) -> tuple[str, str]:
    """The columns every row has: corpus (``corpus``, by run directory: with its data version where it has several)
    and encoding."""
    return (corpus[run.path], str(run.result["label"]))


@dataclass
class LossRuns:
    """The successful language-model runs in table order, the settings telling runs of one row apart, each run's
    corpus as the tables show it (by run directory), the notes on the corpora's data versions, and everything
    found (the jobs listed apart)."""

    runs: list[FinishedRun]
    keys: list[str]
    corpus: dict[Path, str]
    notes: list[str]
    found: Runs


def load_losses(directories: list[str | Path]) -> LossRuns:
    """The successful language-model runs below ``directories``: a corpus whose runs read different text is split
    by data version before the rows are formed, so no two versions are ever averaged as seeds."""
    found = collect_runs(list(directories), keep=is_language_model_result)
    if not found.counted:
        listed = " ".join(found.notes())
        raise MissingRunError(
            f"no language-model {RESULTS_FILE} of a successful run below {', '.join(map(str, directories))}"
            + (f": {listed}" if listed else ".")
        )
    runs = found.counted
    names, notes = data_versions_apart(
        [str(r.result.get("corpus", "?")) for r in runs], [data_hash(r.result) for r in runs]
    )
    corpus = {run.path: name for run, name in zip(runs, names)}
    labels = partial(row_labels, corpus)
    keys = differing_settings(runs, labels)
    ordered = sorted(runs, key=lambda r: (*labels(r), setting_values(r, keys), r.result["seed"]))
    return LossRuns(ordered, keys, corpus, notes, found)


def run_summary(run: FinishedRun, loaded: LossRuns, steps: tuple[int | None, int | None]) -> dict[str, Any]:
    result, figures = run.result, run.result["figures"]
    corpus, encoding = row_labels(loaded.corpus, run)
    return {
        "corpus": corpus,
        "encoding": encoding,
        "settings": list(setting_values(run, loaded.keys)),
        "seed": result["seed"],
        "steps": list(steps),
        "val_documents": validation_documents(result),
        "parameters": result.get("parameters", 0),
        "val_loss": figures["val_loss"],
        "val_bpb": figures["val_bpb"],
        "data": data_cell(result),
        "data_hash": data_hash(result),
        "host": host_of(result),
        "run": str(run.path),
    }


@dataclass(frozen=True)
class DocumentSums:
    """One run's held-out documents at its context, every group's in group order: loss (nats), tokens, bytes."""

    loss: np.ndarray
    tokens: np.ndarray
    sizes: np.ndarray

    def figure(self, key: str) -> float:
        """The run's ``val_loss`` (nats per token) or ``val_bpb`` (bits per byte) from its documents."""
        if key == "val_loss":
            return float(self.loss.sum() / self.tokens.sum())
        return float(self.loss.sum() / math.log(2) / self.sizes.sum())


def context_documents(result: dict[str, Any]) -> DocumentSums | None:
    """The plain model's per-document sums at the context over every held-out document (selection and test: the
    validation figures score them all; results.json's ``held_out.documents``), or None for a run without them
    (written before issue 37) or whose sums do not give its own figures (then they are not what it reports)."""
    context = result.get("context_length")
    groups = ((result.get("held_out") or {}).get("documents") or {}).values()
    found = [((g.get("by_length") or {}).get(str(context)) or {}) for g in groups]
    losses = [f.get("loss", {}).get(PLAIN) for f in found]
    if not found or any(loss is None or None in loss for loss in losses):
        return None
    columns = (losses, [f["tokens"] for f in found], [f["bytes"] for f in found])
    sums = DocumentSums(*(np.array([x for part in parts for x in part], dtype=float) for parts in columns))
    if not len(sums.loss) or sums.tokens.sum() <= 0 or sums.sizes.sum() <= 0:
        return None
    figures = result["figures"]
    matches = all(math.isclose(sums.figure(k), float(figures[k]), rel_tol=DOCUMENTS_TOLERANCE) for k in FIGURES)
    return sums if matches else None


def over_seeds_and_documents(members: list[DocumentSums | None]) -> dict[str, Any] | None:
    """A config's figures over seeds and held-out documents (``stats.crossed_interval`` of each byte- or token-
    weighted ratio, linearised, as ``report length``'s): None unless it has 2+ seeds and every seed recorded the
    same documents (the same tokens and bytes per document)."""
    if len(members) < 2 or any(m is None for m in members):
        return None
    first = members[0]
    if any(not (np.array_equal(m.tokens, first.tokens) and np.array_equal(m.sizes, first.sizes)) for m in members):
        return None
    loss = np.array([m.loss for m in members])
    return {
        "val_loss": crossed_interval(linearised_ratio(loss, first.tokens)).as_dict(),
        "val_bpb": crossed_interval(linearised_ratio(loss / math.log(2), first.sizes)).as_dict(),
    }


def config_summaries(runs: list[dict[str, Any]], documents: dict[str, DocumentSums | None]) -> list[dict[str, Any]]:
    """Per config (corpus, encoding, settings), in table order: its seeds, the hosts they ran on, each figure over
    them (mean, 95% t-interval, per seed: ``stats.over_seeds``) and, where every seed recorded the same held-out
    documents (``documents``, by run directory), over seeds and documents too (``seeds_x_documents``; None else)."""
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = defaultdict(list)
    for run in runs:
        groups[(run["corpus"], run["encoding"], *run["settings"])].append(run)
    return [
        {
            "corpus": corpus,
            "encoding": encoding,
            "settings": list(settings),
            "seeds": len(members),
            "hosts": sorted({m["host"] for m in members}),
            **{key: over_seeds({m["seed"]: m[key] for m in members}) for key in FIGURES},
            "seeds_x_documents": over_seeds_and_documents([documents.get(m["run"]) for m in members]),
        }
        for (corpus, encoding, *settings), members in groups.items()
    ]


def config_name(config: dict[str, Any]) -> str:
    """A config in a note: its corpus, encoding and settings."""
    return " ".join([config["corpus"], config["encoding"], *config["settings"]])


def compute_losses(directories: list[str | Path]) -> dict[str, Any]:
    """Everything the report shows, per seed where a figure has seeds: ``losses.json``, what rendering reads."""
    loaded = load_losses(directories)
    runs = loaded.runs
    steps = {str(run.path): training_steps(run.path, run.result) for run in runs}
    counts = {str(run.path): validation_documents(run.result) for run in runs}
    rows = [run_summary(run, loaded, steps[str(run.path)]) for run in runs]
    documents = {str(run.path): context_documents(run.result) for run in runs}
    configs = config_summaries(rows, documents)
    hosts = hosts_note({config_name(c): c["hosts"] for c in configs})
    notes = sample_notes(steps, [run.result for run in runs], counts) + loaded.notes + ([hosts] if hosts else [])
    notes += loaded.found.notes()
    return {"report": "losses", "setting_keys": loaded.keys, "runs": rows, "configs": configs, "notes": notes}
