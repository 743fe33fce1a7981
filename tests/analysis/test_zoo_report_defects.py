"""``poslab report zoo`` on planted runs where the review of the synthetic-task reports found it wrong: the effective
length of a run that never learned the task, of seeds evaluated at other lengths, and where its seeds split; rows
with different seeds (order against rank, the overall tie-break); a task's only row; the heat map's lengths."""

from __future__ import annotations

import json
import math

import pytest

from poslab.analysis.plotting import plt
from poslab.analysis.zoo import load_zoo, runs_by_task, task_rows
from poslab.analysis.zoo_render import plot_heatmap
from poslab.analysis.zoo_report import report_zoo
from tests.analysis.test_position_zoo import LENGTHS, planted_run


def rows_of(result, task: str) -> dict[str, dict]:
    return {row["encoding"]: row for row in json.loads(result.files["zoo.json"])["tasks"][task]["rows"]}


def table_line(report: str, encoding: str, task: str = "copy") -> str:
    """``encoding``'s line in ``task``'s table."""
    section = report.split(f"### {task} ")[1]
    return next(line for line in section.splitlines() if line.startswith("| ") and f" | {encoding} | " in line)


def test_a_seed_that_never_learned_the_task_has_no_effective_length(tmp_path):
    """Planted baselines: best 0.6 at 1x (+ FLOOR_MARGIN 0.01). A seed at 0.55 at every length passes 85% of its own
    chance-level 1x everywhere: it would read 256 and lift its row; it is left out and counted instead."""
    for seed in range(3):
        gate = (0.55,) * 4 if seed == 0 else (1.0, 0.9, 0.5, 0.5)  # seed 0 at the floor; seeds 1, 2 reach 64
        planted_run(tmp_path, "copy", "gate", seed, dict(zip(LENGTHS, gate)))
        planted_run(tmp_path, "copy", "stuck", seed, dict(zip(LENGTHS, (0.5, 0.5, 0.5, 0.5))))  # never learned
        planted_run(tmp_path, "copy", "rope", seed, dict(zip(LENGTHS, (1.0, 0.95, 0.9, 0.3))))
    result = report_zoo(tmp_path)
    rows = rows_of(result, "copy")
    gate = rows["gate"]["effective_length"]
    assert gate["per_seed"] == {"0": None, "1": 64.0, "2": 64.0} and gate["mean"] == 64.0 and gate["n"] == 2
    assert gate["not_learned"] == [0]
    cell = "| 64 [degenerate: all 2 seeds equal] (1 of 3 seeds not learned) |"
    assert table_line(result.report, "gate").endswith(cell)
    assert rows["stuck"]["effective_length"]["n"] == 0 and rows["stuck"]["effective_length"]["not_learned"] == [0, 1, 2]
    assert table_line(result.report, "stuck").endswith("| not learned |")
    assert rows["rope"]["effective_length"]["mean"] == 128.0 and rows["rope"]["effective_length"]["not_learned"] == []


def test_the_effective_length_counts_over_the_tasks_lengths_and_a_missing_length_stops_it(tmp_path):
    """c's seed 0 was also evaluated at 512 (16x), which no other run was: it must not reach past 256, or the mean
    (341) falls outside its interval [32, 256]. d's seed 0 has no 128: its count stops at 64, not jump to 256."""
    for seed in range(3):
        c = {32: 1.0, 64: 1.0, 128: 1.0, 256: 1.0, **({512: 1.0} if seed == 0 else {})}
        planted_run(tmp_path, "copy", "c", seed, c)
        d = {32: 1.0, 64: 1.0, 256: 1.0} if seed == 0 else {32: 1.0, 64: 1.0, 128: 0.5, 256: 1.0}
        planted_run(tmp_path, "copy", "d", seed, d)
    result = report_zoo(tmp_path)
    rows = rows_of(result, "copy")
    c, d = rows["c"]["effective_length"], rows["d"]["effective_length"]
    assert c["per_seed"] == {"0": 256.0, "1": 256.0, "2": 256.0} and c["mean"] == 256.0
    assert d["per_seed"] == {"0": 64.0, "1": 64.0, "2": 64.0}
    for cell in (c, d):
        assert cell["low"] <= cell["mean"] <= cell["high"]
    assert "| 341 " not in result.report


def test_effective_lengths_split_by_doublings_and_the_table_and_summary_agree(tmp_path):
    """Lengths 32 / 64 / 64 are one doubling apart, not two outcomes (0.25 tokens, an accuracy's gap, called every
    spread of lengths split in zoo.json while zoo.md showed a mean); 32 / 256 / 256 are, and both files say so."""
    for seed in range(3):
        near = (1.0, 0.9, 0.5, 0.5) if seed else (1.0, 0.5, 0.5, 0.5)  # 64, 64 / 32
        far = (1.0, 1.0, 1.0, 1.0) if seed else (1.0, 0.5, 0.5, 0.5)  # 256, 256 / 32
        planted_run(tmp_path, "copy", "near", seed, dict(zip(LENGTHS, near)))
        planted_run(tmp_path, "copy", "far", seed, dict(zip(LENGTHS, far)))
    result = report_zoo(tmp_path)
    rows = rows_of(result, "copy")
    assert not rows["near"]["effective_length"]["split"]
    assert table_line(result.report, "near").endswith("| 53 [32, 99] |")
    assert rows["far"]["effective_length"]["split"]
    assert table_line(result.report, "far").endswith("| 32 / 256 / 256 (split) |")


def plant_unequal_seeds(directory) -> None:
    """p has 5 seeds (its last two far better), q 3: on copy q is better on the seeds both have, p on its own mean;
    on lag p is better on every seed. The mean ranks tie (1.5); on shared seeds q's mean score is higher."""
    for seed, value in enumerate((0.50, 0.52, 0.48, 0.99, 0.98)):
        planted_run(directory, "copy", "p", seed, dict(zip(LENGTHS, (1.0, value, value, value))))
        planted_run(directory, "lag", "p", seed, dict(zip(LENGTHS, (1.0, 0.6 + 0.01 * seed, 0.6, 0.6))))
        planted_run(directory, "lag", "q", seed, dict(zip(LENGTHS, (1.0, 0.55 + 0.01 * seed, 0.55, 0.55))))
    for seed, value in enumerate((0.60, 0.63, 0.61)):
        planted_run(directory, "copy", "q", seed, dict(zip(LENGTHS, (1.0, value, value, value))))


def test_rows_are_ordered_by_their_rank_and_different_seeds_are_said(tmp_path):
    plant_unequal_seeds(tmp_path)
    result = report_zoo(tmp_path)
    summary = json.loads(result.files["zoo.json"])
    copy = summary["tasks"]["copy"]
    assert [(row["encoding"], row["rank"]) for row in copy["rows"]] == [("q", 1), ("p", 2)]
    assert copy["shared_seeds"] == [0, 1, 2] and copy["rows"][1]["score_shared_seeds"] == pytest.approx(0.5)
    said = "Rows have different seeds (3: q; 5: p): the ranks and this order use the 3 seeds every row has"
    assert said + " (0, 1, 2); each cell its row's own." in result.report
    assert "Rows have different seeds" not in result.report.split("### lag")[1]  # lag: 5 seeds each


def test_the_overall_tie_is_broken_by_the_scores_the_ranks_use(tmp_path):
    plant_unequal_seeds(tmp_path)
    summary = json.loads(report_zoo(tmp_path).files["zoo.json"])
    # the overall tie (1.5 each) broken by the shared-seed scores: q (0.613 + 0.557) / 2 over p (0.500 + 0.607) / 2,
    # not by p's own-seed mean on copy (0.694)
    overall = summary["overall"]
    assert [(row["encoding"], row["mean_rank"]) for row in overall] == [("q", 1.5), ("p", 1.5)]
    assert overall[0]["mean_score"] == pytest.approx((0.92 / 1.5 + 0.55 + 0.02 / 3) / 2, abs=1e-9)
    assert overall[1]["mean_score"] == pytest.approx((0.5 + 0.6 + 0.02 / 3) / 2, abs=1e-9)


def test_a_task_with_one_encoding_says_only_row_not_separated(tmp_path):
    for seed in range(3):
        planted_run(tmp_path, "copy", "rope", seed, dict(zip(LENGTHS, (1.0, 0.8 + 0.01 * seed, 0.6, 0.4))))
    report = report_zoo(tmp_path).report
    assert table_line(report, "rope").startswith("| 1 [only row] | rope | 3 |")
    assert "| 1 | rope | 1.00 [only row] |" in report
    assert "every paired comparison separated" not in report


def test_the_heat_maps_label_names_the_lengths_the_scores_average(tmp_path):
    for seed in range(2):  # evaluated at 2x and 4x only: the score averages those two
        planted_run(tmp_path, "copy", "rope", seed, {32: 1.0, 64: 0.8, 128: 0.6 + 0.01 * seed})
        planted_run(tmp_path, "copy", "alibi", seed, {32: 1.0, 64: 0.9, 128: 0.9 - 0.01 * seed})
    runs, _ = load_zoo(tmp_path)
    tables = {task: task_rows(members) for task, members in runs_by_task(runs).items()}
    fig = plot_heatmap(tables, ["alibi", "rope"])
    label = fig.axes[1].get_ylabel()
    plt.close(fig)
    assert label.endswith("2x, 4x") and "8x" not in label
    assert not math.isnan(tables["copy"][0].score.interval.mean)
