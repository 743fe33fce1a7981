"""The extrapolation-grid report: one line per run in the where_am_i write-up's format,
a markdown table of seed means (optionally beside a reference), and a PNG.

    lag  rope         seed 0: length 32 / 64 / 128: 1.000 / 1.000 / 1.000; at 128, positions past 32: 1.000; ...
        ... scores x log128/log32: 1.000   (one line in the output)
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from statistics import mean
from typing import Any

from poslab.analysis.output import AnalysisResult
from poslab.errors import MissingRunError
from poslab.io import read_json
from poslab.plotting import plt
from poslab.run_files import ANALYSIS_DIR, FAILURE_FILE, RESULTS_FILE


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
        )


LINE = re.compile(
    r"^(?P<task>\S+)\s+(?P<label>\S+)\s+seed (?P<seed>\d+): length (?P<lengths>[\d /]+): (?P<accs>[\d. /]+); "
    r"at (?P<longest>\d+), positions past (?P<train>\d+): (?P<past>[\d.]+); "
    r"scores x log\d+/log\d+: (?P<scaled>[\d.]+)\s*$"
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


def load_runs(directory: str | Path) -> tuple[list[GridRun], list[Path]]:
    """Every ``results.json`` below ``directory`` (a multirun directory), and the jobs that failed."""
    directory = Path(directory)
    runs = []
    for path in sorted(directory.rglob(RESULTS_FILE)):
        result = read_json(path)
        figures = {int(n): row for n, row in result["figures"].items()}
        longest = max(figures)
        job = path.parent.name
        runs.append(
            GridRun(
                task=result["task"],
                label=result["label"],
                seed=int(result["seed"]),
                train_length=int(result["train_length"]),
                accuracy={n: row["accuracy"] for n, row in figures.items()},
                past_train=figures[longest].get("accuracy_past_train", float("nan")),
                log_scaled=figures[longest]["accuracy_log_scaled"],
                order=int(job) if job.isdigit() else 0,
            )
        )
    runs.sort(key=lambda r: (r.order, r.task, r.label, r.seed))
    return runs, sorted(p.parent for p in directory.rglob(FAILURE_FILE))


Cell = tuple[str, str]  # (task, scheme label)


def seed_means(runs: list[GridRun]) -> dict[Cell, dict[str, float]]:
    """Per task x scheme, in first-appearance order: the mean over seeds of every figure."""
    groups: dict[Cell, list[GridRun]] = defaultdict(list)
    for run in runs:
        groups[(run.task, run.label)].append(run)
    means = {}
    for cell, members in groups.items():
        row = {f"L{n}": mean(r.accuracy[n] for r in members) for n in sorted(members[0].accuracy)}
        row["past"] = mean(r.past_train for r in members)
        row["log_scaled"] = mean(r.log_scaled for r in members)
        row["seeds"] = len(members)
        means[cell] = row
    return means


def markdown_table(runs: list[GridRun], reference: list[GridRun] | None = None) -> str:
    """Seed means per task x scheme; with a reference, each cell reads ``ours (reference)`` and a last
    column gives the largest absolute difference in the row."""
    ours, theirs = seed_means(runs), seed_means(reference) if reference else {}
    if not ours:
        return "(no runs)"
    sample = runs[0]
    figures = [f"L{n}" for n in sorted(sample.accuracy)] + ["past", "log_scaled"]
    titles = [f"length {n}" for n in sorted(sample.accuracy)] + [
        f"at {sample.longest}, past {sample.train_length}",
        f"x log{sample.longest}/log{sample.train_length}",
    ]
    header = ["task", "scheme", "seeds", *titles] + (["max abs diff"] if theirs else [])
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for (task, label), row in ours.items():
        ref = theirs.get((task, label))
        cells = [task, label, str(row["seeds"])]
        for key in figures:
            cells.append(f"{row[key]:.3f}" + (f" ({ref[key]:.3f})" if ref and key in ref else ""))
        if theirs:
            diffs = [abs(row[k] - ref[k]) for k in figures if ref and k in ref]
            cells.append(f"{max(diffs):.3f}" if diffs else "n/a")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_grid(runs: list[GridRun]) -> Any:
    """Accuracy against test length, one line per scheme (seed mean), one panel per task."""

    means = seed_means(runs)
    tasks = list(dict.fromkeys(task for task, _ in means))
    fig, axes = plt.subplots(1, len(tasks), figsize=(5.5 * len(tasks), 4.2), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for (t, label), row in means.items():
            if t != task:
                continue
            lengths = [int(k[1:]) for k in row if k.startswith("L")]
            ax.plot(lengths, [row[f"L{n}"] for n in lengths], marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_xticks(lengths, [str(n) for n in lengths])
        ax.set_xlabel("test length")
        ax.set_ylabel("accuracy")
        ax.set_title(f"{task} (trained at {runs[0].train_length})")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def report_grid(directory: str | Path, reference: str | None = None) -> AnalysisResult:
    """The grid's report lines and table; files ``extrapolation_grid.{md,png}`` for ``DIR/analysis/grid/``."""
    runs, failed = load_runs(directory)
    if not runs:
        raise MissingRunError(f"no {RESULTS_FILE} below {directory}: is it a multirun directory of train.py?")
    table = markdown_table(runs, reference_runs(reference) if reference else None)
    out = [run.line() for run in runs]
    out += ["", table]
    if failed:
        out += ["", f"{len(failed)} job(s) failed (see their {FAILURE_FILE}): " + ", ".join(map(str, failed))]
    result = AnalysisResult("grid", "\n".join(out), Path(directory) / ANALYSIS_DIR / "grid")
    result.add_text("extrapolation_grid.md", result.report)
    result.add_figure("extrapolation_grid.png", plot_grid(runs))
    return result
