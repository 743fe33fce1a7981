"""The position zoo's report: every encoding on every synthetic task, ranked by how well it extrapolates.

    poslab report zoo DIR        (DIR: the multirun directory of ``python train.py -m experiment=position_zoo``)

Per task one table: accuracy at 1x, 2x, 4x and 8x the training length (mean over seeds and a 95% Student-t
interval over them), then the same trained models evaluated with test-time scaling at the longest length: scores
times log(L)/log(L_train) (every encoding) and the best of the encoding's own test-time variants (RoPE's scaling
rules with factor L / L_train; ``PositionEncoding.test_time_variants``). Encodings are ranked within a task by
their *extrapolation score*, the mean plain accuracy at 2x, 4x and 8x (ties: by 1x); the overall ranking is by
the mean of those ranks over tasks. Files: ``zoo.md`` (the tables), ``zoo.csv`` (one row per run),
``zoo.json``, a training-time table (seconds per run by encoding, against RoPE's, and their sum),
``zoo_accuracy.png`` (accuracy against length, a panel per task), ``zoo_heatmap.png``
(extrapolation score, encodings x tasks).
"""

from __future__ import annotations

import csv
import io
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from statistics import mean, stdev
from typing import Any

from poslab.analysis.extrapolation import is_grid_result
from poslab.analysis.output import AnalysisResult, short_run_warning, training_steps
from poslab.analysis.results import FinishedRun, collect_runs, differing_settings, setting_values
from poslab.errors import MissingRunError
from poslab.plotting import plt
from poslab.run_files import ANALYSIS_DIR, RESULTS_FILE

MULTIPLES = (1, 2, 4, 8)  # test lengths as multiples of the training length
EXTRAPOLATION = (2, 4, 8)  # the multiples the ranking averages
#: two-sided 95% Student-t quantiles by degrees of freedom (1 to 10); beyond, a Cornish-Fisher expansion
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)


def t_quantile(df: int) -> float:
    """The 97.5% quantile of Student's t with ``df`` degrees of freedom (to 3 decimals)."""
    if df <= len(T975):
        return T975[df - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


@dataclass(frozen=True)
class Interval:
    """A mean over seeds with its 95% t-interval, clipped to [0, 1] (accuracies); one seed: no interval."""

    mean: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, values: list[float]) -> Interval:
        values = [v for v in values if v == v]
        if not values:
            return cls(math.nan, math.nan, math.nan, 0)
        m = mean(values)
        if len(values) < 2:
            return cls(m, math.nan, math.nan, 1)
        half = t_quantile(len(values) - 1) * stdev(values) / math.sqrt(len(values))
        return cls(m, max(0.0, m - half), min(1.0, m + half), len(values))

    def cell(self) -> str:
        if self.n == 0:
            return "n/a"
        if self.n == 1:
            return f"{self.mean:.3f}"
        return f"{self.mean:.3f} [{self.low:.2f}, {self.high:.2f}]"


@dataclass
class ZooRun:
    """One finished run of the zoo: its task and encoding, and its accuracies by multiple of the training length."""

    task: str
    encoding: str  # the encoding's label (``rope``, ``alibi``, ``rope:test_yarn`` ...) plus settings telling it apart
    seed: int
    train_length: int
    accuracy: dict[int, float]  # by multiple (1, 2, 4, 8) present in the run
    log_scaled: dict[int, float]
    variants: dict[str, dict[int, float]] = field(default_factory=dict)  # variant -> multiple -> accuracy
    steps: tuple[int | None, int | None] = (None, None)
    train_seconds: float = math.nan  # this process's fit only: a resumed job counts its last part
    path: Path = Path()

    @property
    def score(self) -> float:
        """The extrapolation score: mean plain accuracy at 2x, 4x and 8x (those the run has)."""
        values = [self.accuracy[m] for m in EXTRAPOLATION if m in self.accuracy]
        return mean(values) if values else math.nan


def zoo_run(run: FinishedRun, keys: list[str]) -> ZooRun:
    result = run.result
    train = int(result["train_length"])
    accuracy: dict[int, float] = {}
    log_scaled: dict[int, float] = {}
    variants: dict[str, dict[int, float]] = defaultdict(dict)
    for length, row in result["figures"].items():
        if int(length) % train:
            continue  # a length that is no multiple of the training length: not in the zoo's columns
        multiple = int(length) // train
        accuracy[multiple] = row["accuracy"]
        log_scaled[multiple] = row.get("accuracy_log_scaled", math.nan)
        for key, value in row.items():
            if key.startswith("accuracy_test_"):
                variants[key.removeprefix("accuracy_")][multiple] = value
    values = dict(zip(keys, setting_values(run, keys)))
    # a task's own settings (counting's num_variables) tell tasks apart; anything else tells encodings apart
    task = [f"{k.removeprefix('task.')}={v}" for k, v in values.items() if k.startswith("task.")]
    settings = [f"{k}={v}" for k, v in values.items() if not k.startswith("task.")]
    return ZooRun(
        task=" ".join([result["task"], *task]),
        encoding=" ".join([result["label"], *settings]),
        seed=int(result["seed"]),
        train_length=train,
        accuracy=accuracy,
        log_scaled=log_scaled,
        variants=dict(variants),
        steps=training_steps(run.path, result),
        train_seconds=float(result.get("train_seconds", math.nan)),
        path=run.path,
    )


@dataclass
class Row:
    """One encoding on one task: intervals over seeds of every figure, and its rank within the task."""

    encoding: str
    seeds: int
    accuracy: dict[int, Interval]
    score: Interval
    scaled: dict[int, Interval]  # scores x log(L)/log(L_train), by multiple
    rules: dict[int, tuple[str, Interval]]  # the best test-time variant at each multiple past 1 (none: no variants)
    rank: float = math.nan

    @property
    def log_scaled(self) -> Interval:
        """Log-length scaling at the longest multiple."""
        return self.scaled[max(self.scaled)]

    @property
    def best_variant(self) -> tuple[str, Interval] | None:
        """The best test-time variant at the longest multiple."""
        return self.rules.get(max(self.accuracy))


def task_rows(runs: list[ZooRun]) -> list[Row]:
    """The rows of one task's table, best first (extrapolation score, then accuracy at 1x); ties share a rank."""
    groups: dict[str, list[ZooRun]] = defaultdict(list)
    for run in runs:
        groups[run.encoding].append(run)
    rows = []
    for encoding, members in groups.items():
        multiples = sorted(set.intersection(*(set(r.accuracy) for r in members)))
        variants = sorted(set.intersection(*(set(r.variants) for r in members)))
        rules = {}
        for multiple in multiples[1:]:
            candidates = [(v, Interval.of([r.variants[v].get(multiple, math.nan) for r in members])) for v in variants]
            candidates = [(v, interval) for v, interval in candidates if interval.n]  # a rule evaluated there
            if candidates:
                rules[multiple] = max(candidates, key=lambda item: _or_low(item[1].mean))
        rows.append(
            Row(
                encoding=encoding,
                seeds=len(members),
                accuracy={m: Interval.of([r.accuracy[m] for r in members]) for m in multiples},
                score=Interval.of([r.score for r in members]),
                scaled={m: Interval.of([r.log_scaled.get(m, math.nan) for r in members]) for m in multiples},
                rules=rules,
            )
        )
    rows.sort(key=lambda r: (-_or_low(r.score.mean), -_or_low(r.accuracy[1].mean if 1 in r.accuracy else math.nan)))
    for row in rows:  # competition ranking: equal scores (to the table's 3 decimals) share the better rank
        row.rank = 1 + sum(round(other.score.mean, 3) > round(row.score.mean, 3) for other in rows)
    return rows


def _or_low(value: float) -> float:
    return value if value == value else -1.0


def task_table(task: str, rows: list[Row], train_length: int) -> str:
    multiples = sorted({m for row in rows for m in row.accuracy})
    longest = multiples[-1] * train_length
    header = ["rank", "encoding", "seeds", *(f"{m}x ({m * train_length})" for m in multiples), "score (2-8x)"]
    header += [f"{longest}: x log L/log {train_length}", f"{longest}: best test-time rule"]
    lines = [f"### {task} (trained at {train_length})", "", *_head(header)]
    for row in rows:
        rule = f"{row.best_variant[1].cell()} ({row.best_variant[0]})" if row.best_variant else "n/a"
        cells = [f"{row.rank:g}", row.encoding, str(row.seeds)]
        cells += [row.accuracy[m].cell() if m in row.accuracy else "n/a" for m in multiples]
        cells += [row.score.cell(), row.log_scaled.cell(), rule]
        lines.append(_row(cells))
    return "\n".join(lines + ["", scaled_table(rows, train_length)])


def scaled_table(rows: list[Row], train_length: int) -> str:
    """The same trained models with test-time scaling, at every multiple past the training length: scores x
    log(L)/log(L_train) (every encoding), and the best of the encoding's test-time rules (RoPE's) with its name."""
    multiples = sorted({m for row in rows for m in row.accuracy if m > 1})
    with_rules = any(row.rules for row in rows)
    header = ["encoding", *(f"{m}x: x log L" for m in multiples)]
    header += [f"{m}x: best rule" for m in multiples] if with_rules else []
    lines = [f"With test-time scaling (trained at {train_length}):", "", *_head(header)]
    for row in rows:
        cells = [row.encoding, *(row.scaled[m].cell() if m in row.scaled else "n/a" for m in multiples)]
        if with_rules:
            cells += [f"{row.rules[m][1].cell()} ({row.rules[m][0]})" if m in row.rules else "n/a" for m in multiples]
        lines.append(_row(cells))
    return "\n".join(lines)


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _head(header: list[str]) -> list[str]:
    """A markdown table's header row and its separator."""
    return [_row(header), "|" + "---|" * len(header)]


def overall_ranking(tables: dict[str, list[Row]]) -> list[tuple[str, float, float, int]]:
    """(encoding, mean rank over tasks, mean extrapolation score over tasks, tasks) for the encodings of every
    task's table, best first; an encoding missing from some task is ranked over the tasks it has, and says so."""
    ranks: dict[str, list[float]] = defaultdict(list)
    scores: dict[str, list[float]] = defaultdict(list)
    for rows in tables.values():
        for row in rows:
            ranks[row.encoding].append(row.rank)
            scores[row.encoding].append(row.score.mean)
    ranking = [(e, mean(ranks[e]), mean(scores[e]), len(ranks[e])) for e in ranks]
    ranking.sort(key=lambda item: (item[1], -_or_low(item[2])))
    return ranking


def overall_table(ranking: list[tuple[str, float, float, int]], n_tasks: int) -> str:
    header = ["rank", "encoding", "mean rank", "mean score (2-8x)", "tasks"]
    lines = ["### Overall", "", *_head(header)]
    for place, (encoding, rank, score, tasks) in enumerate(ranking, 1):
        lines.append(_row([str(place), encoding, f"{rank:.2f}", f"{score:.3f}", f"{tasks}/{n_tasks}"]))
    return "\n".join(lines)


def training_seconds(runs: list[ZooRun]) -> dict[str, list[float]]:
    """The training seconds of each encoding's runs (every task and seed), where the runs recorded them."""
    seconds: dict[str, list[float]] = defaultdict(list)
    for run in runs:
        if run.train_seconds == run.train_seconds:
            seconds[run.encoding].append(run.train_seconds)
    return seconds


def time_table(seconds: dict[str, list[float]], order: list[str], baseline: str = "rope") -> str:
    """Training time per run by encoding (mean over its runs) and against ``baseline``'s, and the sum over all
    runs: the zoo's compute, its cost beside its ranking."""
    if not seconds:
        return ""
    base = mean(seconds[baseline]) if seconds.get(baseline) else math.nan
    header = ["encoding", "runs", "s / run", f"x {baseline}"]
    lines = ["### Training time", "", *_head(header)]
    for encoding in [e for e in order if e in seconds]:
        per_run = mean(seconds[encoding])
        ratio = f"{per_run / base:.2f}" if base == base else "n/a"
        lines.append(_row([encoding, str(len(seconds[encoding])), f"{per_run:.1f}", ratio]))
    total = sum(sum(values) for values in seconds.values())
    count = sum(len(values) for values in seconds.values())
    lines += ["", f"{count} runs, {total / 3600:.2f} h of training summed over them (a resumed run: its last part)."]
    return "\n".join(lines)


def runs_csv(runs: list[ZooRun]) -> str:
    variants = sorted({v for r in runs for v in r.variants})
    multiples = sorted({m for r in runs for m in r.accuracy})
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    header = ["task", "encoding", "seed", "train_length", *(f"accuracy_{m}x" for m in multiples)]
    header += [f"log_scaled_{m}x" for m in multiples]
    header += [f"{v}_{m}x" for v in variants for m in multiples if m > 1]
    writer.writerow([*header, "steps", "train_seconds", "run"])
    for r in runs:
        cells: list[Any] = [r.task, r.encoding, r.seed, r.train_length]
        cells += [_number(r.accuracy.get(m)) for m in multiples]
        cells += [_number(r.log_scaled.get(m)) for m in multiples]
        cells += [_number(r.variants.get(v, {}).get(m)) for v in variants for m in multiples if m > 1]
        writer.writerow([*cells, r.steps[0], _number(r.train_seconds), str(r.path)])
    return buffer.getvalue()


def _number(value: float | None) -> str:
    return "" if value is None or value != value else f"{value:.4f}"


def plot_accuracy(tables: dict[str, list[Row]], train_lengths: dict[str, int], order: list[str]) -> Any:
    """Accuracy against test length, one panel per task, a line per encoding (seed means, the interval shaded);
    one colour and line style per encoding in every panel, the legend in overall-rank order."""
    n = len(tables)
    columns = min(3, n)
    rows = math.ceil(n / columns)
    size = (4.4 * columns + 2.6, 3.6 * rows)
    fig, axes = plt.subplots(rows, columns, figsize=size, squeeze=False, layout="constrained")
    cmap = plt.get_cmap("tab20")
    styles = {e: (cmap(i % 20), ("-", "--", ":")[i // 20 % 3]) for i, e in enumerate(order)}
    handles: dict[str, Any] = {}
    for ax, (task, rows_of_task) in zip(axes.flat, tables.items()):
        for row in sorted(rows_of_task, key=lambda r: order.index(r.encoding)):
            multiples = sorted(row.accuracy)
            lengths = [m * train_lengths[task] for m in multiples]
            colour, style = styles[row.encoding]
            means = [row.accuracy[m].mean for m in multiples]
            (handles[row.encoding],) = ax.plot(lengths, means, style, marker="o", markersize=3, color=colour, lw=1.2)
            lows = [row.accuracy[m].low for m in multiples]
            if all(v == v for v in lows):
                ax.fill_between(lengths, lows, [row.accuracy[m].high for m in multiples], color=colour, alpha=0.08)
        ax.set_xscale("log", base=2)
        ax.set_xticks(lengths, [str(v) for v in lengths])
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("test length (tokens)")
        ax.set_ylabel("accuracy")
        ax.set_title(f"{task} (trained at {train_lengths[task]})")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    legend = [e for e in order if e in handles]
    fig.legend([handles[e] for e in legend], legend, loc="outside right upper", fontsize=7, title="overall rank order")
    return fig


def plot_heatmap(tables: dict[str, list[Row]], order: list[str]) -> Any:
    """The extrapolation score (mean accuracy at 2x-8x) of each encoding (rows, overall rank order) on each task."""
    import numpy as np

    tasks = list(tables)
    values = np.full((len(order), len(tasks)), np.nan)
    for j, task in enumerate(tasks):
        for row in tables[task]:
            values[order.index(row.encoding), j] = row.score.mean
    fig, ax = plt.subplots(figsize=(1.3 * len(tasks) + 3.2, 0.32 * len(order) + 1.6), layout="constrained")
    image = ax.imshow(values, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(len(tasks)), tasks, rotation=30, ha="right")
    ax.set_yticks(range(len(order)), order, fontsize=8)
    for i in range(len(order)):
        for j in range(len(tasks)):
            if values[i, j] == values[i, j]:
                colour = "black" if values[i, j] > 0.6 else "white"
                ax.text(j, i, f"{values[i, j]:.2f}", ha="center", va="center", fontsize=7, color=colour)
    fig.colorbar(image, ax=ax, label="mean accuracy at 2x, 4x, 8x the training length")
    ax.set_title("position zoo: extrapolation score")
    return fig


def load_zoo(directory: str | Path) -> tuple[list[ZooRun], list[str]]:
    """Every successful synthetic-task run below ``directory``, and the notes on the jobs left out."""
    found = collect_runs([Path(directory)], keep=is_grid_result)
    if not found.counted:
        listed = " ".join(found.notes())
        raise MissingRunError(
            f"no {RESULTS_FILE} of a successful synthetic-task run below {directory}"
            + (f": {listed}" if listed else ": is it the multirun directory of experiment=position_zoo?")
        )
    keys = differing_settings(found.counted, lambda r: (r.result["task"], r.result["label"]))
    runs = [zoo_run(run, keys) for run in found.counted]
    runs.sort(key=lambda r: (r.task, r.encoding, r.seed))
    return runs, found.notes()


def report_zoo(directory: str | Path) -> AnalysisResult:
    """The zoo's tables (one per task, then the overall ranking) and its files, for ``DIR/analysis/zoo/``."""
    runs, notes = load_zoo(directory)
    by_task: dict[str, list[ZooRun]] = defaultdict(list)
    for run in runs:
        by_task[run.task].append(run)
    tables = {task: task_rows(members) for task, members in by_task.items()}
    train_lengths = {task: members[0].train_length for task, members in by_task.items()}
    ranking = overall_ranking(tables)
    order = [encoding for encoding, *_ in ranking]
    parts = [overall_table(ranking, len(tables))]
    parts += [task_table(task, rows, train_lengths[task]) for task, rows in tables.items()]
    seconds = training_seconds(runs)
    parts += [table for table in [time_table(seconds, order)] if table]
    warning = short_run_warning({f"{r.task} {r.encoding} seed {r.seed}": r.steps for r in runs})
    notes = ([warning] if warning else []) + notes
    text = "\n\n".join(parts) + ("\n\n" + "\n".join(notes) if notes else "")
    result = AnalysisResult("zoo", text, Path(directory) / ANALYSIS_DIR / "zoo")
    result.add_text("zoo.md", text)
    result.add_text("zoo.csv", runs_csv(runs))
    result.add_json(
        "zoo.json",
        {
            "overall": [{"encoding": e, "mean_rank": r, "mean_score": s, "tasks": n} for e, r, s, n in ranking],
            "train_seconds": {e: {"runs": len(v), "mean": mean(v), "total": sum(v)} for e, v in seconds.items()},
            "tasks": {
                task: [
                    {
                        "rank": row.rank,
                        "encoding": row.encoding,
                        "seeds": row.seeds,
                        "accuracy": {f"{m}x": vars(i) for m, i in row.accuracy.items()},
                        "score": vars(row.score),
                        "log_scaled": {f"{m}x": vars(i) for m, i in row.scaled.items()},
                        "best_rule": {f"{m}x": {"variant": v, **vars(i)} for m, (v, i) in row.rules.items()},
                        "log_scaled_longest": vars(row.log_scaled),
                        "best_variant_longest": (
                            {"variant": row.best_variant[0], **vars(row.best_variant[1])} if row.best_variant else None
                        ),
                    }
                    for row in rows
                ]
                for task, rows in tables.items()
            },
        },
    )
    result.add_figure("zoo_accuracy.png", plot_accuracy(tables, train_lengths, order))
    result.add_figure("zoo_heatmap.png", plot_heatmap(tables, order))
    return result
