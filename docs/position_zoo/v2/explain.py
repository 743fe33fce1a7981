"""The zoo's explanations, measured: the figures behind docs/position_zoo.md's "What the zoo shows".

    python docs/position_zoo/v2/explain.py docs/position_zoo/v2/runs docs/position_zoo/checks/runs \
        > docs/position_zoo/v2/explain.md

ZOO_DIR (first argument): the 5-seed zoo (experiment=position_zoo; docs/position_zoo/v2/runs/ holds its results,
or its multirun directory). CHECKS_DIR (optional; docs/position_zoo/checks/runs/ holds them): the
checks run beside it on the same code and seeds, so every comparison with the zoo's runs is paired by seed (every
encoding sees the same batches under a seed, tests/test_paired_batches.py):

    python train.py -m experiment=position_zoo encoding=forget_gate encoding.bias_init=5.0 task=copy,seen \
        hydra.sweep.dir=logs/multirun/zoo_checks
    python train.py -m experiment=position_zoo encoding=hrope_axial encoding.frequencies=token_first,interleaved \
        seed=0,1,2 hydra.sweep.dir=logs/multirun/zoo_checks
    python train.py -m experiment=position_zoo encoding=rope encoding.partial_fraction=0.5 seed=0,1,2 \
        hydra.sweep.dir=logs/multirun/zoo_checks

Every interval is poslab.analysis.stats's: a t-interval over seeds, or over per-seed differences where paired.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable

from poslab.analysis.stats import Interval, paired_difference, seeds_cell
from poslab.analysis.zoo import EXTRAPOLATION, ZooRun, load_zoo

ACC = (0.0, 1.0)
Cells = dict[tuple[str, str], dict[int, ZooRun]]  # (task, arm) -> seed -> run


def arm_name(run: ZooRun) -> str:
    """The zoo's label, with the setting a check changed (read from the run's own record of what it ran)."""
    settings = json.loads((run.path / "results.json").read_text())["encoding_settings"]
    name = run.encoding.split()[0].split(":")[0]  # cope:33 -> cope
    if name == "forget_gate" and settings.get("bias_init", 0.0) != 0.0:
        return f"forget_gate bias_init={settings['bias_init']:g}"
    if name == "hrope_axial" and settings.get("frequencies", "split") != "split":
        return f"hrope_axial {settings['frequencies']}"
    if name == "rope" and settings.get("partial_fraction", 1.0) != 1.0:
        return f"rope partial_fraction={settings['partial_fraction']:g}"
    return name


def cells_of(*directories: str) -> Cells:
    cells: Cells = defaultdict(dict)
    for directory in directories:
        for run in load_zoo(directory)[0]:
            cells[(run.task, arm_name(run))][run.seed] = run
    return cells


def by_seed(runs: dict[int, ZooRun], value: Callable[[ZooRun], float]) -> dict[int, float]:
    return {seed: value(run) for seed, run in sorted(runs.items())}


def score(run: ZooRun) -> float:
    return run.score(EXTRAPOLATION)  # every run of these sweeps was evaluated at 2x, 4x and 8x


def print_table(header: list[str], rows: list[list[str]]) -> None:
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print()


def tasks_of(cells: Cells, arm: str) -> list[str]:
    return sorted(task for task, name in cells if name == arm)


def randomized_draws(cells: Cells) -> None:
    """Randomized RoPE over 8 position draws: the spread over draws against the spread over seeds."""
    print("## Randomized RoPE: 8 position draws per evaluation\n")
    print(
        "Per length: the accuracy (seed mean, past 32 beyond 1x), the sd over the 8 draws (mean over seeds) and "
        "the sd over seeds of the draw-mean accuracy.\n"
    )
    rows = []
    for task in tasks_of(cells, "randomized_rope"):
        runs = cells[(task, "randomized_rope")]
        for multiple in (1, *EXTRAPOLATION):
            key = "accuracy_draw_sd" if multiple == 1 else "accuracy_past_train_draw_sd"
            values = list(by_seed(runs, lambda r, m=multiple: r.past(m)).values())
            draw_sd = statistics.mean(r.figure(multiple, key) for r in runs.values())
            rows.append(
                [
                    task,
                    f"{multiple}x",
                    Interval.of(values, ACC).cell(),
                    f"{draw_sd:.3f}",
                    f"{statistics.stdev(values):.3f}",
                ]
            )
    print_table(["task", "length", "accuracy [95%]", "sd over draws", "sd over seeds"], rows)


def paired_rows(cells: Cells, a: str, b: str, tasks: list[str]) -> list[list[str]]:
    """Per task: A's and B's 1x and score, and A - B paired by seed (1x and score)."""
    rows = []
    for task in tasks:
        runs_a, runs_b = cells.get((task, a), {}), cells.get((task, b), {})
        if not runs_a or not runs_b:
            continue
        one_x = lambda r: r.past(1)
        rows.append(
            [
                task,
                str(len(set(runs_a) & set(runs_b))),
                Interval.of(by_seed(runs_a, one_x).values(), ACC).cell(),
                Interval.of(by_seed(runs_b, one_x).values(), ACC).cell(),
                paired_difference(by_seed(runs_a, one_x), by_seed(runs_b, one_x)).cell(),
                seeds_cell(list(by_seed(runs_a, score).values())),
                seeds_cell(list(by_seed(runs_b, score).values())),
                paired_difference(by_seed(runs_a, score), by_seed(runs_b, score)).cell(),
            ]
        )
    if len(rows) > 1:
        rows.append(mean_over_tasks(cells, a, b, [row[0] for row in rows]))
    return rows


def mean_over_tasks(cells: Cells, a: str, b: str, tasks: list[str]) -> list[str]:
    """One more row: per seed, the mean score over the tasks (seeds that both arms ran in every task), paired."""
    seeds = set.intersection(*(set(cells[(t, a)]) & set(cells[(t, b)]) for t in tasks))
    mean_a = {s: statistics.mean(score(cells[(t, a)][s]) for t in tasks) for s in sorted(seeds)}
    mean_b = {s: statistics.mean(score(cells[(t, b)][s]) for t in tasks) for s in sorted(seeds)}
    return [
        "mean over these tasks",
        str(len(seeds)),
        "",
        "",
        "",
        seeds_cell(list(mean_a.values())),
        seeds_cell(list(mean_b.values())),
        paired_difference(mean_a, mean_b).cell(),
    ]


def comparison(cells: Cells, a: str, b: str, title: str, tasks: list[str] | None = None) -> None:
    print(f"## {title}\n")
    tasks = tasks or sorted({task for task, _ in cells})
    header = [
        "task",
        "paired seeds",
        f"1x {a}",
        f"1x {b}",
        "1x A - B [95%]",
        f"score {a} (per seed)",
        f"score {b} (per seed)",
        "score A - B [95%]",
    ]
    print_table(header, paired_rows(cells, a, b, tasks))


def period_below_hrope(cells: Cells) -> None:
    """period_axial against hrope_axial: identical at training (the same model), apart past it."""
    comparison(cells, "period_axial", "hrope_axial", "period_axial against hrope_axial (the same trained weights)")
    same, below, pairs = 0, 0, 0
    for (task, arm), runs in cells.items():
        if arm != "hrope_axial" or (task, "period_axial") not in cells:
            continue
        for seed, run in runs.items():
            other = cells[(task, "period_axial")].get(seed)
            if other is None:
                continue
            pairs += 1
            same += run.past(1) == other.past(1)
            below += other.past(8) < run.past(8)
    print(
        f"1x identical in {same} of {pairs} (task, seed) pairs; period_axial below hrope_axial at 8x (past 32) "
        f"in {below} of {pairs}.\n"
    )


def cope_lag(cells: Cells) -> None:
    """CoPE on lag by length, plain and with log-length scaling: does the fall at 8x follow the number of keys?"""
    print("## CoPE (authors' settings) on lag and copy, by length\n")
    rows = []
    for task in ("lag", "copy", "seen"):
        for arm in ("cope", "none"):
            runs = cells.get((task, arm), {})
            if not runs:
                continue
            for multiple in (1, *EXTRAPOLATION):
                plain = by_seed(runs, lambda r, m=multiple: r.past(m))
                scaled = by_seed(runs, lambda r, m=multiple: r.past(m, "accuracy_log_scaled")) if multiple > 1 else {}
                rows.append(
                    [
                        task,
                        arm,
                        f"{multiple}x",
                        seeds_cell(list(plain.values())),
                        Interval.of(plain.values(), ACC).cell(),
                        Interval.of(scaled.values(), ACC).cell() if scaled else "",
                        paired_difference(scaled, plain).cell() if scaled else "",
                    ]
                )
    print_table(["task", "encoding", "length", "per seed", "mean [95%]", "x log L [95%]", "log - plain [95%]"], rows)


def main(zoo_dir: str, checks_dir: str | None = None) -> None:
    cells = cells_of(zoo_dir, *([checks_dir] if checks_dir else []))
    print("<!-- written by docs/position_zoo/v2/explain.py; scores: accuracy past 32 at 2x-8x -->\n")
    randomized_draws(cells)
    period_below_hrope(cells)
    cope_lag(cells)
    comparison(cells, "cope", "none", "CoPE (over NoPE) against NoPE")
    arms = {arm for _, arm in cells}
    if "forget_gate bias_init=5" in arms:
        comparison(
            cells,
            "forget_gate bias_init=5",
            "forget_gate",
            "The forget gate: slow start (b = 5) against FoX's (b = 0)",
            ["copy", "seen"],
        )
    for arm in sorted(a for a in arms if a.startswith(("hrope_axial ", "rope partial"))):
        comparison(cells, arm, "hrope_axial", f"{arm} against hrope_axial (split)")
        comparison(cells, arm, "rope", f"{arm} against rope")
    if {"hrope_axial token_first", "rope partial_fraction=0.5"} <= arms:
        comparison(
            cells,
            "hrope_axial token_first",
            "rope partial_fraction=0.5",
            "hrope_axial token_first against p-RoPE 0.5 (the same model up to feature order)",
        )


if __name__ == "__main__":
    main(*sys.argv[1:3])
