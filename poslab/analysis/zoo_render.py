"""Rendering of the position zoo's report (``poslab.analysis.zoo``): markdown tables, the CSV and the PNGs, from
the rows and the ranking alone (no model)."""

from __future__ import annotations

import math
from statistics import mean
from typing import Any

from poslab.analysis.plotting import constant_note, length_axis, plt
from poslab.analysis.stats import Interval, rank_cell
from poslab.analysis.tables import csv_text, markdown_table
from poslab.analysis.zoo import Ranking, Row, ZooRun, best_baseline, score_multiples, shared_seeds

#: the families of the accuracy figure's columns, by encoding name (the label's first part); others: "other"
FAMILIES: dict[str, tuple[str, ...]] = {
    "no position or absolute": ("none", "sinusoid", "learned"),
    "rotary": (
        "rope",
        "xpos",
        "randomized_rope",
        "rope_nope_mix",
        "increments_shared",
        "increments_layer",
        "hrope_axial",
        "rand_axial",
        "period_axial",
    ),  # fmt: skip
    "distance bias": ("alibi", "t5_bias", "kerple_log", "kerple_power", "fire", "sandwich"),
    "content-dependent or scaled": ("cope", "forget_gate", "ssmax"),
}


def family_of(encoding: str) -> str:
    name = encoding.split(":")[0].split(" ")[0]
    return next((family for family, names in FAMILIES.items() if name in names), "other")


def overall_table(ranking: Ranking, n_tasks: int) -> str:
    interval = "mean rank [95%, all tasks at once]"
    header = ["place", "encoding", interval, "places, one task left out", "mean score", "tasks"]
    left_out = [f"\nLeft out of the ranking: {task}: {why}." for task, why in ranking.excluded.items()]
    if not ranking.order:  # every task left out (below): no places, so nothing to call separated or not
        return "\n".join(["### Overall", "", "No overall ranking: every task is left out of it (below).", *left_out])
    rows = []
    for place, encoding in enumerate(ranking.order, 1):
        rank, low, high = ranking.mean_rank[encoding]
        out = ranking.leave_one_out.get(encoding)
        cells = [place, encoding, rank_cell(rank, low, high, 2, len(ranking.order))]
        cells.append(f"{out[0]}-{out[1]}" if out else "n/a")
        rows.append([*cells, f"{ranking.mean_score[encoding]:.3f}", f"{ranking.tasks[encoding]}/{n_tasks}"])
    lines = ["### Overall", "", markdown_table(header, rows)]
    groups = [group for group in ranking.groups if len(group) > 1]
    lines += ["", "Places not separated (consecutive places whose mean-rank intervals overlap):"]
    lines += [f"- {', '.join(group)}" for group in groups] or ["- none: every place is separated from its neighbours"]
    return "\n".join([*lines, *left_out])


def score_header(rows: list[Row]) -> str:
    """``score (2x, 4x, 8x, past)``: the lengths the task's score averages (``zoo.score_multiples``)."""
    scored_at = rows[0].score_multiples if rows else ()
    return f"score ({', '.join(f'{m}x' for m in scored_at) or 'no length past training'}, past)"


def effective_text(row: Row) -> str:
    """The effective length's cell: mean [95%] in tokens (or each seed's, where they split), with how many seeds
    were not learned (1x at the floor: no effective length); "not learned" where none was."""
    if len(row.not_learned) == row.seeds:
        return "not learned"
    note = f" ({len(row.not_learned)} of {row.seeds} seeds not learned)" if row.not_learned else ""
    return row.effective.text(0) + note


def seeds_note(rows: list[Row]) -> list[str]:
    """Where rows have different seeds (a sweep still running), what the ranks and the order are computed on."""
    by_count: dict[int, list[str]] = {}
    for row in rows:
        by_count.setdefault(row.seeds, []).append(row.encoding)
    if len(by_count) < 2:
        return []
    usual = max(by_count, key=lambda n: (len(by_count[n]), n))  # the count most rows have: not named one by one
    shown = lambda n: f"the other {len(by_count[n])}" if n == usual and len(by_count[n]) > 1 else ", ".join(by_count[n])
    counts = "; ".join(f"{n}: {shown(n)}" for n in sorted(by_count))
    shared = shared_seeds(rows)
    on = f"the {len(shared)} seeds every row has ({', '.join(map(str, shared))})" if shared else "no seed every row has"
    return ["", f"Rows have different seeds ({counts}): the ranks and this order use {on}; each cell its row's own."]


def task_table(task: str, rows: list[Row], train_length: int, floor: dict[int, dict[str, float]]) -> str:
    """Rank with its interval, 1x (flagged under 0.9 of the best), past-training accuracy at each multiple beside
    the best baseline's, the score, the effective length; then the baselines and the test-time table."""
    multiples = sorted({m for row in rows for m in row.past})
    header = ["rank [95%]", "encoding", "seeds", f"1x ({train_length})"]
    header += [f"{m}x ({m * train_length}) past {train_length}" for m in multiples] + [score_header(rows)]
    header.append("effective length (>= 85% of 1x)")
    table = []
    for row in rows:
        low, high = row.rank_interval
        cells = [rank_cell(row.rank, low, high, methods=len(rows)), row.encoding, row.seeds]
        cells.append(row.one_x.text() + (" !" if row.flagged else ""))
        cells += [row.past[m].text() if m in row.past else "n/a" for m in multiples]
        table.append([*cells, row.score.text(), effective_text(row)])
    lines = [f"### {task} (trained at {train_length})", "", markdown_table(header, table), *seeds_note(rows)]
    if any(row.flagged for row in rows):
        lines += ["", "! : 1x accuracy under 0.9 of the task's best: the task was not learned at the training length."]
    lines += ["", baseline_table(floor, train_length), "", scaled_table(rows, train_length)]
    return "\n".join(lines)


def baseline_table(floor: dict[int, dict[str, float]], train_length: int) -> str:
    if not floor:
        return "Baselines: not recorded by these runs."
    names = sorted({name for row in floor.values() for name in row})
    header = ["baseline (same evaluation sets)", *(f"{m}x" + (" past" if m > 1 else "") for m in floor)]
    rows = [[name, *(f"{floor[m][name]:.3f}" if name in floor[m] else "n/a" for m in floor)] for name in names]
    return markdown_table(header, rows)


def scaled_table(rows: list[Row], train_length: int) -> str:
    """The same trained models with test-time scaling, past the training length: scores x log(L)/log(L_train)
    (every encoding), and the encoding's test-time rule chosen on the selection set, with its name."""
    multiples = sorted({m for row in rows for m in row.scaled})
    with_rules = any(row.rules for row in rows)
    header = ["encoding", *(f"{m}x: x log L" for m in multiples)]
    header += [f"{m}x: chosen rule" for m in multiples] if with_rules else []
    table, chosen_on = [], set()
    for row in rows:
        cells = [row.encoding, *(row.scaled[m].text() if m in row.scaled else "n/a" for m in multiples)]
        if with_rules:
            cells += [f"{r.test.text()} ({r.variant})" if (r := row.rules.get(m)) else "n/a" for m in multiples]
            chosen_on |= {rule.chosen_on for rule in row.rules.values()}
        table.append(cells)
    title = f"With test-time scaling (trained at {train_length}; accuracy past {train_length}):"
    lines = [title, "", markdown_table(header, table)]
    if chosen_on:
        optimistic = " (on the test set itself: optimistic)" if "test set" in chosen_on else ""
        lines += ["", f"Rules chosen on: {', '.join(sorted(chosen_on))}{optimistic}."]
    return "\n".join(lines)


def time_table(seconds: dict[str, list[float]], order: list[str], baseline: str = "rope") -> str:
    """Training time per run by encoding (mean over its runs) and against ``baseline``'s, and the sum."""
    if not seconds:
        return ""
    base = mean(seconds[baseline]) if seconds.get(baseline) else math.nan
    rows = []
    for encoding in [e for e in order if e in seconds]:
        per_run = mean(seconds[encoding])
        ratio = f"{per_run / base:.2f}" if base == base else "n/a"
        rows.append([encoding, len(seconds[encoding]), f"{per_run:.1f}", ratio])
    total = sum(sum(values) for values in seconds.values())
    count = sum(len(values) for values in seconds.values())
    table = markdown_table(["encoding", "runs", "s / run", f"x {baseline}"], rows)
    summed = (
        f"{count} run{'' if count == 1 else 's'} trained whole in one process, {total / 3600:.2f} h of training "
        f"summed over {'it' if count == 1 else 'them'} (resumed "
        "runs, timed in parts, are left out)."
    )
    return "\n".join(["### Training time", "", table, "", summed])


def zoo_markdown(
    tables: dict[str, list[Row]],
    train_lengths: dict[str, int],
    floors: dict[str, dict],
    ranking: Ranking,
    seconds: dict[str, list[float]],
    order: list[str],
) -> str:
    parts = [overall_table(ranking, sum(task not in ranking.excluded for task in tables))]
    parts += [task_table(task, rows, train_lengths[task], floors[task]) for task, rows in tables.items()]
    return "\n\n".join(parts + [table for table in [time_table(seconds, order)] if table])


def claims_table(claims: list[dict[str, Any]]) -> str:
    """Each ``--claim``: A - B per task and length, its paired interval over seeds and its verdict."""
    if not claims:
        return ""
    table = []
    for claim in claims:
        if claim["missing"] or not claim["tasks"]:
            why = "no runs of " + ", ".join(claim["missing"]) if claim["missing"] else "no task has both with it"
            table.append([claim["claim"], claim["figure"], "", "", why, "", "not testable"])
        for task, by_multiple in claim["tasks"].items():
            for multiple, cell in by_multiple.items():
                difference = Interval.from_dict(cell).cell()
                verdict = cell["verdict"] + (f" ({cell['why']})" if cell.get("why") else "")
                seeds = str(cell["n"]) if cell.get("of", cell["n"]) == cell["n"] else f"{cell['n']} of {cell['of']}"
                table.append([claim["claim"], claim["figure"], task, multiple, difference, seeds, verdict])
    header = ["claim", "figure", "task", "multiple", "A - B [95%]", "seeds", "verdict"]
    note = (
        "Paired on the seeds both have the figure for (a task's runs of one seed see the same data; `4 of 5`: a "
        "seed one side lacks it at is left out); fewer than 2: not testable."
    )
    return "\n".join(
        ["### Claims (A - B, paired; verdicts as docs/verdicts.md)", "", markdown_table(header, table), "", note]
    )


def runs_csv(runs: list[ZooRun]) -> str:
    """One row per run: every figure at every multiple (``<figure>@<m>x``), its steps, time and directory."""
    columns = sorted({(m, key) for r in runs for m, row in r.figures.items() for key in row})
    header = ["task", "encoding", "seed", "train_length", "score", *(f"{key}@{m}x" for m, key in columns)]
    scored_at = {task: score_multiples([r for r in runs if r.task == task]) for task in {r.task for r in runs}}
    rows = [
        [r.task, r.encoding, r.seed, r.train_length, _number(r.score(scored_at[r.task])),
         *(_number(r.figures.get(m, {}).get(key)) for m, key in columns), r.steps[0], _number(r.train_seconds),
         str(r.path)]
        for r in runs
    ]  # fmt: skip
    return csv_text([*header, "steps", "train_seconds", "run"], rows)


def _number(value: float | None) -> float | None:
    """A figure as the CSV writes it: all its digits, empty where the run has none (None, NaN)."""
    return None if value is None or value != value else float(value)


def plot_accuracy(
    tables: dict[str, list[Row]], train_lengths: dict[str, int], floors: dict[str, dict], order: list[str]
) -> Any:
    """Small multiples: a row per task, a column per family of methods (at most nine lines a panel, each its own
    colour), accuracy at 1x and past the training length beyond it (seed means, the interval shaded), the best
    baseline dashed and chance dotted in every panel."""
    families = [f for f in [*FAMILIES, "other"] if any(family_of(e) == f for e in order)]
    fig, axes = plt.subplots(
        len(tables), len(families), figsize=(3.6 * len(families), 2.5 * len(tables) + 1.2), squeeze=False,
        sharex="row", sharey=True, layout="constrained",
    )  # fmt: skip
    colours = plt.get_cmap("tab10")
    for i, (task, rows) in enumerate(tables.items()):
        length = train_lengths[task]
        for j, family in enumerate(families):
            ax = axes[i, j]
            members = [e for e in order if family_of(e) == family]
            drawn = [r for r in rows if r.encoding in members]
            for row in sorted(drawn, key=lambda r: members.index(r.encoding)):
                draw_row(ax, row, length, colours(members.index(row.encoding) % 10))
            draw_baselines(ax, floors[task], length)
            lengths = [m * length for row in drawn for m in (1, *row.past)] + [m * length for m in floors[task]]
            length_axis(ax, lengths or [length])
            ax.tick_params(axis="x", labelsize=7)
            ax.set_ylim(-0.02, 1.02)
            ax.grid(alpha=0.3)
            ax.set_title(f"{task}: {family}" if i == 0 else task, fontsize=8)
            if i == len(tables) - 1:  # the family's key under its column, outside every panel's curves
                ax.set_xlabel("test length (tokens)")
                ax.legend(*legend_entries(axes[:, j]), fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.3),
                          ncols=2)  # fmt: skip
        axes[i, 0].set_ylabel("accuracy (past L_train)")
    fig.suptitle(
        "position zoo: accuracy at 1x, then past the training length\ndashed: best baseline, dotted: chance",
        fontsize=9,
    )
    return fig


def legend_entries(column: Any) -> tuple[list[Any], list[str]]:
    """Every labelled line of a column's panels, once each (a task may lack an encoding another has)."""
    entries: dict[str, Any] = {}
    for ax in column:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    return list(entries.values()), list(entries)


def draw_row(ax: Any, row: Row, train_length: int, colour: Any) -> None:
    cells = [(1, row.one_x), *sorted(row.past.items())]
    lengths = [m * train_length for m, _ in cells]
    intervals = [cell.interval for _, cell in cells]
    ax.plot(lengths, [i.mean for i in intervals], "-o", markersize=3, lw=1.2, color=colour, label=row.encoding)
    if all(i.has_interval for i in intervals):
        ax.fill_between(lengths, [i.low for i in intervals], [i.high for i in intervals], color=colour, alpha=0.12)


def draw_baselines(ax: Any, floor: dict[int, dict[str, float]], train_length: int) -> None:
    if not floor:
        return
    lengths = [m * train_length for m in floor]
    ax.plot(lengths, [best_baseline(row)[1] for row in floor.values()], "--", color="black", lw=1, label="baseline")
    chance = [row.get("chance", math.nan) for row in floor.values()]
    ax.plot(lengths, chance, ":", color="grey", lw=1)


def scored_lengths(tables: dict[str, list[Row]]) -> str:
    """The multiples the tasks' scores average (``zoo.score_multiples``): ``2x, 4x, 8x``, or each task's own."""
    found = {tuple(rows[0].score_multiples) for rows in tables.values() if rows}
    if len(found) != 1:
        return "each task's own lengths"
    return ", ".join(f"{m}x" for m in found.pop()) or "no length past training"


def plot_heatmap(tables: dict[str, list[Row]], order: list[str]) -> Any:
    """The extrapolation score (mean accuracy past the training length at the task's score multiples, 2x, 4x and
    8x where every run has them) of each encoding (rows, overall order) on each task."""
    import numpy as np

    tasks = list(tables)
    values = np.full((len(order), len(tasks)), np.nan)
    for j, task in enumerate(tasks):
        for row in tables[task]:
            values[order.index(row.encoding), j] = row.score.interval.mean
    # tall enough for the colour bar's label, on two lines, with a row or two (a small zoo)
    height = max(3.0, 0.32 * len(order) + 1.6)
    fig, ax = plt.subplots(figsize=(1.3 * len(tasks) + 3.2, height), layout="constrained")
    image = ax.imshow(values, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(len(tasks)), tasks, rotation=30, ha="right")
    ax.set_yticks(range(len(order)), order, fontsize=8)
    for i in range(len(order)):
        for j in range(len(tasks)):
            if values[i, j] == values[i, j]:
                colour = "black" if values[i, j] > 0.6 else "white"
                ax.text(j, i, f"{values[i, j]:.2f}", ha="center", va="center", fontsize=7, color=colour)
    bar = fig.colorbar(image, ax=ax)
    bar.set_label(f"mean accuracy past the\ntraining length, {scored_lengths(tables)}", fontsize=8)
    even = constant_note(values)
    ax.set_title("position zoo: extrapolation score" + (f"\n{even}" if even else ""))
    return fig
