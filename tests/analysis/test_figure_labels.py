"""Figures that explain themselves (issue 39, item 4): length axes in plain numbers (128 ... 2,048, not 2^7 ...
2^11), loss-by-position and passkey figures titled with their length, sample and seeds, legends outside the panels,
and a heat map of one value in every cell saying so. Each checks the matplotlib objects of a figure drawn from
small made-up summaries (the fixtures of ``test_figures``)."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from poslab.analysis.length_render import plot_positions
from poslab.analysis.passkey_render import plot_passkey
from poslab.analysis.plotting import constant_note, plain_number, plt, powers_of_two
from tests.analysis.test_figures import (
    FIGURES,
    LENGTH_SMALL,
    SMALL_ZOO,
    length_runs,
    passkey_result,
    zoo_runs,
    zoo_tables,
)

#: the figures with a length (or position) axis on a log scale
LENGTH_AXES = [
    "length_bpb.png (two corpora, 3 encodings)",
    "length_position.png (two corpora, 3 encodings)",
    "zoo_accuracy.png (small zoo)",
    "extrapolation_grid.png",
]


@pytest.fixture
def drawn(request) -> Any:
    fig = FIGURES[request.param]()
    fig.canvas.draw()
    yield fig
    plt.close(fig)


def test_plain_numbers_powers_of_two_and_constant_notes():
    assert [plain_number(n) for n in (128, 2048.0, 0.5, 16384)] == ["128", "2,048", "0.5", "16,384"]
    assert powers_of_two(1, 2048) == [2, 8, 32, 128, 512, 2048]  # at most 7, the longest kept
    assert powers_of_two(1, 64) == [1, 2, 4, 8, 16, 32, 64]
    assert constant_note([[0.0, 0.0], [0.0, float("nan")]]) == "0 in every cell"  # a cell not scored is no value
    assert constant_note([1.0, 1.0]) == "1 in every cell"
    assert constant_note([0.0, 0.5]) == "" and constant_note([float("nan")]) == ""


@pytest.mark.parametrize("drawn", LENGTH_AXES, indirect=True)
def test_length_axes_are_ticked_in_plain_numbers(drawn):
    """Every tick label of a log length axis is a number as a reader writes it, with no minor ticks between."""
    logged = [ax for ax in drawn.axes if ax.get_xscale() == "log"]
    assert logged
    for ax in logged:
        labels = [label.get_text() for label in ax.get_xticklabels() if label.get_text()]
        assert labels, ax.get_title()
        assert all(re.fullmatch(r"\d{1,3}(,\d{3})*", label) for label in labels), (ax.get_title(), labels)
        assert not ax.xaxis.get_minorticklocs().size, ax.get_title()


def test_the_bpb_figure_writes_2048_with_a_separator():
    fig = FIGURES["length_bpb.png (two corpora, 3 encodings)"]()
    labels = [label.get_text() for label in fig.axes[0].get_xticklabels()]
    assert labels == ["128", "256", "512", "1,024", "2,048"]
    assert "seeds 0, 1, 2" in fig.axes[0].get_title()
    plt.close(fig)


def test_a_loss_by_position_panel_names_its_length_seeds_and_tokens_per_point():
    summary = length_runs(*LENGTH_SMALL)
    for part in summary["corpora"].values():
        for curve in part["loss_by_position"].values():
            curve["tokens"] = [8 * (i + 1) for i in range(len(curve["start"]))]  # per seed, widening bins
    fig = plot_positions(summary)
    title = fig.axes[0].get_title()
    assert "length 2,048 (16x the 128 trained)" in title, title
    assert "mean of seeds 0, 1, 2" in title, title
    assert f"a point: 8-{plain_number(8 * len(curve['start']))} tokens per seed" in title, title
    plt.close(fig)


def test_a_summary_without_tokens_per_point_says_not_recorded():
    summary = copy.deepcopy(length_runs(*LENGTH_SMALL))
    for part in summary["corpora"].values():
        for curve in part["loss_by_position"].values():
            curve.pop("tokens", None)
        part.pop("sample", None)
    fig = plot_positions(summary)
    title = fig.axes[0].get_title()
    assert "tokens per point: not recorded" in title and "mean of 3 seeds" in title, title
    plt.close(fig)


def test_the_length_summary_keeps_each_bins_tokens():
    curve = next(iter(length_runs(*LENGTH_SMALL)["corpora"]["wikitext2"]["loss_by_position"].values()))
    assert curve["tokens"] == [1] * len(curve["start"])  # length_runs' runs count one token a bin


def test_the_passkey_title_names_the_sequence_lengths_trials_and_seeds():
    grids = length_runs(*LENGTH_SMALL)["corpora"]["wikitext2"]["passkey"]
    for grid in grids.values():
        grid["sequence_lengths"] = [[d + 100, d + 300] for d in grid["distances"]]
    fig = plot_passkey(grids)
    title = fig._suptitle.get_text()
    longest = max(grids["rope"]["distances"]) + 300
    assert f"sequences 164-{plain_number(longest)} tokens" in title, title
    assert "8 trials per cell" in title and "mean of 3 seeds" in title, title
    plt.close(fig)

    fig = plot_passkey(passkey_result(1.0))  # one run's result: no seed count to speak of
    assert "one run" in fig._suptitle.get_text()
    plt.close(fig)


def test_a_passkey_heat_map_of_one_value_says_so():
    result = passkey_result(1.0)
    result["exact"] = [[1.0] * len(result["depths"]) for _ in result["distances"]]
    fig = plot_passkey({"rope": result, "alibi": copy.deepcopy(result)})
    assert all(ax.get_title().endswith("1 in every cell") for ax in fig.axes[:2]), [a.get_title() for a in fig.axes]
    assert "EVERY PANEL: 1 IN EVERY CELL" in fig._suptitle.get_text()
    plt.close(fig)


def test_a_zoo_heat_map_of_zeros_says_so_in_its_title():
    from poslab.analysis.zoo_render import plot_heatmap

    runs = zoo_runs(*SMALL_ZOO)
    for run in runs:
        for figures in run.figures.values():
            figures.update({key: 0.0 for key in figures if key.startswith("accuracy")})
    tables, _, _, order = zoo_tables(runs)
    fig = plot_heatmap(tables, order)
    assert "0 in every cell" in fig.axes[0].get_title()
    plt.close(fig)
    fig = FIGURES["zoo_heatmap.png (small zoo)"]()  # scores that differ: no such note
    assert "every cell" not in fig.axes[0].get_title()
    plt.close(fig)


WITH_LEGENDS = [
    "length_bpb.png (two corpora, whole zoo)",
    "length_position.png (two corpora, whole zoo)",
    "zoo_accuracy.png (small zoo)",
    "extrapolation_grid.png",
    "hrope_well.png",
]


@pytest.mark.parametrize("drawn", WITH_LEGENDS, indirect=True)
def test_legends_lie_outside_every_panel(drawn):
    """No legend covers a panel (its curves), however many lines it names."""
    renderer = drawn.canvas.get_renderer()
    legends = [*drawn.legends, *(ax.get_legend() for ax in drawn.axes if ax.get_legend() is not None)]
    assert legends
    panels = [ax.get_window_extent(renderer) for ax in drawn.axes]
    for legend in legends:
        box = legend.get_window_extent(renderer)
        assert not any(box.overlaps(panel) for panel in panels), (box, panels)
        assert drawn.bbox.contains(box.x0, box.y0) and drawn.bbox.contains(box.x1 - 1, box.y1 - 1)
