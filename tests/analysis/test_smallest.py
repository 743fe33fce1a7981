"""``poslab report smallest DIR``: the narrowest width (or fewest layers) whose seed mean reaches a task's threshold,
and each seed's own, on planted diagnostic runs whose answer is known."""

from __future__ import annotations

import json

import pytest

from poslab.analysis.smallest import report_smallest, smallest, smallest_summary
from poslab.cli import main
from poslab.errors import MissingRunError


def plant(directory, task: str, label: str, seed: int, d_model: int, n_layers: int, figures: dict) -> None:
    """A finished synthetic-task run with ``figures`` (length -> {figure: value}) at this model size."""
    result = {
        "status": "success", "task": task, "encoding": label, "label": label, "seed": seed, "train_length": 32,
        "eval_lengths": sorted(int(n) for n in figures), "steps": 1000, "train_seconds": 1.0,
        "figures": {str(n): {"accuracy": 0.5, "accuracy_log_scaled": 0.5, "baseline_chance": 0.1, **row}
                    for n, row in figures.items()},
        "config": {"task": {"name": task}, "encoding": {"name": label}, "seed": seed,
                   "model": {"d_model": d_model, "n_layers": n_layers}},
    }  # fmt: skip
    run = directory / f"{task}_{label}_{seed}_{d_model}_{n_layers}"
    run.mkdir(parents=True)
    (run / "results.json").write_text(json.dumps(result))


def test_the_narrowest_width_that_solves_each_pair_count(tmp_path):
    # rope solves 4 pairs from width 64 (seed 2 from 128), 8 pairs never; path solves both from 32
    for seed in range(3):
        for width in (32, 64, 128):
            four = 1.0 if width >= (128 if seed == 2 else 64) else 0.5
            plant(
                tmp_path,
                "associative_recall",
                "rope",
                seed,
                width,
                2,
                {32: {"accuracy_pairs4": four, "accuracy_pairs8": 0.3}},
            )
            plant(
                tmp_path,
                "associative_recall",
                "path",
                seed,
                width,
                2,
                {32: {"accuracy_pairs4": 1.0, "accuracy_pairs8": 0.995}},
            )
    rows = {(r["encoding"], r["figure"]): r for r in smallest_summary(tmp_path)["rows"]}
    assert rows[("rope", "accuracy_pairs4")]["smallest"] == 128  # the seed mean at 64 is 2/3 + 0.5/3 < 0.99
    assert rows[("rope", "accuracy_pairs4")]["per_seed"] == {"0": 64, "1": 64, "2": 128}
    assert rows[("rope", "accuracy_pairs8")]["smallest"] is None
    assert (
        rows[("path", "accuracy_pairs8")]["smallest"] == 32 and rows[("path", "accuracy_pairs8")]["threshold"] == 0.99
    )
    assert {r["setting"] for r in rows.values()} == {"model.d_model"}
    text = report_smallest(tmp_path).report
    assert "| rope | accuracy_pairs8 >= 0.99 | 32 | model.d_model | 3 at each | none of 32, 64, 128 |" in text


def test_the_fewest_layers_that_track_state_at_each_length(tmp_path):
    for seed in range(2):
        for layers in (1, 2, 4):
            figures = {32: {"sequence_accuracy": 0.95 if layers >= 2 else 0.2},
                       64: {"sequence_accuracy": 0.92 if layers >= 4 else 0.1}}  # fmt: skip
            plant(tmp_path, "state_tracking", "rope", seed, 64, layers, figures)
    rows = {r["length"]: r for r in smallest_summary(tmp_path)["rows"]}
    assert rows[32]["smallest"] == 2 and rows[64]["smallest"] == 4 and rows[32]["threshold"] == 0.9
    assert rows[64]["setting"] == "model.n_layers"


def test_runs_that_vary_two_sizes_are_refused_with_what_to_fix(tmp_path, capsys):
    plant(tmp_path, "copy", "rope", 0, 32, 1, {32: {}})
    plant(tmp_path, "copy", "rope", 0, 64, 2, {32: {}})
    with pytest.raises(MissingRunError, match="the copy runs differ in 2 .d_model, n_layers.: fix the other"):
        smallest_summary(tmp_path)
    assert main(["report", "smallest", str(tmp_path)]) != 0
    assert "fix the other on the command line" in capsys.readouterr().err


def test_smallest_reads_the_seed_mean_and_each_seed():
    assert smallest({32: {0: 0.97, 1: 1.0}, 64: {0: 1.0, 1: 1.0}}, 0.99) == (64, {0: 64, 1: 32})


def test_the_width_and_the_depth_sweep_read_from_one_directory(tmp_path):
    # the recipe's two commands write to one sweep directory: MQAR varies the width, state tracking the depth
    for width in (32, 64):
        plant(
            tmp_path, "associative_recall", "rope", 0, width, 2, {32: {"accuracy_pairs4": 1.0 if width == 64 else 0.5}}
        )
    for layers in (1, 2):
        plant(
            tmp_path, "state_tracking", "rope", 0, 64, layers, {32: {"sequence_accuracy": 0.95 if layers == 2 else 0.3}}
        )
    rows = {r["task"]: r for r in smallest_summary(tmp_path)["rows"]}
    assert rows["associative_recall"]["setting"] == "model.d_model" and rows["associative_recall"]["smallest"] == 64
    assert rows["state_tracking"]["setting"] == "model.n_layers" and rows["state_tracking"]["smallest"] == 2


def test_two_configurations_at_one_size_and_seed_are_refused_not_merged(tmp_path):
    """MQAR under Zoology's protocol beside the default sweep, in one directory: one must not overwrite the other."""
    for protocol in ("default", "zoology"):
        plant(tmp_path / protocol, "associative_recall", "rope", 0, 32, 2, {32: {"accuracy_pairs4": 0.5}})
        path = next((tmp_path / protocol).iterdir()) / "results.json"
        result = json.loads(path.read_text())
        result["config"]["task"]["protocol"] = protocol
        path.write_text(json.dumps(result))
    plant(tmp_path / "default", "associative_recall", "rope", 0, 64, 2, {32: {"accuracy_pairs4": 1.0}})
    with pytest.raises(
        MissingRunError, match=r"both associative_recall with encoding rope at model.d_model=32, seed 0"
    ):
        smallest_summary(tmp_path)


def test_a_size_not_every_seed_ran_at_is_not_read_and_a_missing_run_is_not_a_failure(tmp_path):
    """Width 64 has seed 0 only (a sweep still running): its "seed mean" is seed 0's alone, so 64 would read as the
    smallest; it is not read, and said so. Seed 2 has no run at 64: its own smallest (128) may be 64, said beside it,
    not read as a failure at 64."""
    values = {32: {0: 1.0, 1: 1.0, 2: 0.5}, 64: {0: 1.0}, 128: {0: 1.0, 1: 0.97, 2: 1.0}}
    for width, by_seed in values.items():
        for seed, value in by_seed.items():
            plant(tmp_path, "associative_recall", "rope", seed, width, 2, {32: {"accuracy_pairs4": value}})
    row = smallest_summary(tmp_path)["rows"][0]
    assert row["smallest"] == 128 and row["per_seed"] == {"0": 32, "1": 32, "2": 128}
    assert row["seeds_by_size"] == {"32": [0, 1, 2], "64": [0], "128": [0, 1, 2]}
    assert row["missing_seeds"] == {"64": [1, 2]}
    text = report_smallest(tmp_path).report
    assert (
        "| 32: 3, 64: 1 (no seed 1, 2), 128: 3 | 128 (64 not read: not every seed ran there) | "
        "32, 32, 128 (no run at 64) |"
    ) in text
    assert smallest({32: {0: 0.5, 1: 0.5}, 64: {0: 1.0}}, 0.99) == (None, {0: 64, 1: None})
