"""The diagnostic tasks' own figures in ``poslab report zoo`` (issue 38, item 4; docs/diagnostic_tasks.md):
flip-flop's read error by mix (``read_error_pct``: the training mix FFL(0.8); ``read_error_pct_ffl<p>``: the
sparse and dense out-of-distribution mixes, as Liu et al. report them) and MQAR's accuracy by number of pairs
(``accuracy_pairs<P>``), per encoding and evaluation length: seed means with their 95% t-intervals over seeds.

Compute (``diagnostics_summary``) gives the part of ``zoo.json`` under ``diagnostics``; render
(``diagnostics_markdown``) reads only that. A task without such figures has no entry, so a zoo without the
diagnostic tasks writes the report it always did.
"""

from __future__ import annotations

import re
from typing import Any

from poslab.analysis.stats import Interval
from poslab.analysis.tables import markdown_table
from poslab.analysis.zoo import ZooRun
from poslab.io import number_or_nan

#: each also ``..._past_train`` past the training length (the reads or queries past it only; runs from session 45 on:
#: the figure without it counts every position of the longer sequence, those within the training length too)
FIGURE = re.compile(r"^(read_error_pct(?:_ffl[0-9.]+)?|accuracy_pairs(\d+))(_past_train)?$")
#: how each figure reads: its unit and its direction
MEANING = {"read_error_pct": "read error %, lower is better", "accuracy_pairs": "accuracy, higher is better"}


def figure_order(name: str) -> tuple[int, float, str]:
    """The training mix first, then the mixes by p; pair counts by P; each figure's past-training part after it."""
    base = name.removesuffix("_past_train")
    match = re.search(r"(\d+(?:\.\d+)?)$", base)
    return (0 if match is None else 1, float(match.group(1)) if match else 0.0, name)


def reads_error(figure: str) -> bool:
    """A read error in percent (lower is better), not an accuracy (higher is better)."""
    return figure.startswith("read_error")


def seed_interval(runs: list[ZooRun], multiple: int, figure: str) -> dict[str, Any]:
    """One encoding's figure at one multiple over the seeds that recorded it, within the figure's range."""
    bounds = (0.0, 100.0 if reads_error(figure) else 1.0)
    return Interval.of((run.figure(multiple, figure) for run in runs), bounds).as_dict()


def diagnostics_summary(by_task: dict[str, list[ZooRun]], order: list[str]) -> dict[str, Any]:
    """task -> {train_length, figures, multiples, rows: encoding -> figure -> multiple -> interval}, the encodings
    in ``order`` (the overall ranking's), intervals over the seeds that recorded the figure there."""
    summary = {}
    for task, members in sorted(by_task.items()):
        figures = sorted({k for r in members for row in r.figures.values() for k in row if FIGURE.match(k)},
                         key=figure_order)  # fmt: skip
        if not figures:
            continue
        multiples = sorted({m for r in members for m in r.figures})
        rows: dict[str, dict[str, dict[str, Any]]] = {}
        for encoding in [e for e in order if any(r.encoding == e for r in members)]:
            mine = [r for r in members if r.encoding == encoding]
            rows[encoding] = {
                figure: {f"{m}x": seed_interval(mine, m, figure) for m in multiples} for figure in figures
            }
        summary[task] = {"train_length": members[0].train_length, "figures": figures,
                         "multiples": [f"{m}x" for m in multiples], "rows": rows}  # fmt: skip
    return summary


def diagnostics_markdown(summary: dict[str, Any]) -> str:
    """A table per task and figure: encodings down, lengths across."""
    parts = []
    for task, part in summary.items():
        lengths = [f"{m} ({int(m.removesuffix('x')) * part['train_length']})" for m in part["multiples"]]
        for figure in part["figures"]:
            meaning = MEANING["read_error_pct" if reads_error(figure) else "accuracy_pairs"]
            digits = 1 if reads_error(figure) else 3
            table = []
            for encoding, figures in part["rows"].items():
                cells = [Interval.from_dict(figures[figure][m]) for m in part["multiples"]]
                seeds = max(cell.n for cell in cells)
                table.append([encoding, str(seeds), *(cell.cell(digits) if cell.n else "" for cell in cells)])
            name = figure + (", the training mix" if figure.removesuffix("_past_train") == "read_error_pct" else "")
            scored = (
                "the positions past the training length only"
                if figure.endswith("_past_train")
                else "every scored position, past 1x those within the training length too"
            )
            title = f"### {task}: {name} ({meaning}; {scored}; seed means [95% over seeds]; blank: not evaluated there)"
            parts.append("\n".join([title, "", markdown_table(["encoding", "seeds", *lengths], table)]))
    return "\n\n".join(parts)


def plot_diagnostics(summary: dict[str, Any]) -> Any:
    """A heatmap per task and figure (flip-flop's mixes, MQAR's pair counts): encodings down, lengths across, the
    seed mean written in each cell; read errors on 0-100 (dark: few errors), accuracies on 0-1 (bright: right)."""
    import numpy as np

    from poslab.analysis.plotting import plt

    panels = [(task, figure) for task, part in summary.items() for figure in part["figures"]]
    encodings = max((len(part["rows"]) for part in summary.values()), default=1)
    fig, axes = plt.subplots(1, len(panels), figsize=(1.9 * len(panels) + 2.4, 0.3 * encodings + 2.0),
                             squeeze=False, layout="constrained")  # fmt: skip
    for k, (ax, (task, figure)) in enumerate(zip(axes[0], panels)):
        part = summary[task]
        names, multiples = list(part["rows"]), part["multiples"]
        values = np.array([[number_or_nan(part["rows"][e][figure][m]["mean"]) for m in multiples] for e in names])
        error = reads_error(figure)
        image = ax.imshow(values, cmap="viridis_r" if error else "viridis", vmin=0.0, vmax=100.0 if error else 1.0,
                          aspect="auto")  # fmt: skip
        for i, j in zip(*np.nonzero(values == values)):
            shown = f"{values[i, j]:.0f}" if error else f"{values[i, j]:.2f}"
            bright = (values[i, j] < 40) if error else (values[i, j] > 0.6)
            ax.text(j, i, shown, ha="center", va="center", fontsize=6, color="black" if bright else "white")
        ax.set_xticks(range(len(multiples)), [int(m[:-1]) * part["train_length"] for m in multiples], fontsize=7)
        first = k == 0 or panels[k - 1][0] != task  # a task's encodings named once, on its first panel
        ax.set_yticks(range(len(names)), names if first else [], fontsize=7)
        ax.set_xlabel("evaluation length (tokens)", fontsize=7)
        ax.set_title(f"{task}\n{figure}", fontsize=8)
        fig.colorbar(image, ax=ax, shrink=0.6).ax.tick_params(labelsize=6)
    fig.suptitle("diagnostic tasks: seed means (read error %: lower is better; accuracy: higher)", fontsize=9)
    return fig
