"""Fixed-length against variable-length training (issue 23's NoPE question): per task and encoding, the
extrapolation score (accuracy past the training length, 2x-8x) and the 1x accuracy of both arms, and the
difference variable - fixed with its Welch interval over seeds (the arms train on different batches, so the
comparison is unpaired), plus each arm's order of the encodings both arms ran, per task and overall (mean rank over
the shared tasks with its paired-bootstrap interval, poslab.analysis.stats).

    python docs/position_zoo/variable/compare.py FIXED_DIR VARIABLE_DIR > docs/position_zoo/variable/compare.md

FIXED_DIR: the zoo's multirun (experiment=position_zoo); VARIABLE_DIR: experiment=position_zoo_variable's. Only
the (task, encoding) pairs present in both are compared.
"""

from __future__ import annotations

import sys
from collections import defaultdict

from poslab.analysis.stats import Interval, mean_rank_intervals, rank_cell, welch, welch_difference
from poslab.analysis.zoo import EXTRAPOLATION, ZooRun, load_zoo


def by_cell(runs: list[ZooRun]) -> dict[tuple[str, str], list[ZooRun]]:
    cells: dict[tuple[str, str], list[ZooRun]] = defaultdict(list)
    for run in runs:
        cells[(run.task, run.encoding)].append(run)
    return cells


def main(fixed_dir: str, variable_dir: str) -> None:
    fixed, variable = by_cell(load_zoo(fixed_dir)[0]), by_cell(load_zoo(variable_dir)[0])
    shared = sorted(set(fixed) & set(variable))
    print(
        "| task | encoding | seeds (fixed / variable) | 1x fixed | 1x variable | score fixed | score variable "
        "| variable - fixed [95% Welch] | t (df) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for task, encoding in shared:
        a, b = fixed[(task, encoding)], variable[(task, encoding)]
        score_a, score_b = [r.score(EXTRAPOLATION) for r in a], [r.score(EXTRAPOLATION) for r in b]
        t, df, _ = welch(score_b, score_a)
        cells = [task, encoding, f"{len(a)} / {len(b)}"]
        cells += [Interval.of([r.past(1) for r in runs], (0, 1)).cell() for runs in (a, b)]
        cells += [Interval.of(scores, (0, 1)).cell() for scores in (score_a, score_b)]
        cells += [welch_difference(score_b, score_a).cell(), f"{t:+.2f} ({df:.1f})"]
        print("| " + " | ".join(cells) + " |")
    print()
    tasks = sorted({task for task, _ in shared})
    for name, cells in (("fixed", fixed), ("variable", variable)):
        print(f"Order by seed-mean score, {name} lengths:")
        for task in tasks:
            scores = {
                e: Interval.of([r.score(EXTRAPOLATION) for r in cells[(t, e)]]).mean for t, e in shared if t == task
            }
            print(f"- {task}: " + " > ".join(f"{e} {s:.3f}" for e, s in sorted(scores.items(), key=lambda x: -x[1])))
        print()
    print("Overall: mean rank over the shared tasks [95%, every task's rank interval at once]\n")
    print("| place | fixed length | mean rank | variable lengths | mean rank |")
    print("|---|---|---|---|---|")
    orders = []
    for cells in (fixed, variable):
        per_task = {
            t: {e: {r.seed: r.score(EXTRAPOLATION) for r in cells[(t, e)]} for tt, e in shared if tt == t}
            for t in tasks
        }
        ranks = mean_rank_intervals(per_task)
        orders.append(sorted(ranks.items(), key=lambda item: item[1][0]))
    for place, (a, b) in enumerate(zip(*orders), start=1):
        cell = lambda r: rank_cell(*r[1], digits=2)
        print(f"| {place} | {a[0]} | {cell(a)} | {b[0]} | {cell(b)} |")


if __name__ == "__main__":
    main(*sys.argv[1:3])
