"""The extrapolation grid (``poslab report grid``): its runs read, and everything the report shows computed.

The report prints one line per run in the where_am_i write-up's format, a markdown table of seed means with their
intervals (optionally beside a reference), the baselines of the evaluation sets, a CSV and a PNG:

    lag  rope         seed 0: length 32 / 64 / 128: 1.000 / 1.000 / 1.000; at 128, positions past 32: 1.000; ...
        ... scores x log128/log32: 1.000   (one line in the output)

Three layers, as the zoo's and the length report: this module computes (``grid_summary``: what ``grid.json``
holds; statistics from ``poslab.analysis.stats``), ``grid_render`` draws the tables, CSV and PNG from that summary
alone (``poslab report grid --from grid.json`` re-renders without runs), ``grid_report`` runs both.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from poslab.analysis.output import REFERENCE_LABEL, hosts_note, short_run_warning, training_steps
from poslab.analysis.stats import Interval, SeedCell
from poslab.errors import MissingRunError, UsageError
from poslab.io import number_or_nan
from poslab.runs.files import RESULTS_FILE, job_number
from poslab.runs.results import (
    FinishedRun,
    Runs,
    collect_runs,
    differing_settings,
    host_of,
    setting_values,
)


@dataclass
class GridRun:
    task: str
    label: str
    seed: int
    train_length: int
    accuracy: dict[int, float]  # by evaluation length
    past_train: float  # at the longest length, positions past train_length
    log_scaled: float  # at the longest length, each query's scores x max(1, log(t + 1) / log(train_length))
    order: int = 0
    settings: tuple[tuple[str, str], ...] = ()  # what tells it apart from runs of the same task and scheme
    steps: tuple[int | None, int | None] = (None, None)  # (trained, the recipe's): poslab.runs.results
    eval_size: int | None = None  # evaluation sequences per length (task.eval_size)
    #: the baselines of the evaluation sets by length, over every scored position (chance, the best constant, the
    #: task's trivial rules: ``baseline_*`` in results.json; empty for runs written before they were)
    baselines: dict[int, dict[str, float]] = field(default_factory=dict)
    host: str = "unknown"  # the CPU model it ran on (``results.host_of``): a table says when it mixes them

    @property
    def row_key(self) -> RowKey:
        return (self.task, self.label, self.settings)

    @property
    def name(self) -> str:
        """The run in a note: task, scheme, seed and the settings telling it apart (two runs, two names)."""
        shown = ", ".join(f"{k}={v}" for k, v in self.settings)
        return f"{self.task} {self.label} seed {self.seed}" + (f" [{shown}]" if shown else "")

    @property
    def longest(self) -> int:
        return max(self.accuracy)

    def line(self) -> str:
        lengths = sorted(self.accuracy)
        return (
            f"{self.task:<4s} {self.label:<12s} seed {self.seed}: length {' / '.join(map(str, lengths))}: "
            f"{' / '.join(f'{self.accuracy[n]:.3f}' for n in lengths)}; at {self.longest}, positions past "
            f"{self.train_length}: {self.past_train:.3f}; scores x log{self.longest}/log{self.train_length}: "
            f"{self.log_scaled:.3f}"
        ) + ("  [" + ", ".join(f"{k}={v}" for k, v in self.settings) + "]" if self.settings else "")

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (lengths as text, NaN as None); ``from_dict`` reads it back. Every field, in field order; the
        ones JSON cannot hold as they are, converted."""
        return asdict(self) | {
            "accuracy": {str(n): _clean(v) for n, v in self.accuracy.items()},
            "past_train": _clean(self.past_train),
            "log_scaled": _clean(self.log_scaled),
            "settings": [list(pair) for pair in self.settings],
            "steps": list(self.steps),
            "baselines": {str(n): row for n, row in self.baselines.items()},
        }

    @classmethod
    def from_dict(cls, run: dict[str, Any]) -> GridRun:
        return cls(
            task=run["task"],
            label=run["label"],
            seed=int(run["seed"]),
            train_length=int(run["train_length"]),
            accuracy={int(n): number_or_nan(v) for n, v in run["accuracy"].items()},
            past_train=number_or_nan(run["past_train"]),
            log_scaled=number_or_nan(run["log_scaled"]),
            order=int(run.get("order", 0)),
            settings=tuple((str(k), str(v)) for k, v in run.get("settings", [])),
            steps=tuple(run.get("steps") or (None, None)),
            eval_size=run.get("eval_size"),
            baselines={int(n): row for n, row in (run.get("baselines") or {}).items()},
            host=str(run.get("host", "unknown")),
        )


def _clean(value: float | None) -> float | None:
    """A figure for JSON: NaN (a figure the run did not write) as None."""
    return None if value is None or value != value else value


NUMBER = r"(?:\d+(?:\.\d+)?|nan)"  # a figure as ``GridRun.line`` prints it: NaN (not written) as ``nan``
LINE = re.compile(
    rf"^(?P<task>\S+)\s+(?P<label>\S+)\s+seed (?P<seed>\d+): length (?P<lengths>\d+(?: / \d+)*): "
    rf"(?P<accs>{NUMBER}(?: / {NUMBER})*); at (?P<longest>\d+), positions past (?P<train>\d+): (?P<past>{NUMBER}); "
    rf"scores x log\d+/log\d+: (?P<scaled>{NUMBER})(?:\s+\[.*\])?\s*$"
)
#: the start of a run's line: a line that starts so and does not parse is refused, never skipped
RUN_LINE = re.compile(r"^\S+\s+\S+\s+seed \d+: length ")


def parse_line(match: re.Match[str], order: int) -> GridRun:
    lengths = [int(n) for n in match["lengths"].split(" / ")]
    accs = [float(a) for a in match["accs"].split(" / ")]
    if len(accs) != len(lengths):
        raise UsageError(f"a report line has {len(lengths)} lengths and {len(accs)} accuracies: {match.string!r}")
    return GridRun(
        match["task"],
        match["label"],
        int(match["seed"]),
        int(match["train"]),
        dict(zip(lengths, accs)),
        float(match["past"]),
        float(match["scaled"]),
        order,
    )


def parse_lines(text: str) -> list[GridRun]:
    """Read report lines (this module's or the write-up's) back into runs, a figure printed ``nan`` as NaN; other
    lines are skipped, but a line that starts as a run's and does not parse is refused by its text."""
    runs = []
    for line in text.splitlines():
        match = LINE.match(line)
        if match is None and RUN_LINE.match(line):
            raise UsageError(f"a report line that does not parse (as `poslab report grid` prints them): {line!r}")
        if match is not None:
            runs.append(parse_line(match, len(runs)))
    return runs


def reference_runs(name: str) -> list[GridRun]:
    """Runs of a reference shipped with poslab (``where_am_i``) or of a file of report lines."""
    path = Path(name)
    if path.is_file():
        return parse_lines(path.read_text())
    shipped = resources.files("poslab.analysis.resources") / f"{name}_grid.txt"
    if not shipped.is_file():
        raise MissingRunError(f"no reference {name!r}: give a file of report lines or 'where_am_i'.")
    return parse_lines(shipped.read_text())


def is_grid_result(result: dict) -> bool:
    """A synthetic-task run: figures keyed by evaluation length (a language model's are ``val_loss`` ...)."""
    figures = result.get("figures") or {}
    return result.get("task") != "lm" and all(str(key).isdigit() for key in figures)


def grid_run(run: FinishedRun, keys: list[str]) -> GridRun:
    result = run.result
    figures = {int(n): row for n, row in result["figures"].items()}
    longest = max(figures)
    return GridRun(
        task=result["task"],
        label=result["label"],
        seed=int(result["seed"]),
        train_length=int(result["train_length"]),
        accuracy={n: row["accuracy"] for n, row in figures.items()},
        past_train=figures[longest].get("accuracy_past_train", float("nan")),
        # nan: a run of the plain model alone (task.eval_ways=plain, debug=fast), as past_train where none is past
        log_scaled=figures[longest].get("accuracy_log_scaled", float("nan")),
        order=job_number(run.path) or 0,  # the multirun's order (its job folders are named by their overrides)
        settings=tuple(zip(keys, setting_values(run, keys))),
        steps=training_steps(run.path, result),
        eval_size=((result.get("config") or {}).get("task") or {}).get("eval_size"),
        baselines={
            n: {
                k.removeprefix("baseline_"): v for k, v in row.items() if k.startswith("baseline_") and "_past" not in k
            }
            for n, row in figures.items()
        },
        host=host_of(result),
    )


def load_runs(directory: str | Path) -> tuple[list[GridRun], Runs]:
    """Every successful grid run below ``directory`` (a multirun directory), and the jobs listed apart. Runs
    of one task and scheme that differ in another setting carry it (``GridRun.settings``), so they are
    never averaged together. A directory of language-model runs only raises ``UsageError`` naming the
    report that fits."""
    directory = Path(directory)
    found = collect_runs([directory], keep=is_grid_result)
    if not found.counted and not found.not_success:
        lm = collect_runs([directory], keep=lambda r: not is_grid_result(r))
        if lm.counted or lm.not_success:
            raise UsageError(
                f"{directory} holds language-model runs (task=lm), not an extrapolation grid of lag/seen runs: "
                f"`poslab report losses {directory}` reports them."
            )
    keys = differing_settings(found.counted, lambda r: (r.result["task"], r.result["label"]))
    runs = [grid_run(run, keys) for run in found.counted]
    runs.sort(key=lambda r: (r.order, r.task, r.label, r.seed))
    return runs, found


RowKey = tuple[str, str, tuple[tuple[str, str], ...]]  # (task, scheme label, settings telling it apart)
#: accuracies: an interval over seeds is clipped to them
ACCURACY = (0.0, 1.0)


def by_row(runs: list[GridRun]) -> dict[RowKey, list[GridRun]]:
    """The runs of each task x scheme (x the settings telling runs of both apart), in first-appearance order."""
    rows: dict[RowKey, list[GridRun]] = defaultdict(list)
    for run in runs:
        rows[run.row_key].append(run)
    return dict(rows)


def figure_keys(run: GridRun) -> list[str]:
    """The figures of a run, as the summary names them: ``L<n>`` at each length, ``past``, ``log_scaled``."""
    return [f"L{n}" for n in sorted(run.accuracy)] + ["past", "log_scaled"]


def run_figure(run: GridRun, key: str) -> float:
    """A figure of ``figure_keys`` of one run."""
    if key == "past":
        return run.past_train
    if key == "log_scaled":
        return run.log_scaled
    return run.accuracy[int(key.removeprefix("L"))]


def comparable_keys(mine: GridRun, theirs: GridRun) -> list[str]:
    """The figures of ``mine`` that ``theirs`` holds as the same figure: accuracy at each length both scored, of
    models trained at one length; past the training length and log-scaled only where both took them at the same
    longest length (at 256 and at 128 they are other figures under one name). Other training lengths: none."""
    if mine.train_length != theirs.train_length:
        return []
    keys = [f"L{n}" for n in sorted(mine.accuracy) if n in theirs.accuracy]
    return keys + (["past", "log_scaled"] if mine.longest == theirs.longest else [])


def reference_means(members: list[GridRun], keys: list[str]) -> dict[str, float | None]:
    """A reference row's figures at ``keys``: the mean over its seeds of each (a seed without it left out)."""
    return {key: _clean(Interval.of(run_figure(r, key) for r in members).mean) for key in keys}


def reference_summary(figures: dict[str, Any], first: GridRun, reference: list[GridRun]) -> dict[str, Any]:
    """The reference's means at the figures both have (``comparable_keys``), keyed as ours, and the largest
    absolute difference over them: a figure of theirs at another length is never set beside one of ours."""
    compared = comparable_keys(first, reference[0])
    theirs = reference_means(reference, compared)
    diffs = [abs(figures[k]["mean"] - v) for k, v in theirs.items() if v is not None and figures[k]["mean"] is not None]
    return {
        "reference": theirs,
        "reference_train_length": reference[0].train_length,
        "compared": compared,
        "max_abs_diff": max(diffs) if diffs else None,
    }


def row_summary(members: list[GridRun], reference: list[GridRun] | None) -> dict[str, Any]:
    """One row of the table: each figure over the row's seeds (``SeedCell``: per seed, the 95% t-interval, whether
    they split; ``n`` the seeds it rests on), the training and evaluation lengths, the runs' steps, evaluation
    sizes and hosts, and the reference's means at the figures both have with the largest difference."""
    first = members[0]
    figures = {
        key: SeedCell({r.seed: run_figure(r, key) for r in members}, ACCURACY).as_dict() for key in figure_keys(first)
    }
    compared = reference_summary(figures, first, reference) if reference else {}
    return {
        "task": first.task,
        "label": first.label,
        "settings": [list(pair) for pair in first.settings],
        "seeds": [r.seed for r in members],
        "train_length": first.train_length,
        "lengths": sorted(first.accuracy),
        "figures": figures,
        "steps": [list(r.steps) for r in members],
        "eval_sizes": [r.eval_size for r in members],
        "hosts": sorted({r.host for r in members}),
        "reference": compared.get("reference"),
        "reference_train_length": compared.get("reference_train_length"),
        "compared": compared.get("compared", []),
        "max_abs_diff": compared.get("max_abs_diff"),
    }


def grid_baselines(runs: list[GridRun]) -> dict[str, dict[str, dict[str, float]]]:
    """Per task in the table's order, the baselines of its evaluation sets by length (its first run's that
    recorded them: the sets depend on the evaluation seed only); tasks whose runs did not record them are absent."""
    first: dict[str, GridRun] = {}
    for run in runs:
        if run.baselines.get(run.longest):
            first.setdefault(run.task, run)
    return {task: {str(n): row for n, row in run.baselines.items()} for task, run in first.items()}


def row_name(row: dict[str, Any]) -> str:
    """A row in a note: task, scheme and the settings telling it apart."""
    shown = ", ".join(f"{k}={v}" for k, v in row["settings"])
    return f"{row['task']} {row['label']}" + (f" [{shown}]" if shown else "")


def grid_summary(
    runs: list[GridRun], notes: list[str], reference: list[GridRun] | None = None, reference_label: str = ""
) -> dict[str, Any]:
    """Everything the report shows, per seed where a figure has seeds: ``grid.json``, what rendering reads. Every
    row carries its own training and evaluation lengths (rows trained at different lengths are tables apart when
    rendered); ``lengths`` and ``train_length`` are the first run's, as summaries before them held. A reference
    row is its task and scheme's in ``reference``, compared at the figures both have."""
    theirs = by_row(reference) if reference else {}
    rows = [
        row_summary(members, theirs.get((task, label, ())) if theirs else None)
        for (task, label, _), members in by_row(runs).items()
    ]
    hosts = hosts_note({row_name(row): row["hosts"] for row in rows})
    first = runs[0]
    return {
        "report": "grid",
        "lengths": sorted(first.accuracy),
        "train_length": first.train_length,
        "setting_keys": [key for key, _ in first.settings],
        "reference": reference_label if theirs else None,
        "rows": rows,
        "baselines": grid_baselines(runs),
        "runs": [run.as_dict() for run in runs],
        "notes": notes + ([hosts] if hosts else []),
    }


def compute_grid(directory: str | Path, reference: str | None = None) -> dict[str, Any]:
    """The grid's summary from the runs below ``directory`` (and the reference's lines, when given)."""
    runs, found = load_runs(directory)
    if not runs:
        listed = " ".join(found.notes())
        raise MissingRunError(
            f"no {RESULTS_FILE} below {directory} of a successful run"
            + (f": {listed}" if listed else ": is it a multirun directory of train.py?")
        )
    warning = short_run_warning({run.name: run.steps for run in runs})
    notes = ([warning] if warning else []) + found.notes()
    if not reference:
        return grid_summary(runs, notes)
    label = REFERENCE_LABEL if not Path(reference).is_file() else f"{reference} (reference)"
    return grid_summary(runs, notes, reference_runs(reference), label)
