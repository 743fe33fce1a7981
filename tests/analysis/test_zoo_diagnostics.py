"""``poslab report zoo``: the diagnostic tasks' own figures (flip-flop's read error by mix, MQAR's accuracy by number
of pairs) per encoding and length, seed means with intervals, on planted runs; a zoo without them is unchanged."""

from __future__ import annotations

import json
import math
import re

import pytest

from poslab.analysis.stats import t_quantile
from poslab.analysis.zoo_report import report_zoo
from tests.analysis.test_position_zoo import LENGTHS, planted_run


def add_figures(directory, task: str, label: str, seed: int, by_length: dict[int, dict[str, float]]) -> None:
    path = directory / f"{task}_{label}_{seed}" / "results.json"
    result = json.loads(path.read_text())
    for length, figures in by_length.items():
        result["figures"][str(length)].update(figures)
    path.write_text(json.dumps(result))


def test_read_error_by_mix_and_accuracy_by_pairs_are_tabled_with_seed_intervals(tmp_path):
    for seed in range(3):
        for label, sparse in (("path", 0.0 + seed), ("rope", 30.0 + 2 * seed)):  # read error % at 1x: sparse + 1
            planted_run(tmp_path, "flip_flop", label, seed, dict(zip(LENGTHS, (1.0, 0.9, 0.8, 0.7))))
            add_figures(tmp_path, "flip_flop", label, seed,
                        {n: {"read_error_pct": 1.0, "read_error_pct_ffl0.98": sparse + n / 32,
                             "read_error_pct_ffl0.1": 5.0} for n in LENGTHS})  # fmt: skip
        planted_run(tmp_path, "associative_recall", "rope", seed, dict(zip(LENGTHS, (1.0, 0.9, 0.8, 0.7))))
        add_figures(tmp_path, "associative_recall", "rope", seed,
                    {n: {"accuracy_pairs4": 1.0 - 0.1 * seed, **({"accuracy_pairs16": 0.5} if n >= 64 else {})}
                     for n in LENGTHS})  # fmt: skip
    result = report_zoo(tmp_path)
    summary = json.loads(result.files["zoo.json"])["diagnostics"]
    flip = summary["flip_flop"]
    assert flip["figures"] == ["read_error_pct", "read_error_pct_ffl0.1", "read_error_pct_ffl0.98"]
    rope = flip["rows"]["rope"]["read_error_pct_ffl0.98"]
    assert rope["2x"]["mean"] == pytest.approx(34.0) and rope["2x"]["n"] == 3  # 32, 34, 36
    path = flip["rows"]["path"]["read_error_pct_ffl0.98"]["1x"]  # 1, 2, 3: t-interval [-0.48, 4.48]
    assert path["mean"] == pytest.approx(2.0) and path["low"] == 0.0  # clipped to a percentage's bound
    recall = summary["associative_recall"]["rows"]["rope"]
    assert recall["accuracy_pairs4"]["1x"]["mean"] == pytest.approx(0.9)
    assert recall["accuracy_pairs16"]["1x"]["n"] == 0  # 16 pairs do not fit 32 tokens: not evaluated there
    text = result.report
    assert "### flip_flop: read_error_pct_ffl0.98 (read error %, lower is better;" in text
    sparse = text.split("### flip_flop: read_error_pct_ffl0.98")[1].split("###")[0]
    half = t_quantile(2) / math.sqrt(3)  # three seeds one apart (path) or two apart (rope)
    for label, means, spread in (("path", (2, 3, 5, 9), 1.0), ("rope", (33, 34, 36, 40), 2.0)):
        line = next(row for row in sparse.splitlines() if row.startswith(f"| {label} | 3 |"))
        printed = [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?", line.split("| 3 |", 1)[1])]
        expected = [v for m in means for v in (m, max(0.0, m - spread * half), m + spread * half)]
        assert printed == pytest.approx(expected, abs=0.51)  # as printed: the means to 0.1, the bounds to 1
    assert "### associative_recall: accuracy_pairs16" in text and "| rope | 3 |  | 0.500" in text
    assert result.files["zoo_diagnostics.png"].startswith(b"\x89PNG")


def test_a_zoo_without_diagnostic_figures_writes_the_summary_it_always_did(tmp_path):
    for seed in range(2):
        planted_run(tmp_path, "copy", "rope", seed, dict(zip(LENGTHS, (1.0, 0.9, 0.8, 0.7))))
    result = report_zoo(tmp_path)
    assert "diagnostics" not in json.loads(result.files["zoo.json"]) and "read_error" not in result.report
    assert "zoo_diagnostics.png" not in result.files


def test_a_task_no_encoding_learned_is_left_out_of_the_overall_ranking_with_why(tmp_path):
    # copy is learned; lag sits at its best trivial baseline (0.6 at 1x, planted_run) for every encoding
    for seed in range(2):
        for label, past in (("path", 0.9), ("rope", 0.5)):
            planted_run(tmp_path, "copy", label, seed, dict(zip(LENGTHS, (1.0, past + 0.01 * seed, past, past))))
            planted_run(tmp_path, "lag", label, seed, dict(zip(LENGTHS, (0.605, 0.5, 0.5, 0.5))))
    summary = json.loads(report_zoo(tmp_path).files["zoo.json"])
    assert list(summary["excluded_from_ranking"]) == ["lag"]
    assert "no encoding learned it at the training length" in summary["excluded_from_ranking"]["lag"]
    assert all(row["tasks"] == 1 for row in summary["overall"])  # ranked on copy alone


def test_a_zoo_whose_every_task_is_left_out_says_so_instead_of_an_empty_ranking(tmp_path):
    """lag at its best trivial baseline for every encoding, the only task: no place exists, so the report says
    there is no overall ranking (it printed an empty table and 'every place is separated from its neighbours')."""
    for seed in range(2):
        for label in ("path", "rope"):
            planted_run(tmp_path, "lag", label, seed, dict(zip(LENGTHS, (0.605, 0.5, 0.5, 0.5))))
    result = report_zoo(tmp_path)
    overall = result.report.split("### Overall", 1)[1].split("\n### ", 1)[0]
    assert "No overall ranking: every task is left out of it (below)." in overall
    assert "separated" not in overall and "| place |" not in overall
    assert "Left out of the ranking: lag: " in overall
