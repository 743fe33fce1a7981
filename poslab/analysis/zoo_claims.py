"""Claims about two encodings on the zoo's synthetic tasks: ``poslab report zoo DIR --claim "path>rope"`` says that
path's accuracy is higher than rope's; ``--claim "path<rope@read_error_pct_ffl0.98"`` names another of the runs'
figures (here flip-flop's read error on the sparse mix). At every task where both encodings ran and have that
figure, and every length evaluated, the report gives the difference A - B paired on the seeds both have (the zoo's
runs of one task and seed see the same data: ``stats.paired_difference``), its 95% interval and its verdict
(``stats.direction_verdict``, docs/verdicts.md). The default figure is the accuracy the zoo ranks: over every
position at the training length, past it beyond (``ZooRun.past``).

On accuracy, a place where neither side beats the task's best trivial baseline there (chance, the best constant,
the task's rules: ``zoo.baselines``) by more than ``zoo.FLOOR_MARGIN`` is **not testable**, whatever the interval says:
neither model learned the task there, so their difference says nothing about the claim (A5 state tracking at this
machine's budgets: every encoding right at position 0 only, as the rule "the current element" is). The rule holds
for every accuracy figure a claim can name, each against the baselines of what it scores (``figure_baselines``):
the default and ``@accuracy`` (over every position) against the test set's, a ``_past_train`` figure against the
test set's past the training length, a mix's accuracy (``@accuracy_pairs<P>``) against chance (its constant and
rules were measured on the test set, not the mix), ``@sequence_accuracy`` against chance over the whole sequence
((1 / classes) ** length). A figure with no baselines of its own (flip-flop's read error %) has no floor.

Seeds: the difference is paired on the seeds both sides have a finite figure for (a run that predates a figure
leaves out its seed, not the length); the cell says how many seeds that was (``n``) of how many either side ran
(``of``), and is **not testable** with fewer than 2.
"""

from __future__ import annotations

import re
from statistics import mean
from typing import Any

from poslab.analysis.claims import parse_claim, resolve
from poslab.analysis.stats import direction_verdict, paired_difference
from poslab.analysis.zoo import PAST, ZooRun, at_floor, baselines, best_baseline, runs_by_task

#: accuracies on an evaluation mix (other sequences than the test set's): MQAR's by number of pairs
MIX_ACCURACY = re.compile(r"^accuracy_(pairs\d+|mix_.+)$")


def figure_of(run: ZooRun, multiple: int, figure: str | None) -> float:
    return run.past(multiple) if figure is None else run.figure(multiple, figure)


def figure_baselines(runs: list[ZooRun], figure: str | None) -> dict[int, dict[str, float]]:
    """The trivial baselines a claim's figure is held against, by multiple (the module docstring); none for a
    figure that is not an accuracy (a read error %, a spread over draws)."""
    if figure is None:
        return baselines(runs)
    name = figure.removesuffix(PAST)
    if "accuracy" not in name or name.endswith("_draw_sd"):
        return {}
    chance = {m: {"chance": row["chance"]} for m, row in baselines(runs, past=False).items() if "chance" in row}
    if name == "sequence_accuracy":  # every position right: chance to the power of the length
        train = runs[0].train_length
        return {m: {"chance": row["chance"] ** (m * train)} for m, row in chance.items()}
    if MIX_ACCURACY.match(name):
        return chance
    return baselines(runs, past=figure.endswith(PAST))


def finite(side: dict[int, ZooRun], multiple: int, figure: str | None) -> dict[int, float]:
    """A side's figure at ``multiple`` by seed, the seeds without it (NaN: not recorded) left out."""
    values = {seed: figure_of(run, multiple, figure) for seed, run in side.items()}
    return {seed: value for seed, value in values.items() if value == value}


def task_claim(runs: list[ZooRun], a: str, b: str, sign: int, figure: str | None) -> dict[str, Any]:
    """One task: A - B at each multiple both have the figure at, paired over the seeds both have it for."""
    sides = [{r.seed: r for r in runs if r.encoding == name} for name in (a, b)]
    multiples = sorted(set.intersection(*(set(r.figures) for side in sides for r in side.values())))
    floors = figure_baselines(runs, figure)
    ran = len(set(sides[0]) | set(sides[1]))
    by_multiple = {}
    for multiple in multiples:
        values = [finite(side, multiple, figure) for side in sides]
        if not all(values):
            continue  # the figure is not recorded at this length (on one side at least)
        paired = sorted(set(values[0]) & set(values[1]))
        values = [{seed: side[seed] for seed in paired} for side in values]
        interval = paired_difference(*values)
        cell = {**interval.as_dict(), "verdict": direction_verdict(interval, sign), "of": ran}
        if len(paired) < 2:
            cell["why"] = f"{len(paired)} seed{'s' * (len(paired) != 1)} with the figure on both sides"
        floor = floors.get(multiple)
        if floor and paired and all(at_floor(mean(side.values()), floor) for side in values):
            why = f"both at the floor: the best trivial baseline is {best_baseline(floor)[1]:.3f}"
            cell |= {"verdict": "not testable", "why": why}
        by_multiple[f"{multiple}x"] = cell
    return by_multiple


def claim_summary(runs: list[ZooRun], text: str) -> dict[str, Any]:
    """A claim on every task both sides ran (``missing``: the sides with no run at all)."""
    claim = parse_claim(text)
    by_task = runs_by_task(runs)
    encodings = {r.encoding for r in runs}
    a, b = resolve(claim.a, encodings), resolve(claim.b, encodings)
    tasks = {}
    for task, members in sorted(by_task.items()):
        names = {r.encoding for r in members}
        if a in names and b in names:
            found = task_claim(members, a, b, claim.sign, claim.figure)
            if found:
                tasks[task] = found
    return {
        "claim": text,
        "rows": [a, b],  # the rows the sides name (a label with its settings where the claim gave the encoding)
        "figure": claim.figure or "accuracy (past the training length beyond 1x)",
        "missing": [name for name, row in ((claim.a, a), (claim.b, b)) if row is None],
        "tasks": tasks,
    }
