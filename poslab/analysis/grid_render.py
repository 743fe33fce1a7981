"""Rendering of the extrapolation grid's report (``poslab.analysis.extrapolation``): the run lines, the markdown
tables, the CSV and the PNG from the summary (``grid.json``) alone: no runs, so ``poslab report grid --from
grid.json`` re-renders."""

from __future__ import annotations

from typing import Any

from poslab.analysis.extrapolation import GridRun
from poslab.analysis.output import steps_cell
from poslab.analysis.plotting import length_axis, plt
from poslab.analysis.stats import seed_cell_text
from poslab.analysis.tables import csv_text, markdown_table
from poslab.io import number_or_nan


def figure_columns(summary: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The table's figures (``extrapolation.figure_keys`` of the first run) and their column titles."""
    lengths, train = summary["lengths"], summary["train_length"]
    longest = max(lengths)
    keys = [f"L{n}" for n in lengths] + ["past", "log_scaled"]
    titles = [f"length {n}" for n in lengths] + [f"at {longest}, past {train}", f"x log{longest}/log{train}"]
    return keys, titles


def _span(values: list[str]) -> str:
    """One cell for the runs of a row: their value, or each distinct one."""
    return "/".join(dict.fromkeys(values))


def _reference_cells(row: dict[str, Any], keys: list[str]) -> list[str]:
    theirs = row["reference"] or {}
    cells = [f"{theirs[key]:.3f}" if theirs.get(key) is not None else "n/a" for key in keys]
    return cells + [f"{row['max_abs_diff']:.3f}" if row["max_abs_diff"] is not None else "n/a"]


def seed_table(summary: dict[str, Any]) -> str:
    """Seed means per task x scheme with their 95% t-interval over seeds (the per-seed values where the seeds
    split), the training steps and evaluation sequences behind them; with a reference, its figures follow in
    columns of its label and a last column gives the largest absolute difference in the row."""
    keys, titles = figure_columns(summary)
    reference = summary["reference"]
    header = ["task", "scheme", *summary["setting_keys"], "seeds", *titles, "steps", "sequences"]
    header += [f"{reference}: {title}" for title in titles] + ["max abs diff"] if reference else []
    rows = []
    for row in summary["rows"]:
        figures = row["figures"]
        cells = [row["task"], row["label"], *(value for _, value in row["settings"]), len(row["seeds"])]
        cells += [seed_cell_text(figures[key]) if key in figures else "n/a" for key in keys]
        cells.append(_span([steps_cell(*steps) for steps in row["steps"]]))
        cells.append(_span([str(size) if size else "n/a" for size in row["eval_sizes"]]))
        rows.append(cells + (_reference_cells(row, keys) if reference else []))
    return markdown_table(header, rows)


def baseline_table(summary: dict[str, Any]) -> str:
    """Per task, the baselines of its evaluation sets at every length, or nothing for runs that did not record
    them."""
    floors = summary["baselines"]
    if not floors:
        return ""
    lengths = sorted({int(n) for floor in floors.values() for n in floor})
    header = ["task", "baseline (same evaluation sets)", *(f"length {n}" for n in lengths)]
    rows = []
    for task, floor in floors.items():
        for name in sorted({name for row in floor.values() for name in row}):
            values = [(floor.get(str(n)) or {}).get(name) for n in lengths]
            rows.append([task, name, *(f"{value:.3f}" if value is not None else "n/a" for value in values)])
    return markdown_table(header, rows)


def grid_markdown(summary: dict[str, Any]) -> str:
    """The report: a line per run (the write-up's format), the seed table, the baselines, the notes."""
    out = [GridRun.from_dict(run).line() for run in summary["runs"]]
    out += ["", seed_table(summary) if summary["rows"] else "(no runs)"]
    out += ["", floors] if (floors := baseline_table(summary)) else []
    notes = summary.get("notes") or []
    return "\n".join(out + (["", *notes] if notes else []))


def grid_csv(summary: dict[str, Any]) -> str:
    """One row per run: its settings, seed, accuracy at every length, past the training length and scaled at its
    longest, its steps (and its recipe's) and evaluation sequences."""
    lengths = summary["lengths"]
    longest = max(lengths)
    header = ["task", "scheme", *summary["setting_keys"], "seed", "train_length"]
    header += [f"accuracy@{n}" for n in lengths] + [f"accuracy_past_train@{longest}", f"accuracy_log_scaled@{longest}"]
    rows = [
        [run["task"], run["label"], *(value for _, value in run["settings"]), run["seed"], run["train_length"],
         *(run["accuracy"].get(str(n)) for n in lengths), run["past_train"], run["log_scaled"], *run["steps"],
         run["eval_size"]]
        for run in summary["runs"]
    ]  # fmt: skip
    return csv_text([*header, "steps", "recipe_steps", "eval_size"], rows)


def _scheme(row: dict[str, Any]) -> tuple[str, tuple[tuple[str, str], ...]]:
    return row["label"], tuple((key, value) for key, value in row["settings"])


def _per_seed(cell: dict[str, Any]) -> list[float]:
    """A figure's finite values, in seed order (a summary read back has the seeds as text)."""
    return [value for _, value in sorted((int(s), v) for s, v in cell["per_seed"].items() if v is not None)]


def draw_row(ax: Any, row: dict[str, Any], colour: str) -> Any:
    """A faint dot for each seed at each length, and a line through the seed means; returns the line."""
    cells = {int(key[1:]): cell for key, cell in row["figures"].items() if key.startswith("L")}
    lengths = sorted(cells)
    for n in lengths:
        values = _per_seed(cells[n])
        ax.plot([n] * len(values), values, "o", color=colour, alpha=0.35, markersize=4)
    means = [cells[n]["mean"] for n in lengths]
    return ax.plot(lengths, [number_or_nan(m) for m in means], "-o", color=colour, markersize=3)[0]


def plot_grid(summary: dict[str, Any]) -> Any:
    """Accuracy against test length, one panel per task: per scheme a line through the seed means and a faint dot
    for each seed, so the spread over seeds shows; one legend for both panels, beside them."""
    rows = summary["rows"]
    tasks = list(dict.fromkeys(row["task"] for row in rows))
    colours = {scheme: f"C{i % 10}" for i, scheme in enumerate(dict.fromkeys(map(_scheme, rows)))}
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.6 * len(tasks) + 2.2, 4.2), squeeze=False, layout="constrained")
    handles: dict[str, Any] = {}
    for ax, task in zip(axes[0], tasks):
        lengths: set[int] = set()
        for row in (row for row in rows if row["task"] == task):
            label, settings = _scheme(row)
            name = label + (" " + ", ".join(f"{k}={v}" for k, v in settings) if settings else "")
            handles[name] = draw_row(ax, row, colours[(label, settings)])
            lengths |= {int(key[1:]) for key in row["figures"] if key.startswith("L")}
        if (line := draw_baseline(ax, summary["baselines"].get(task))) is not None:
            handles["best baseline"] = line
        length_axis(ax, sorted(lengths))
        ax.set(xlabel="test length (tokens)", ylabel="accuracy", title=f"{task} (trained at {summary['train_length']})")
        ax.grid(alpha=0.3)
    title = seeds_legend_title(sorted({len(row["seeds"]) for row in rows}))
    fig.legend(handles.values(), handles.keys(), loc="outside right upper", fontsize=8, title=title, title_fontsize=8)
    return fig


def seeds_legend_title(seeds: list[int]) -> str:
    """What the grid's lines and dots are, given the numbers of seeds the schemes have: the mean of 2 seeds (or of
    1-3, where they differ) and a dot per seed; with one seed each the line is that seed (no mean to speak of)."""
    if seeds == [1]:
        return "line: one seed per scheme"
    if len(seeds) == 1:
        return f"line: mean of {seeds[0]} seeds\ndots: each seed"
    return f"line: seed mean ({seeds[0]}-{seeds[-1]} seeds\na scheme); dots: each seed"


def draw_baseline(ax: Any, floor: dict[str, dict[str, float]] | None) -> Any:
    """The best baseline of the task's evaluation sets at each length, dashed (when recorded)."""
    if not floor:
        return None
    lengths = sorted(int(n) for n, row in floor.items() if row)
    best = [max(floor[str(n)].values()) for n in lengths]
    return ax.plot(lengths, best, "--", color="black", lw=1)[0]
