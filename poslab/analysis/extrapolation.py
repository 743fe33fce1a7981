"""The extrapolation-grid report: one line per run in the where_am_i write-up's format,
a markdown table of seed means (optionally beside a reference), and a PNG.

    lag  rope         seed 0: length 32 / 64 / 128: 1.000 / 1.000 / 1.000; at 128, positions past 32: 1.000; ...
        ... scores x log128/log32: 1.000   (one line in the output)
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from statistics import mean
from typing import Any

from poslab.analysis.output import REFERENCE_LABEL, AnalysisResult, short_run_warning, steps_cell, training_steps
from poslab.analysis.results import (
    FinishedRun,
    Runs,
    collect_runs,
    differing_settings,
    setting_values,
)
from poslab.analysis.stats import Interval, seeds_cell, split_seeds
from poslab.errors import MissingRunError, UsageError
from poslab.plotting import plt
from poslab.run_files import ANALYSIS_DIR, RESULTS_FILE, job_number


@dataclass
class GridRun:
    task: str
    label: str
    seed: int
    train_length: int
    accuracy: dict[int, float]  # by evaluation length
    past_train: float  # at the longest length, positions past train_length
    log_scaled: float  # at the longest length, scores x log(L)/log(train_length)
    order: int = 0
    settings: tuple[tuple[str, str], ...] = ()  # what tells it apart from runs of the same task and scheme
    steps: tuple[int | None, int | None] = (None, None)  # (trained, the recipe's): poslab.analysis.results
    eval_size: int | None = None  # evaluation sequences per length (task.eval_size)
    #: the baselines of the evaluation sets by length, over every scored position (chance, the best constant, the
    #: task's trivial rules: ``baseline_*`` in results.json; empty for runs written before they were)
    baselines: dict[int, dict[str, float]] = field(default_factory=dict)

    @property
    def cell(self) -> Cell:
        return (self.task, self.label, self.settings)

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


LINE = re.compile(
    r"^(?P<task>\S+)\s+(?P<label>\S+)\s+seed (?P<seed>\d+): length (?P<lengths>[\d /]+): (?P<accs>[\d. /]+); "
    r"at (?P<longest>\d+), positions past (?P<train>\d+): (?P<past>[\d.]+); "
    r"scores x log\d+/log\d+: (?P<scaled>[\d.]+)(?:\s+\[.*\])?\s*$"
)


def parse_lines(text: str) -> list[GridRun]:
    """Read report lines (this module's or the write-up's) back into runs; other lines are skipped."""
    runs = []
    for order, match in enumerate(m for m in map(LINE.match, text.splitlines()) if m):
        lengths = [int(n) for n in match["lengths"].split(" / ")]
        accs = [float(a) for a in match["accs"].split(" / ")]
        runs.append(
            GridRun(
                match["task"],
                match["label"],
                int(match["seed"]),
                int(match["train"]),
                dict(zip(lengths, accs)),
                float(match["past"]),
                float(match["scaled"]),
                order,
            )
        )
    return runs


def reference_runs(name: str) -> list[GridRun]:
    """Runs of a reference shipped with poslab (``where_am_i``) or of a file of report lines."""
    path = Path(name)
    if path.is_file():
        return parse_lines(path.read_text())
    shipped = resources.files("poslab.resources") / f"{name}_grid.txt"
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
        log_scaled=figures[longest]["accuracy_log_scaled"],
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


Cell = tuple[str, str, tuple[tuple[str, str], ...]]  # (task, scheme label, settings telling it apart)


def seed_means(runs: list[GridRun]) -> dict[Cell, dict[str, float]]:
    """Per task x scheme (x the settings telling runs of both apart), in first-appearance order: the mean over
    seeds of every figure."""
    groups: dict[Cell, list[GridRun]] = defaultdict(list)
    for run in runs:
        groups[run.cell].append(run)
    means = {}
    for cell, members in groups.items():
        row = {f"L{n}": mean(r.accuracy[n] for r in members) for n in sorted(members[0].accuracy)}
        row["past"] = mean(r.past_train for r in members)
        row["log_scaled"] = mean(r.log_scaled for r in members)
        row["seeds"] = len(members)
        means[cell] = row
    return means


def markdown_table(
    runs: list[GridRun], reference: list[GridRun] | None = None, reference_label: str = REFERENCE_LABEL
) -> str:
    """Seed means per task x scheme with their 95% t-interval over seeds, with the training steps and evaluation
    sequences behind them; with a
    reference, its figures follow in columns labelled ``reference_label`` and a last column gives the largest
    absolute difference in the row."""
    ours, theirs = seed_means(runs), seed_means(reference) if reference else {}
    if not ours:
        return "(no runs)"
    sample = runs[0]
    figures = [f"L{n}" for n in sorted(sample.accuracy)] + ["past", "log_scaled"]
    titles = [f"length {n}" for n in sorted(sample.accuracy)] + [
        f"at {sample.longest}, past {sample.train_length}",
        f"x log{sample.longest}/log{sample.train_length}",
    ]
    columns = [key for key, _ in sample.settings]  # settings telling runs of one task and scheme apart
    references = [f"{reference_label}: {title}" for title in titles] if theirs else []
    header = ["task", "scheme", *columns, "seeds", *titles, "steps", "sequences", *references]
    header += ["max abs diff"] if theirs else []
    members: dict[Cell, list[GridRun]] = defaultdict(list)
    for run in runs:
        members[run.cell].append(run)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for (task, label, settings), row in ours.items():
        ref = theirs.get((task, label, ()))
        cells = [task, label, *(value for _, value in settings), str(row["seeds"])]
        cells += [seed_cell(members[(task, label, settings)], key) for key in figures]
        cells += [_span([steps_cell(*r.steps) for r in members[(task, label, settings)]])]
        cells += [_span([str(r.eval_size) if r.eval_size else "n/a" for r in members[(task, label, settings)]])]
        if theirs:
            cells += [f"{ref[key]:.3f}" if ref and key in ref else "n/a" for key in figures]
            diffs = [abs(row[k] - ref[k]) for k in figures if ref and k in ref]
            cells.append(f"{max(diffs):.3f}" if diffs else "n/a")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def seed_cell(members: list[GridRun], key: str) -> str:
    """One figure of a row's runs: its mean with the 95% t-interval over seeds (``poslab.analysis.stats``), the
    per-seed values where the seeds split into two outcomes, the value alone for one seed."""
    values = [run_figure(run, key) for run in members]
    if split_seeds(values):
        return f"{seeds_cell(values)} (split)"
    return Interval.of(values, bounds=(0.0, 1.0)).cell()


def run_figure(run: GridRun, key: str) -> float:
    """A figure of ``seed_means``'s keys (``L<n>``, ``past``, ``log_scaled``) of one run."""
    if key == "past":
        return run.past_train
    if key == "log_scaled":
        return run.log_scaled
    return run.accuracy[int(key.removeprefix("L"))]


def baseline_table(runs: list[GridRun]) -> str:
    """Per task, the baselines of its evaluation sets at every length (the first run's: the sets depend on the
    evaluation seed only), or nothing for runs that did not record them."""
    first = {run.task: run for run in reversed(runs) if run.baselines.get(run.longest)}
    if not first:
        return ""
    lengths = sorted({n for run in first.values() for n in run.baselines})
    lines = ["| task | baseline (same evaluation sets) | " + " | ".join(f"length {n}" for n in lengths) + " |"]
    lines.append("|" + "---|" * (2 + len(lengths)))
    for task, run in first.items():
        for name in sorted({k for row in run.baselines.values() for k in row}):
            cells = [f"{run.baselines[n][name]:.3f}" if name in run.baselines.get(n, {}) else "n/a" for n in lengths]
            lines.append(f"| {task} | {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _span(values: list[str]) -> str:
    """One cell for the runs of a row: their value, or each distinct one."""
    return "/".join(dict.fromkeys(values))


def plot_grid(runs: list[GridRun]) -> Any:
    """Accuracy against test length, one panel per task: per scheme a line through the seed means and a faint dot
    for each seed, so the spread over seeds shows; one legend for both panels, beside them."""
    members: dict[Cell, list[GridRun]] = defaultdict(list)
    for run in runs:
        members[run.cell].append(run)
    means = seed_means(runs)
    tasks = list(dict.fromkeys(task for task, _, _ in means))
    schemes = list(dict.fromkeys((label, settings) for _, label, settings in means))
    colours = {scheme: f"C{i % 10}" for i, scheme in enumerate(schemes)}  # a scheme's colour in every panel
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.6 * len(tasks) + 2.2, 4.2), squeeze=False, layout="constrained")
    handles: dict[str, Any] = {}
    for ax, task in zip(axes[0], tasks):
        for (t, label, settings), row in means.items():
            if t != task:
                continue
            name = label + (" " + ", ".join(f"{k}={v}" for k, v in settings) if settings else "")
            colour = colours[(label, settings)]
            lengths = [int(k[1:]) for k in row if k.startswith("L")]
            for run in members[(t, label, settings)]:
                ax.plot(lengths, [run.accuracy[n] for n in lengths], "o", color=colour, alpha=0.35, markersize=4)
            (handles[name],) = ax.plot(lengths, [row[f"L{n}"] for n in lengths], "-o", color=colour, markersize=3)
        if (line := draw_baseline(ax, [run for run in runs if run.task == task])) is not None:
            handles["best baseline"] = line
        ax.set_xscale("log", base=2)
        ax.set_xticks(lengths, [str(n) for n in lengths])
        ax.set_xlabel("test length (tokens)")
        ax.set_ylabel("accuracy")
        ax.set_title(f"{task} (trained at {runs[0].train_length})")
        ax.grid(alpha=0.3)
    fig.legend(
        handles.values(),
        handles.keys(),
        loc="outside right upper",
        fontsize=8,
        title=seeds_legend_title(sorted({len(m) for m in members.values()})),
        title_fontsize=8,
    )
    return fig


def seeds_legend_title(seeds: list[int]) -> str:
    """What the grid's lines and dots are, given the numbers of seeds the schemes have: the mean of 2 seeds (or of
    1-3, where they differ) and a dot per seed; with one seed each the line is that seed (no mean to speak of)."""
    if seeds == [1]:
        return "line: one seed per scheme"
    if len(seeds) == 1:
        return f"line: mean of {seeds[0]} seeds\ndots: each seed"
    return f"line: seed mean ({seeds[0]}-{seeds[-1]} seeds\na scheme); dots: each seed"


def draw_baseline(ax: Any, runs: list[GridRun]) -> Any:
    """The best baseline of the task's evaluation sets at each length, dashed (the first run's, when recorded)."""
    run = next((r for r in runs if r.baselines.get(r.longest)), None)
    if run is None:
        return None
    lengths = sorted(run.baselines)
    best = [max(run.baselines[n].values()) for n in lengths]
    return ax.plot(lengths, best, "--", color="black", lw=1)[0]


def report_grid(directory: str | Path, reference: str | None = None) -> AnalysisResult:
    """The grid's report lines and table; files ``extrapolation_grid.{md,png}`` for ``DIR/analysis/grid/``."""
    runs, found = load_runs(directory)
    if not runs:
        listed = " ".join(found.notes())
        raise MissingRunError(
            f"no {RESULTS_FILE} below {directory} of a successful run"
            + (f": {listed}" if listed else ": is it a multirun directory of train.py?")
        )
    label = REFERENCE_LABEL if reference and not Path(reference).is_file() else f"{reference} (reference)"
    table = markdown_table(runs, reference_runs(reference) if reference else None, label)
    out = [run.line() for run in runs]
    out += ["", table]
    out += ["", floors] if (floors := baseline_table(runs)) else []
    warning = short_run_warning({f"{r.task} {r.label} seed {r.seed}": r.steps for r in runs})
    notes = ([warning] if warning else []) + found.notes()
    if notes:
        out += ["", *notes]
    result = AnalysisResult("grid", "\n".join(out), Path(directory) / ANALYSIS_DIR / "grid")
    result.add_text("extrapolation_grid.md", result.report)
    result.add_figure("extrapolation_grid.png", plot_grid(runs))
    return result
