"""``poslab report zoo --claim "A>B"``: the paired difference of two encodings' accuracy (or another figure,
``@figure``) per task and length, its interval over seeds and the verdict of docs/verdicts.md, on planted runs."""

from __future__ import annotations

import json

import pytest

from poslab.analysis.zoo_report import report_zoo
from poslab.cli import main
from poslab.errors import UsageError
from tests.analysis.test_position_zoo import LENGTHS, plant_two_tasks, planted_run
from tests.analysis.test_zoo_diagnostics import add_figures


def claims_of(directory, *texts: str) -> dict[str, dict]:
    summary = json.loads(report_zoo(directory, texts).files["zoo.json"])
    return {claim["claim"]: claim for claim in summary["claims"]}


def test_a_planted_order_is_reproduced_where_it_holds_and_contradicted_where_it_reverses(tmp_path):
    plant_two_tasks(tmp_path)  # task a: good above flat past training; task b: flat above good
    found = claims_of(tmp_path, "good>flat")["good>flat"]
    assert set(found["tasks"]) == {"a", "b"} and found["missing"] == []
    a, b = found["tasks"]["a"], found["tasks"]["b"]
    assert a["1x"]["verdict"] == "not testable"  # both 1.0 in every seed: a degenerate interval
    assert a["4x"]["mean"] == pytest.approx(0.2) and a["4x"]["n"] == 3
    assert a["2x"]["verdict"] == "reproduced" and a["4x"]["verdict"] == a["8x"]["verdict"] == "not testable"
    assert b["2x"]["mean"] == pytest.approx(-0.25) and b["2x"]["verdict"] == "not testable"  # equal in every seed


def test_a_difference_with_seed_scatter_gets_its_verdict(tmp_path):
    for seed, (high, low) in enumerate(((0.9, 0.5), (0.8, 0.55), (0.95, 0.4), (0.85, 0.6))):
        planted_run(tmp_path, "copy", "path", seed, dict(zip(LENGTHS, (1.0, high, high, high))))
        planted_run(tmp_path, "copy", "rope", seed, dict(zip(LENGTHS, (1.0, low, low + 0.5 * (seed % 2) - 0.2, 0.5))))
    found = claims_of(tmp_path, "path>rope", "path<rope")
    assert found["path>rope"]["tasks"]["copy"]["2x"]["verdict"] == "reproduced"
    assert found["path<rope"]["tasks"]["copy"]["2x"]["verdict"] == "contradicted"
    assert found["path>rope"]["tasks"]["copy"]["4x"]["verdict"] == "not resolved"  # rope's 4x swings across 0


def test_a_claim_on_another_figure_reads_it_and_a_missing_side_is_named(tmp_path):
    for seed in range(3):
        for label, error in (("path", 0.5 + seed), ("rope", 20.0 + 3 * seed)):
            planted_run(tmp_path, "flip_flop", label, seed, dict(zip(LENGTHS, (1.0, 0.9, 0.8, 0.7))))
            path = tmp_path / f"flip_flop_{label}_{seed}" / "results.json"
            result = json.loads(path.read_text())
            for row in result["figures"].values():
                row["read_error_pct_ffl0.98"] = error
            path.write_text(json.dumps(result))
    found = claims_of(tmp_path, "path<rope@read_error_pct_ffl0.98", "fope<rope")
    cell = found["path<rope@read_error_pct_ffl0.98"]["tasks"]["flip_flop"]["2x"]
    assert cell["mean"] == pytest.approx(-21.5) and cell["verdict"] == "reproduced"
    assert found["fope<rope"]["missing"] == ["fope"] and found["fope<rope"]["tasks"] == {}
    text = report_zoo(tmp_path, ["fope<rope"]).report
    assert "| fope<rope | accuracy" in text and "no runs of fope" in text


def test_a_bad_claim_stops_before_any_run_is_read(tmp_path, capsys):
    with pytest.raises(UsageError, match="is not a claim"):
        report_zoo(tmp_path / "nothing-here", ["path>>rope"])
    assert main(["report", "zoo", str(tmp_path / "nothing-here"), "--claim", "path=rope"]) == 2
    assert "is not a claim" in capsys.readouterr().err


def test_a_side_may_name_the_encoding_of_a_label_with_settings_when_one_row_has_it():
    from poslab.analysis.claims import resolve

    rows = {"dape:kerple_log", "cope:33", "cope:65", "rope"}
    assert resolve("dape", rows) == "dape:kerple_log" and resolve("rope", rows) == "rope"
    assert resolve("cope", rows) is None  # two rows: which one is not guessed
    assert resolve("cope:33", rows) == "cope:33" and resolve("fope", rows) is None


def test_a_place_where_neither_side_beats_the_trivial_baseline_is_not_testable(tmp_path):
    # past the training length the best baseline is 0.65 (planted_run): at 2x both sides sit under it, path always
    # a little higher (an interval that excludes 0); at 4x path learned (0.9) and the verdict stands
    for seed, noise in enumerate((0.0, 0.01, 0.02, 0.005)):
        planted_run(tmp_path, "copy", "path", seed, dict(zip(LENGTHS, (1.0, 0.62 + noise, 0.9 - noise, 0.9))))
        planted_run(tmp_path, "copy", "rope", seed, dict(zip(LENGTHS, (1.0, 0.55 + noise, 0.5, 0.5))))
    copy = claims_of(tmp_path, "path>rope")["path>rope"]["tasks"]["copy"]
    assert copy["2x"]["low"] > 0 and copy["2x"]["verdict"] == "not testable"
    assert copy["2x"]["why"] == "both at the floor: the best trivial baseline is 0.650"
    assert copy["4x"]["verdict"] == "reproduced" and "why" not in copy["4x"]
    text = report_zoo(tmp_path, ["path>rope"]).report
    assert "not testable (both at the floor: the best trivial baseline is 0.650)" in text


def test_a_named_accuracy_figure_is_held_against_its_own_baselines(tmp_path):
    """Naming the figure must not bypass the floor. Planted baselines at 64: chance 0.5, constant 0.6 over every
    position (0.65 past training). ``@accuracy`` at 2x: both sides under the constant (0.6 + 0.01), path a little
    higher in every seed: not testable. ``@accuracy_pairs4`` (another set of sequences: chance alone, 0.5): 0.58
    against 0.55 is above it, and the verdict stands; 0.505 against 0.50 is not. ``@sequence_accuracy``: chance
    over the whole sequence (0.5 ** 64, about 0): 0.005 against 0.0 is at the floor, 0.3 against 0.1 is not."""
    for seed, noise in enumerate((0.0, 0.01, 0.02, 0.005)):
        # path's differences from rope vary by seed (2 x noise - noise): intervals with width, above 0
        planted_run(tmp_path, "copy", "path", seed, dict(zip(LENGTHS, (1.0, 0.58 + 2 * noise, 0.9, 0.9))))
        planted_run(tmp_path, "copy", "rope", seed, dict(zip(LENGTHS, (1.0, 0.55 + noise, 0.5, 0.5))))
        sides = {"path": (0.58 + 2 * noise, 0.502 + noise / 5, 0.005 + noise / 5, 0.3 + 2 * noise),
                 "rope": (0.55 + noise, 0.50 + noise / 10, 0.0, 0.1 + noise)}  # fmt: skip
        for label, (pairs, low_pairs, sequence, high_sequence) in sides.items():
            add_figures(tmp_path, "copy", label, seed, {
                64: {"accuracy_pairs4": pairs, "accuracy_pairs8": low_pairs, "sequence_accuracy": sequence},
                128: {"sequence_accuracy": high_sequence},
            })  # fmt: skip
    figures = ("accuracy", "accuracy_pairs4", "accuracy_pairs8", "sequence_accuracy")
    texts = [f"path>rope@{figure}" for figure in figures]
    found = {text: claim["tasks"]["copy"] for text, claim in claims_of(tmp_path, *texts).items()}
    accuracy = found["path>rope@accuracy"]["2x"]
    assert 0 < accuracy["low"] < accuracy["high"] and accuracy["verdict"] == "not testable"
    assert accuracy["why"] == "both at the floor: the best trivial baseline is 0.600"  # every position's constant
    assert found["path>rope@accuracy"]["4x"]["verdict"] == "not testable"  # 0.9 and 0.5 are equal in every seed
    assert found["path>rope@accuracy_pairs4"]["2x"]["verdict"] == "reproduced"  # over chance: the constant is not its
    pairs8 = found["path>rope@accuracy_pairs8"]["2x"]
    assert pairs8["verdict"] == "not testable" and pairs8["why"].endswith("is 0.500")
    assert found["path>rope@sequence_accuracy"]["2x"]["verdict"] == "not testable"
    assert found["path>rope@sequence_accuracy"]["4x"]["verdict"] == "reproduced"


def test_a_seed_without_the_figure_leaves_out_its_seed_not_the_claim(tmp_path):
    """Seed 4 of path predates the figure: the claim is paired on seeds 0-3 (4 of 5), not dropped from the task;
    with one seed left on both sides it is not testable and says why."""
    for seed in range(5):
        planted_run(tmp_path, "flip_flop", "path", seed, dict(zip(LENGTHS, (1.0, 0.9, 0.9, 0.9))))
        planted_run(tmp_path, "flip_flop", "rope", seed, dict(zip(LENGTHS, (1.0, 0.6, 0.6, 0.6))))
        if seed != 4:
            add_figures(tmp_path, "flip_flop", "path", seed, {64: {"read_error_pct_ffl0.98": 1.0 + seed}})
        add_figures(tmp_path, "flip_flop", "rope", seed, {64: {"read_error_pct_ffl0.98": 30.0 + 2 * seed}})
        if seed == 0:  # only seed 0 of path has the figure at 128
            add_figures(tmp_path, "flip_flop", "path", seed, {128: {"read_error_pct_ffl0.98": 2.0}})
        add_figures(tmp_path, "flip_flop", "rope", seed, {128: {"read_error_pct_ffl0.98": 40.0}})
    result = report_zoo(tmp_path, ["path<rope@read_error_pct_ffl0.98"])
    cells = json.loads(result.files["zoo.json"])["claims"][0]["tasks"]["flip_flop"]
    assert cells["2x"]["n"] == 4 and cells["2x"]["of"] == 5 and cells["2x"]["verdict"] == "reproduced"
    assert cells["2x"]["mean"] == pytest.approx(-29.0 - 1.5)
    assert cells["4x"]["n"] == 1 and cells["4x"]["verdict"] == "not testable"
    assert cells["4x"]["why"] == "1 seed with the figure on both sides"
    assert "| path<rope@read_error_pct_ffl0.98 | read_error_pct_ffl0.98 | flip_flop | 2x |" in result.report
    assert "| 4 of 5 | reproduced |" in result.report
