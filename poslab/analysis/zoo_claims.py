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
machine's budgets: every encoding right at position 0 only, as the rule "the current element" is).
"""

from __future__ import annotations

from statistics import mean
from typing import Any

from poslab.analysis.claims import parse_claim, resolve
from poslab.analysis.stats import direction_verdict, paired_difference
from poslab.analysis.zoo import ZooRun, at_floor, baselines, best_baseline, runs_by_task


def figure_of(run: ZooRun, multiple: int, figure: str | None) -> float:
    return run.past(multiple) if figure is None else run.figure(multiple, figure)


def task_claim(runs: list[ZooRun], a: str, b: str, sign: int, figure: str | None) -> dict[str, Any]:
    """One task: A - B at each multiple both have the figure at, over their shared seeds."""
    sides = [{r.seed: r for r in runs if r.encoding == name} for name in (a, b)]
    multiples = sorted(set.intersection(*(set(r.figures) for side in sides for r in side.values())))
    floors = baselines(runs) if figure is None else {}
    by_multiple = {}
    for multiple in multiples:
        values = [{s: figure_of(r, multiple, figure) for s, r in side.items()} for side in sides]
        if any(v != v for side in values for v in side.values()):
            continue  # the figure is not recorded at this length
        interval = paired_difference(*values)
        cell = {**interval.as_dict(), "verdict": direction_verdict(interval, sign)}
        floor = floors.get(multiple)
        if floor and all(at_floor(mean(side.values()), floor) for side in values):
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
