"""The smallest model that solves a diagnostic task (issue 38, item 4; ``experiment=diagnostic_tasks``):
``poslab report smallest DIR`` reads multiruns that swept one size setting per task (``model.d_model`` for MQAR,
as Zoology's plots; ``model.n_layers`` for A5 state tracking, as the PaTH paper; both may share one directory) and
gives, per task, encoding, figure and evaluation length, the smallest size whose mean over seeds reaches the
threshold, and each seed's own smallest (their spread is the reading's uncertainty: a threshold on a mean has no
interval of its own).

Seeds per size: a seed mean is read only at a size every seed ran at (a mean over fewer seeds than the other sizes'
is not the same figure); a size some seed lacks (a sweep still running) is not read, and the table names it with the
seeds it lacks. A seed's own smallest is the first size it reaches the threshold at among the sizes it ran; a
size below it that the seed did not run at is named beside it (its smallest may be that one), never read as a
failure.

Figures and thresholds (docs/diagnostic_tasks.md): MQAR ``accuracy_pairs<P>`` >= 0.99 for every number of pairs P;
state tracking ``sequence_accuracy`` >= 0.9; any other task its ``accuracy`` >= 0.99. Compute here, one summary
JSON (``smallest.json``); ``smallest_markdown`` renders it alone.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from statistics import mean
from typing import Any

from poslab.analysis.extrapolation import is_grid_result
from poslab.analysis.output import AnalysisResult
from poslab.analysis.tables import csv_text, markdown_table
from poslab.errors import MissingRunError
from poslab.runs.files import ANALYSIS_DIR
from poslab.runs.results import FinishedRun, collect_runs

SIZES = ("d_model", "n_layers")  # the model settings a diagnostic sweep varies
THRESHOLDS = {"sequence_accuracy": 0.9}  # every other figure: 0.99
FIGURE = re.compile(r"^(accuracy_pairs\d+|sequence_accuracy)$")


def figures_of(row: dict[str, Any]) -> list[str]:
    """The figures a task's smallest model is read on: MQAR's per pair count, state tracking's whole sequences."""
    chosen = sorted((key for key in row if FIGURE.match(key)), key=lambda k: (len(k), k))
    return chosen or ["accuracy"]


def swept_setting(task: str, runs: list[FinishedRun]) -> str:
    """The one model size a task's runs vary (both diagnostic sweeps write to one directory, each its own task)."""
    swept = [s for s in SIZES if len({r.result["config"]["model"][s] for r in runs}) > 1]
    if len(swept) != 1:
        raise MissingRunError(
            f"poslab report smallest needs each task's runs to differ in exactly one of "
            f"model.{', model.'.join(SIZES)}; the {task} runs differ in {len(swept)} "
            f"({', '.join(swept) or 'none'}): fix the other on the command line of the sweep."
        )
    return swept[0]


def cells(runs: list[FinishedRun]) -> dict[tuple, dict[int, dict[int, float]]]:
    """(task, encoding, swept setting, figure, length) -> size -> seed -> value; two runs for one place (the same
    task and encoding at one size and seed, but other settings: MQAR under Zoology's protocol beside the default, S5
    beside A5) are refused, never one taken for the other."""
    found: dict[tuple, dict[int, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    placed: dict[tuple, Path] = {}
    by_task: dict[str, list[FinishedRun]] = defaultdict(list)
    for run in runs:
        by_task[run.result["task"]].append(run)
    for task, task_runs in by_task.items():
        setting = swept_setting(task, task_runs)
        for run in task_runs:
            result, size = run.result, int(run.result["config"]["model"][setting])
            place = (task, result["label"], setting, size, int(result["seed"]))
            if (earlier := placed.setdefault(place, run.path)) != run.path:
                raise MissingRunError(
                    f"poslab report smallest: {earlier} and {run.path} are both {task} with encoding "
                    f"{result['label']} at model.{setting}={size}, seed {result['seed']}, but differ in other "
                    f"settings (a task.* protocol or group); report each configuration from a directory of its own."
                )
            for length, row in result["figures"].items():
                if not length.isdigit():
                    continue
                for figure in figures_of(row):
                    key = (task, result["label"], setting, figure, int(length))
                    found[key][size][int(result["seed"])] = float(row[figure])
    return found


def missing_seeds(by_size: dict[int, dict[int, float]]) -> dict[int, list[int]]:
    """The sizes some seed has no run at, with the seeds each lacks (of every seed any size has)."""
    seeds = {seed for values in by_size.values() for seed in values}
    return {size: sorted(seeds - set(values)) for size, values in sorted(by_size.items()) if seeds - set(values)}


def smallest(by_size: dict[int, dict[int, float]], threshold: float) -> tuple[int | None, dict[int, int | None]]:
    """(the smallest size every seed ran at whose seed mean reaches ``threshold``, each seed's own smallest among
    the sizes it ran at), None where none does."""
    sizes = sorted(by_size)
    incomplete = missing_seeds(by_size)
    solved = next((s for s in sizes if s not in incomplete and mean(by_size[s].values()) >= threshold), None)
    seeds = sorted({seed for values in by_size.values() for seed in values})
    own = {seed: next((s for s in sizes if by_size[s].get(seed, -1.0) >= threshold), None) for seed in seeds}
    return solved, own


def smallest_summary(directory: str | Path) -> dict[str, Any]:
    found = collect_runs([Path(directory)], keep=is_grid_result)
    if not found.counted:
        raise MissingRunError(f"no results.json of a successful synthetic-task run below {directory}")
    rows = []
    for (task, encoding, setting, figure, length), by_size in sorted(cells(found.counted).items()):
        threshold = THRESHOLDS.get(figure, 0.99)
        solved, own = smallest(by_size, threshold)
        rows.append({"task": task, "encoding": encoding, "setting": f"model.{setting}", "figure": figure,
                     "threshold": threshold, "length": length, "sizes": sorted(by_size), "smallest": solved,
                     "seeds_by_size": {str(size): sorted(values) for size, values in sorted(by_size.items())},
                     "missing_seeds": {str(size): seeds for size, seeds in missing_seeds(by_size).items()},
                     "per_seed": {str(seed): size for seed, size in own.items()}})  # fmt: skip
    return {"report": "smallest", "rows": rows, "notes": found.notes()}


def seeds_text(row: dict[str, Any]) -> str:
    """``3 at each``, or each size's seed count with the seeds it lacks."""
    counts = {size: len(seeds) for size, seeds in row["seeds_by_size"].items()}
    if not row["missing_seeds"]:
        return f"{next(iter(counts.values()), 0)} at each"
    lacks = lambda size: f" (no seed {', '.join(map(str, row['missing_seeds'][size]))})"  # noqa: E731
    return ", ".join(f"{size}: {n}{lacks(size) if size in row['missing_seeds'] else ''}" for size, n in counts.items())


def smallest_text(row: dict[str, Any]) -> str:
    """The seed-mean smallest (``none of`` the sizes read), and the sizes below it not read (some seed lacks them)."""
    read = [size for size in row["sizes"] if str(size) not in row["missing_seeds"]]
    found = row["smallest"]
    text = str(found) if found is not None else f"none of {', '.join(map(str, read))}"
    unread = [size for size in row["sizes"] if str(size) in row["missing_seeds"] and (found is None or size < found)]
    return text + (f" ({', '.join(map(str, unread))} not read: not every seed ran there)" if unread else "")


def seed_smallest_text(row: dict[str, Any], seed: str) -> str:
    """A seed's own smallest, with the smaller sizes it has no run at (its smallest may be one of them)."""
    found = row["per_seed"][seed]
    lacking = [int(size) for size, seeds in row["missing_seeds"].items() if int(seed) in seeds]
    lacking = [size for size in lacking if found is None or size < found]
    text = str(found) if found is not None else "none"
    return text + (f" (no run at {', '.join(map(str, lacking))})" if lacking else "")


def smallest_markdown(summary: dict[str, Any]) -> str:
    table = [
        [r["task"], r["encoding"], f"{r['figure']} >= {r['threshold']}", str(r["length"]), r["setting"],
         seeds_text(r), smallest_text(r), ", ".join(seed_smallest_text(r, seed) for seed in r["per_seed"])]
        for r in summary["rows"]
    ]  # fmt: skip
    header = ["task", "encoding", "figure", "length", "size", "seeds", "smallest (seed mean)", "each seed's smallest"]
    text = "\n".join(["### The smallest model that solves each task", "", markdown_table(header, table)])
    return text + ("\n\n" + "\n".join(summary["notes"]) if summary["notes"] else "")


def smallest_csv(summary: dict[str, Any]) -> str:
    header = ["task", "encoding", "figure", "threshold", "length", "setting", "smallest", "per_seed", "missing_seeds"]
    rows = [[r["task"], r["encoding"], r["figure"], r["threshold"], r["length"], r["setting"], r["smallest"],
             " ".join(f"{seed}:{size}" for seed, size in r["per_seed"].items()),
             " ".join(f"{size}:{'+'.join(map(str, seeds))}" for size, seeds in r["missing_seeds"].items())]
            for r in summary["rows"]]  # fmt: skip
    return csv_text(header, rows)


def report_smallest(directory: str | Path) -> AnalysisResult:
    """``poslab report smallest DIR``: the table, ``smallest.csv`` and ``smallest.json`` (``DIR/analysis/smallest``)."""
    summary = smallest_summary(directory)
    default = Path(directory) / ANALYSIS_DIR / "smallest"
    text, csv = smallest_markdown(summary), smallest_csv(summary)
    return AnalysisResult.with_tables("smallest", text, default, csv, summary, "smallest.json")
