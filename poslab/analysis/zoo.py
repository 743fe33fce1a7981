"""The position zoo's report: every encoding on every synthetic task, ranked by how well it extrapolates, with the
uncertainty of every figure and of every place.

    poslab report zoo DIR        (DIR: the multirun directory of ``python train.py -m experiment=position_zoo``)

Three layers: this module computes (rows, ranking, ``zoo_summary``: what ``zoo.json`` holds), ``zoo_render``
draws the tables and figures from what it computed, ``zoo_report.report_zoo`` runs both and writes the files.

What is measured (``poslab.lightning_modules.synthetic``; the statistics are ``poslab.analysis.stats``):

- **Extrapolation score**: the mean accuracy over the positions *past* the training length (``t >=
  train_length``, ``accuracy_past_train``) at 2x, 4x and 8x. Positions before it a causal model computes exactly
  as in training, so they say nothing about extrapolation (at 2x they are half the scored positions of lag).
- **1x**: the accuracy at the training length, beside it. A method under 0.9 of the task's best 1x is flagged
  (``!``): it did not learn the task, and its extrapolation score says little.
- **Baselines** from the same evaluation sets: chance, the best constant answer (chosen on the set itself: an
  upper bound on any constant) and the task's trivial rules (flip_flop's last bit); the best of them is the
  ``baseline`` column and the dashed line of every plot.
- **Test-time scaling** (the same trained weights): scores x log(L)/log(L_train), and the encoding's test-time
  rules (RoPE's), each past the training length; a rule is *chosen on the selection set* (other sequences of the
  same length) and its test figure reported, so the choice is not made on the figures it reports (runs written
  before selection sets existed: chosen on the test set, and marked so).
- **Effective length**: the largest evaluated length at which the accuracy (past training, as the columns) stays
  at or above 85% of the 1x accuracy, every shorter length too (``poslab.analysis.effective_length``), per seed
  then over seeds with its interval. Counted over the lengths of every run of the task (each length any run has,
  up to the longest every run has; a length a run lacks stops its count). A seed whose 1x accuracy is at the floor
  (within ``FLOOR_MARGIN`` of the task's best trivial baseline, or below it) learned nothing to keep and has no
  effective length: left out of the mean, and the cell says how many seeds were not learned ("not learned" where
  none was). Its seeds split where they lie more than one doubling apart.
- **Intervals**: mean over seeds with a 95% Student-t interval; where seeds split into two outcomes the per-seed
  values instead. **Ranks**: within a task by the mean score over the seeds every row of the task has (rows with
  fewer seeds, a sweep still running: the table says so; the rows are ordered by that rank, then that mean), with
  a 95% interval for each encoding's place (not for every place at once) from the paired differences over seeds
  (every encoding sees the same data under a seed; ``stats.rank_intervals``: Bonferroni over each encoding's
  comparisons, so it always holds the rank; a task's only row says so, not "separated"); overall, the mean rank
  over the ranked tasks with an interval of known coverage (``stats.mean_rank_intervals``: every task's rank
  interval at once, by Bonferroni over the tasks, lows and highs averaged; it replaced a percentile bootstrap that
  under-covers; ties broken by the mean over tasks of those shared-seed scores, the ``mean score`` column), the
  groups of places the data do not separate, and the places each encoding takes when one task is left out. Plain
  ``counting`` (answers that grow with the length) is left out of the overall ranking; ``counting`` with
  ``program_length`` (filler) is ranked.

Files: ``zoo.md`` (every table), ``zoo.csv`` (one row per run, every figure by multiple), ``zoo.json``,
``zoo_accuracy.png`` (small multiples: a row per task, a column per family of methods, the baseline in each
panel), ``zoo_heatmap.png`` (extrapolation score, encodings x tasks).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import mean
from typing import Any

from poslab.analysis.effective_length import effective_length, evaluated_lengths
from poslab.analysis.extrapolation import is_grid_result
from poslab.analysis.output import training_steps
from poslab.analysis.stats import (
    SeedCell,
    mean_rank_intervals,
    mean_ranks,
    not_separated,
    rank_intervals,
    seed_tables,
    shared_seed_means,
)
from poslab.errors import MissingRunError
from poslab.runs.files import RESULTS_FILE
from poslab.runs.results import (
    FinishedRun,
    collect_runs,
    differing_settings,
    setting_values,
    whole_training_seconds,
)

EXTRAPOLATION = (2, 4, 8)  # the multiples of the training length the score averages
PAST = "_past_train"
LEARNED_FRACTION = 0.9  # under this fraction of the task's best 1x accuracy a method is flagged
ACCURACY = (0.0, 1.0)


@dataclass
class ZooRun:
    """One finished run of the zoo: its task and encoding, and its figures by multiple of the training length."""

    task: str
    encoding: str  # the encoding's label plus the settings telling it apart
    seed: int
    train_length: int
    ranked: bool  # False: a task whose answers change with the length (plain counting), left out of the ranking
    figures: dict[int, dict[str, float]]  # multiple -> the run's figures at that length
    steps: tuple[int | None, int | None] = (None, None)
    train_seconds: float = math.nan
    trained_whole: bool = True  # False: resumed, its train_seconds its last process's part (whole_training_seconds)
    path: Path = Path()

    def figure(self, multiple: int, key: str) -> float:
        return float(self.figures.get(multiple, {}).get(key, math.nan))

    def past(self, multiple: int, way: str = "accuracy") -> float:
        """``way``'s accuracy past the training length at ``multiple`` (1x: over every position)."""
        return self.figure(multiple, way if multiple == 1 else way + PAST)

    def score(self, multiples: Sequence[int]) -> float:
        """The mean accuracy past the training length over ``multiples`` (the task's ``score_multiples``): NaN where
        a figure is missing, never a mean over fewer lengths than the other runs'."""
        return mean(self.past(m) for m in multiples) if multiples else math.nan

    @property
    def by_length(self) -> dict[int, float]:
        """The accuracy the effective length reads, by length in tokens: 1x over every position, past it beyond."""
        return {m * self.train_length: self.past(m) for m in self.figures}

    def effective_length(self, lengths: Sequence[int], floor: dict[str, float] | None = None) -> float:
        """In tokens: the largest of ``lengths`` within 85% of the 1x accuracy (``effective_length``); NaN where the
        1x accuracy is at ``floor`` (the 1x baselines: ``not_learned``)."""
        if self.not_learned(floor):
            return math.nan
        return effective_length(self.by_length, self.train_length, lengths=lengths)

    def not_learned(self, floor: dict[str, float] | None) -> bool:
        """A 1x accuracy at the floor of the 1x baselines (``at_floor``): the run learned nothing to keep."""
        one_x = self.past(1)
        return bool(floor) and one_x == one_x and at_floor(one_x, floor)

    @property
    def variants(self) -> list[str]:
        return sorted({k.removeprefix("accuracy_") for row in self.figures.values() for k in row if _is_variant(k)})


def _is_variant(key: str) -> bool:
    return key.startswith("accuracy_test_") and not key.endswith(PAST)


def zoo_run(run: FinishedRun, keys: list[str]) -> ZooRun:
    result = run.result
    train = int(result["train_length"])
    figures = {int(n) // train: row for n, row in result["figures"].items() if int(n) % train == 0}
    values = dict(zip(keys, setting_values(run, keys)))
    # a task's own settings (counting's num_variables) tell tasks apart; anything else tells encodings apart
    task = [f"{k.removeprefix('task.')}={v}" for k, v in values.items() if k.startswith("task.")]
    settings = [f"{k}={v}" for k, v in values.items() if not k.startswith("task.")]
    task_config = result.get("config", {}).get("task", {})
    return ZooRun(
        task=" ".join([result["task"], *task]),
        encoding=" ".join([result["label"], *settings]),
        seed=int(result["seed"]),
        train_length=train,
        ranked=not (result["task"] == "counting" and task_config.get("program_length") is None),
        figures=figures,
        steps=training_steps(run.path, result),
        train_seconds=float(result.get("train_seconds", math.nan)),
        trained_whole=whole_training_seconds(result) is not None,
        path=run.path,
    )


def cell_of(runs: list[ZooRun], value: Any) -> SeedCell:
    return SeedCell({r.seed: value(r) for r in runs}, ACCURACY)


@dataclass
class Rule:
    """The test-time rule chosen at one multiple: its name, its test figure, and what it was chosen on."""

    variant: str
    test: SeedCell
    chosen_on: str  # "selection set", or "test set" for runs without one (optimistic)


@dataclass
class Row:
    """One encoding on one task: every figure over seeds, its rank within the task and the rank's interval."""

    encoding: str
    runs: list[ZooRun]
    one_x: SeedCell
    past: dict[int, SeedCell]
    score: SeedCell
    score_multiples: tuple[int, ...]  # what the score averages (``score_multiples``: every run of the task has them)
    scaled: dict[int, SeedCell]
    rules: dict[int, Rule]
    draw_sd: dict[int, float] = field(default_factory=dict)  # randomized positions: mean sd over draws
    effective: SeedCell = field(default_factory=lambda: SeedCell({}))  # effective length in tokens, by seed
    not_learned: list[int] = field(default_factory=list)  # seeds whose 1x is at the floor: no effective length
    shared_mean: float = math.nan  # the score's mean over the seeds every row of the task has: what ranks it
    rank: float = math.nan
    rank_interval: tuple[int, int] = (0, 0)
    flagged: bool = False

    @property
    def seeds(self) -> int:
        return len(self.runs)


def choose_rule(runs: list[ZooRun], multiple: int) -> Rule | None:
    """The test-time variant with the best mean selection-set accuracy at ``multiple`` (past training), reported on
    the test set; without selection figures, the best on the test set itself."""
    variants = sorted(set.intersection(*(set(r.variants) for r in runs)))
    variants = [
        v for v in variants if any(r.past(multiple, f"accuracy_{v}") == r.past(multiple, f"accuracy_{v}") for r in runs)
    ]  # evaluated at this multiple
    if not variants:
        return None
    on_selection = all(f"selection_{variants[0]}" in r.figures.get(multiple, {}) for r in runs)
    key = "selection_{}" if on_selection else "accuracy_{}" + PAST

    def chosen_by(variant: str) -> float:
        values = [r.figure(multiple, key.format(variant)) for r in runs]
        values = [v for v in values if v == v]
        return mean(values) if values else -1.0

    best = max(variants, key=chosen_by)
    test = cell_of(runs, lambda r: r.past(multiple, f"accuracy_{best}"))
    return Rule(best, test, "selection set" if on_selection else "test set")


def score_multiples(runs: Sequence[ZooRun]) -> tuple[int, ...]:
    """The multiples of ``EXTRAPOLATION`` every run of a task was evaluated at: the score averages these, the same
    lengths for every run (a run scored at fewer would otherwise skip its hardest)."""
    return tuple(m for m in EXTRAPOLATION if all(m in r.figures for r in runs))


def encoding_row(
    encoding: str,
    runs: list[ZooRun],
    scored_at: tuple[int, ...],
    lengths: Sequence[int] = (),
    floor: dict[str, float] | None = None,
) -> Row:
    """One encoding's row; its effective length counted over ``lengths`` (the task's: ``evaluated_lengths``), a
    seed whose 1x is at ``floor`` (the 1x baselines) left out of it."""
    multiples = sorted(set.intersection(*(set(r.figures) for r in runs)))
    past = [m for m in multiples if m > 1]
    rules = {m: rule for m in past if (rule := choose_rule(runs, m)) is not None}
    draw_sd = {m: mean(r.figure(m, "accuracy_past_train_draw_sd") for r in runs) for m in past}
    return Row(
        encoding=encoding,
        runs=runs,
        one_x=cell_of(runs, lambda r: r.past(1)),
        past={m: cell_of(runs, lambda r, m=m: r.past(m)) for m in past},
        score=cell_of(runs, lambda r: r.score(scored_at)),
        score_multiples=scored_at,
        scaled={m: cell_of(runs, lambda r, m=m: r.past(m, "accuracy_log_scaled")) for m in past},
        rules=rules,
        draw_sd={m: v for m, v in draw_sd.items() if v == v},
        # clipped to the lengths counted over: no seed can reach below 1x or past the longest
        effective=SeedCell(
            {r.seed: r.effective_length(lengths, floor) for r in runs},
            (runs[0].train_length, max(lengths, default=runs[0].train_length)),
            doublings=True,
        ),
        not_learned=sorted(r.seed for r in runs if r.not_learned(floor)),
    )


def task_rows(runs: list[ZooRun]) -> list[Row]:
    """The rows of one task's table, each with its rank (by the mean score over the seeds every row has; equal
    means share the better one), its rank interval and its 1x flag, ordered by that rank, then by that mean, then
    by the 1x accuracy: the order and the rank column agree even where rows have different seeds."""
    groups: dict[str, list[ZooRun]] = defaultdict(list)
    for run in runs:
        groups[run.encoding].append(run)
    scored_at = score_multiples(runs)
    lengths = evaluated_lengths(run.by_length for run in runs)  # every row's effective length on the same lengths
    floor = baselines(runs).get(1)
    rows = [encoding_row(encoding, members, scored_at, lengths, floor) for encoding, members in groups.items()]
    scores = {row.encoding: row.score.by_seed for row in rows}
    # each row's rank interval from paired differences over the shared seeds (stats.rank_intervals): it always holds
    # the rank, which the percentile bootstrap over 3 seeds did not (issue 37)
    places = rank_intervals(seed_tables(scores))
    shared = shared_seed_means(scores)[1]
    best_one_x = max(_or_low(row.one_x.interval.mean) for row in rows)
    for row in rows:
        place = places[row.encoding]
        row.rank, row.rank_interval = place.rank, (place.low, place.high)
        row.shared_mean = shared[row.encoding]
        row.flagged = _or_low(row.one_x.interval.mean) < LEARNED_FRACTION * best_one_x
    rows.sort(key=lambda r: (r.rank, -_or_low(r.shared_mean), -_or_low(r.one_x.interval.mean)))
    return rows


def shared_seeds(rows: list[Row]) -> list[int]:
    """The seeds every row of a task has a score for: what its ranks and its order are computed on."""
    return shared_seed_means({row.encoding: row.score.by_seed for row in rows})[0]


def _or_low(value: float) -> float:
    return value if value == value else -1.0


def baselines(runs: list[ZooRun], past: bool = True) -> dict[int, dict[str, float]]:
    """The baselines of a task's evaluation sets by multiple (1x over every position, past it over the positions
    past training, as the zoo's accuracy; ``past=False``: over every position at every multiple, as the figure
    ``accuracy``): chance, the best constant and the task's rules. The sets depend on the evaluation seed only,
    so every run of the task has the same ones; the mean guards against a run with other sets."""
    found: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for run in runs:
        for multiple, row in run.figures.items():
            past_part = past and multiple > 1
            for key, value in row.items():
                if key.startswith("baseline_") and key.endswith(PAST) == past_part:
                    found[multiple][key.removeprefix("baseline_").removesuffix(PAST)].append(value)
            if "baseline_chance" in row and past_part:  # chance is the same over any positions
                found[multiple]["chance"].append(row["baseline_chance"])
    return {m: {name: mean(values) for name, values in sorted(rows.items())} for m, rows in sorted(found.items())}


@dataclass
class Ranking:
    """The overall ranking: per encoding its mean rank over the ranked tasks, its interval (known coverage), its
    mean score, the tasks it was ranked on, and its places with one task left out."""

    order: list[str]
    mean_rank: dict[str, tuple[float, float, float]]
    mean_score: dict[str, float]
    tasks: dict[str, int]
    leave_one_out: dict[str, tuple[int, int]]
    groups: list[list[str]]
    excluded: dict[str, str]  # task -> why it is not ranked


#: accuracy within this of the best trivial baseline (or below it) is at the floor: nothing learned there
FLOOR_MARGIN = 0.01


def runs_by_task(runs: list[ZooRun]) -> dict[str, list[ZooRun]]:
    """The runs of each task, tasks in the order the runs first name them."""
    by_task: dict[str, list[ZooRun]] = defaultdict(list)
    for run in runs:
        by_task[run.task].append(run)
    return dict(by_task)


def best_baseline(floor: dict[str, float]) -> tuple[str, float]:
    """The best of a task's trivial baselines at one multiple (chance, the best constant, its rules): name, value."""
    name = max(floor, key=lambda k: floor[k])
    return name, floor[name]


def at_floor(accuracy: float, floor: dict[str, float]) -> bool:
    """An accuracy no better than the best trivial baseline by more than ``FLOOR_MARGIN``: nothing learned."""
    return accuracy <= best_baseline(floor)[1] + FLOOR_MARGIN


COUNTING_UNRANKED = (
    "its answers change with the length (at 4x and beyond the commonest is the clamp 10): rank it with "
    "task.program_length (counting_filler)"
)


def unranked_reason(members: list[ZooRun], rows: list[Row], floor: dict[int, dict[str, float]]) -> str | None:
    """Why a task stays out of the overall ranking, or None: plain counting (its answers change with the length),
    or a task no encoding learned at the training length (every 1x accuracy within ``FLOOR_MARGIN`` of the best
    trivial baseline or below it: its places would be noise)."""
    if not all(r.ranked for r in members):
        return COUNTING_UNRANKED
    best = max((row.one_x.interval.mean for row in rows if row.one_x.interval.n), default=math.nan)
    if best == best and floor.get(1) and at_floor(best, floor[1]):
        return (
            f"no encoding learned it at the training length (the best 1x accuracy {best:.3f}, the best trivial "
            f"baseline {best_baseline(floor[1])[1]:.3f}): its places would be noise"
        )
    return None


def overall_ranking(tables: dict[str, list[Row]], excluded: dict[str, str]) -> Ranking:
    """The mean rank over the tasks not in ``excluded`` (task -> why it is left out)."""
    tasks = [task for task in tables if task not in excluded]
    per_task = {task: {row.encoding: row.score.by_seed for row in tables[task]} for task in tasks}
    mean_rank = mean_rank_intervals(per_task)
    scores: dict[str, list[float]] = defaultdict(list)
    for task in tasks:
        for row in tables[task]:  # the mean over the task's shared seeds: what its rank is computed on
            scores[row.encoding].append(row.shared_mean)
    order = sorted(mean_rank, key=lambda e: (mean_rank[e][0], -_or_low(mean(scores[e]))))
    return Ranking(
        order=order,
        mean_rank=mean_rank,
        mean_score={e: mean(scores[e]) for e in order},
        tasks={e: len(scores[e]) for e in order},
        leave_one_out=leave_one_task_out(per_task, order),
        groups=not_separated({e: mean_rank[e][1:] for e in order}, order),
        excluded=dict(excluded),
    )


def leave_one_task_out(per_task: dict[str, dict[str, dict[int, float]]], order: list[str]) -> dict[str, tuple]:
    """Each encoding's best and worst place in the overall order when one task at a time is left out."""
    places: dict[str, list[int]] = defaultdict(list)
    for left_out in per_task if len(per_task) > 1 else []:
        kept = {task: scores for task, scores in per_task.items() if task != left_out}
        ranks = mean_ranks(kept)
        for place, encoding in enumerate(sorted(ranks, key=lambda e: (ranks[e], order.index(e))), 1):
            places[encoding].append(place)
    return {e: (min(places[e]), max(places[e])) for e in order if places.get(e)}


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


def training_seconds(runs: list[ZooRun]) -> dict[str, list[float]]:
    """The training seconds of each encoding's runs (every task and seed), where the runs recorded them whole (a
    resumed run's are its last process's part: ``whole_training_seconds``)."""
    seconds: dict[str, list[float]] = defaultdict(list)
    for run in runs:
        if run.train_seconds == run.train_seconds and run.trained_whole:
            seconds[run.encoding].append(run.train_seconds)
    return seconds


def zoo_summary(
    tables: dict[str, list[Row]], floors: dict[str, dict], ranking: Ranking, seconds: dict[str, list[float]]
) -> dict[str, Any]:
    """Everything the tables and figures show, per seed where a figure has seeds: ``zoo.json``."""
    return {
        "overall": [
            {
                "encoding": e,
                "mean_rank": ranking.mean_rank[e][0],
                "mean_rank_interval": list(ranking.mean_rank[e][1:]),
                "places_leaving_one_task_out": list(ranking.leave_one_out.get(e, ())),
                "mean_score": ranking.mean_score[e],
                "tasks": ranking.tasks[e],
            }
            for e in ranking.order
        ],
        "not_separated": [group for group in ranking.groups if len(group) > 1],
        "excluded_from_ranking": ranking.excluded,
        "train_seconds": {e: {"runs": len(v), "mean": mean(v), "total": sum(v)} for e, v in seconds.items()},
        "tasks": {
            task: {"baselines": floors[task], "shared_seeds": shared_seeds(rows), "rows": list(map(row_summary, rows))}
            for task, rows in tables.items()
        },
    }


def row_summary(row: Row) -> dict[str, Any]:
    return {
        "rank": row.rank,
        "rank_interval": list(row.rank_interval),
        "encoding": row.encoding,
        "seeds": row.seeds,
        "accuracy_1x": row.one_x.as_dict(),
        "flagged_1x": row.flagged,
        "past_train": {f"{m}x": cell.as_dict() for m, cell in row.past.items()},
        "score": row.score.as_dict(),
        "score_shared_seeds": None if row.shared_mean != row.shared_mean else row.shared_mean,  # what ranks it
        "score_multiples": list(row.score_multiples),
        "log_scaled_past_train": {f"{m}x": cell.as_dict() for m, cell in row.scaled.items()},
        "rule": {
            f"{m}x": {"variant": rule.variant, "chosen_on": rule.chosen_on, **rule.test.as_dict()}
            for m, rule in row.rules.items()
        },
        "draw_sd_past_train": {f"{m}x": value for m, value in row.draw_sd.items()},
        "effective_length": {**row.effective.as_dict(), "not_learned": row.not_learned},
    }
