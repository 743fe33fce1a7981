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

Group = tuple[int, int]  # (training length, longest evaluation length): the rows one table's headers are true of


def row_group(row: dict[str, Any], summary: dict[str, Any]) -> Group:
    """A row's training and longest evaluation length (a summary written before rows held them: the first run's)."""
    train = row.get("train_length", summary["train_length"])
    return train, max(row.get("lengths") or summary["lengths"])


def figure_columns(rows: list[dict[str, Any]], summary: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The figures of rows of one group (``extrapolation.figure_keys``: every length any of them scored) and their
    column titles, which name the group's own training and longest length."""
    train, longest = row_group(rows[0], summary)
    lengths = sorted({n for row in rows for n in row.get("lengths") or summary["lengths"]})
    keys = [f"L{n}" for n in lengths] + ["past", "log_scaled"]
    titles = [f"length {n}" for n in lengths] + [f"at {longest}, past {train}", f"x log{longest}/log{train}"]
    return keys, titles


def _span(values: list[str]) -> str:
    """One cell for the runs of a row: their value, or each distinct one."""
    return "/".join(dict.fromkeys(values))


def figure_cell(row: dict[str, Any], key: str) -> str:
    """A figure over the row's seeds, with how many of them it rests on where a seed did not write it."""
    cell = row["figures"].get(key)
    if cell is None:
        return "n/a"
    seeds, rests_on = len(row["seeds"]), int(cell.get("n", len(row["seeds"])))
    return seed_cell_text(cell) + (f" ({rests_on} of {seeds} seeds)" if rests_on < seeds else "")


def difference_header(compared: set[str], keys: list[str], titles: list[str]) -> str:
    """The last column's title: the figures its differences are taken over (those both have, in any row)."""
    named = [title for key, title in zip(keys, titles) if key in compared]
    return f"max abs diff ({'; '.join(named)})" if named else "max abs diff (no figure in common)"


def _reference_cells(row: dict[str, Any], keys: list[str], titles: list[str], every: set[str]) -> list[str]:
    """The reference's figures under our columns (``n/a`` where it has none at that length) and the largest
    difference, with the figures it covers where that row compared fewer than the header names."""
    theirs = row["reference"] or {}
    cells = [f"{theirs[key]:.3f}" if theirs.get(key) is not None else "n/a" for key in keys]
    trained = row.get("reference_train_length")
    if row["max_abs_diff"] is None:
        why = f" (reference trained at {trained})" if trained and trained != row.get("train_length", trained) else ""
        return cells + [f"n/a{why}"]
    compared = row.get("compared", keys)
    only = [t for k, t in zip(keys, titles) if k in compared] if set(compared) != every else []
    return cells + [f"{row['max_abs_diff']:.3f}" + (f" ({'; '.join(only)} only)" if only else "")]


def seed_table(summary: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """Seed means per task x scheme of one group (``row_group``) with their 95% t-interval over seeds (the
    per-seed values where the seeds split; how many seeds a figure rests on where fewer than the row's), the
    training steps and evaluation sequences behind them; with a reference, its figures follow in columns of its
    label, at the same figures only, and a last column gives the largest absolute difference over them."""
    keys, titles = figure_columns(rows, summary)
    reference = summary["reference"]
    header = ["task", "scheme", *summary["setting_keys"], "seeds", *titles, "steps", "sequences"]
    every = {key for row in rows for key in row.get("compared", keys)}
    if reference:
        header += [f"{reference}: {title}" for title in titles] + [difference_header(every, keys, titles)]
    body = []
    for row in rows:
        cells = [row["task"], row["label"], *(value for _, value in row["settings"]), len(row["seeds"])]
        cells += [figure_cell(row, key) for key in keys]
        cells.append(_span([steps_cell(*steps) for steps in row["steps"]]))
        cells.append(_span([str(size) if size else "n/a" for size in row["eval_sizes"]]))
        body.append(cells + (_reference_cells(row, keys, titles, every) if reference else []))
    return markdown_table(header, body)


def seed_tables(summary: dict[str, Any]) -> str:
    """One table per training and longest length (``row_group``), each headed by them where there are several:
    a figure past 32 is never set under a header of 128."""
    groups: dict[Group, list[dict[str, Any]]] = {}
    for row in summary["rows"]:
        groups.setdefault(row_group(row, summary), []).append(row)
    if len(groups) == 1:
        return seed_table(summary, summary["rows"])
    return "\n\n".join(
        f"Trained at {train}, tested up to {longest}:\n\n{seed_table(summary, rows)}"
        for (train, longest), rows in groups.items()
    )


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
    out += ["", seed_tables(summary) if summary["rows"] else "(no runs)"]
    out += ["", floors] if (floors := baseline_table(summary)) else []
    notes = summary.get("notes") or []
    return "\n".join(out + (["", *notes] if notes else []))


def grid_csv(summary: dict[str, Any]) -> str:
    """One row per run: its settings, seed, training length, accuracy at every length any run scored, past the
    training length and scaled at its longest (a column per longest length, each run filling its own), its steps
    (and its recipe's), evaluation sequences and host."""
    runs = summary["runs"]
    lengths = sorted({int(n) for run in runs for n in run["accuracy"]})
    longest = sorted({max(int(n) for n in run["accuracy"]) for run in runs})
    header = ["task", "scheme", *summary["setting_keys"], "seed", "train_length"]
    header += [f"accuracy@{n}" for n in lengths] + [f"accuracy_past_train@{n}" for n in longest]
    header += [f"accuracy_log_scaled@{n}" for n in longest] + ["steps", "recipe_steps", "eval_size", "host"]
    rows = []
    for run in runs:
        mine = max(int(n) for n in run["accuracy"])
        past = [run["past_train"] if n == mine else None for n in longest]
        scaled = [run["log_scaled"] if n == mine else None for n in longest]
        rows.append([run["task"], run["label"], *(value for _, value in run["settings"]), run["seed"],
                     run["train_length"], *(run["accuracy"].get(str(n)) for n in lengths), *past, *scaled,
                     *run["steps"], run["eval_size"], run.get("host")])  # fmt: skip
    return csv_text(header, rows)


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


def panels(summary: dict[str, Any]) -> dict[tuple[str, int], list[dict[str, Any]]]:
    """The plot's panels: one per task and training length, each with its rows, in the table's order."""
    found: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for row in summary["rows"]:
        found.setdefault((row["task"], row_group(row, summary)[0]), []).append(row)
    return found


def plot_grid(summary: dict[str, Any]) -> Any:
    """Accuracy against test length, one panel per task and training length (each titled by its own runs'): per
    scheme a line through the seed means and a faint dot for each seed, so the spread over seeds shows; one legend
    for every panel, beside them."""
    rows = summary["rows"]
    grouped = panels(summary)
    colours = {scheme: f"C{i % 10}" for i, scheme in enumerate(dict.fromkeys(map(_scheme, rows)))}
    width = 4.6 * len(grouped) + 2.2
    fig, axes = plt.subplots(1, len(grouped), figsize=(width, 4.2), squeeze=False, layout="constrained")
    handles: dict[str, Any] = {}
    for ax, ((task, train), members) in zip(axes[0], grouped.items()):
        lengths: set[int] = set()
        for row in members:
            label, settings = _scheme(row)
            name = label + (" " + ", ".join(f"{k}={v}" for k, v in settings) if settings else "")
            handles[name] = draw_row(ax, row, colours[(label, settings)])
            lengths |= {int(key[1:]) for key in row["figures"] if key.startswith("L")}
        if (line := draw_baseline(ax, summary["baselines"].get(task))) is not None:
            handles["best baseline"] = line
        length_axis(ax, sorted(lengths))
        ax.set(xlabel="test length (tokens)", ylabel="accuracy", title=f"{task} (trained at {train})")
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
