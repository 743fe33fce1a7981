"""The position zoo: its multirun covers every encoding and every synthetic task; a tiny one runs and resumes;
``poslab report zoo`` ranks planted results as their figures say, with t-intervals over seeds."""

from __future__ import annotations

import json
import math

import pytest
import yaml

from poslab.analysis.stats import Interval, t_quantile
from poslab.analysis.zoo_report import report_zoo
from poslab.cli import main
from poslab.config.settings import SYNTHETIC_TASKS
from tests.conftest import CONF, ROOT, GlobalHydra, compose, initialize_config_dir, run_train

#: encodings not (yet) in the zoos (issue 38, the second frontier batch: the lead adds them with their rerun)
ENCODINGS = sorted(p.stem for p in (CONF / "encoding").glob("*.yaml"))


def zoo_params() -> dict[str, list[str]]:
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="train", overrides=["experiment=position_zoo"], return_hydra_config=True)
    return {key: str(value).split(",") for key, value in cfg.hydra.sweeper.params.items()}


def test_the_zoo_covers_every_encoding_and_synthetic_task_and_the_wandb_sweep_is_the_same_grid():
    params = zoo_params()
    assert sorted(params["encoding"]) == ENCODINGS  # a new encoding's YAML must join the zoo
    # every synthetic task, counting as counting_filler (the same answers at every length); state_tracking (A5)
    # joined for issue 38's rerun
    zoo_tasks = [t if t != "counting" else "counting_filler" for t in SYNTHETIC_TASKS]
    assert sorted(params["task"]) == sorted(zoo_tasks)
    assert params["seed"] == ["0", "1", "2", "3", "4"]
    sweep = yaml.safe_load((ROOT / "sweeps" / "position_zoo.yaml").read_text())["parameters"]
    assert sweep["experiment"]["value"] == "position_zoo"
    for key in ("encoding", "task", "seed"):
        assert [str(v) for v in sweep[key]["values"]] == params[key]


@pytest.mark.slow
def test_a_tiny_zoo_runs_resumes_and_is_reported(tmp_path, capsys):
    sweep = tmp_path / "zoo"
    args = [
        "-m",
        "experiment=position_zoo",
        "encoding=rope,alibi",
        "task=copy,flip_flop",
        "seed=0,1",
        "trainer.max_steps=3",
        "task.eval_size=8",
        f"hydra.sweep.dir={sweep}",
    ]
    first = run_train(args, tmp_path, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    assert f"multirun {sweep}: 8 jobs, 8 success." in first.stdout
    jobs = sorted(p.name for p in sweep.iterdir() if p.is_dir())
    assert len(jobs) == 8 and all(not name[0].isdigit() for name in jobs)  # named by what they are
    written = {job: (sweep / job / "results.json").read_bytes() for job in jobs}
    again = run_train(args, tmp_path, timeout=600)  # the same command: every job finished, nothing trains
    assert again.returncode == 0, again.stderr[-3000:]
    assert {job: (sweep / job / "results.json").read_bytes() for job in jobs} == written

    assert main(["report", "zoo", str(sweep)]) == 0
    out = capsys.readouterr().out
    assert "### Overall" in out and "### copy (trained at 32)" in out and "### flip_flop (trained at 32)" in out
    files = {p.name for p in (sweep / "analysis" / "zoo").iterdir()}
    # flip_flop records its read error by mix: the diagnostics heatmap joins the zoo's two figures
    assert files == {"zoo.md", "zoo.csv", "zoo.json", "zoo_accuracy.png", "zoo_heatmap.png", "zoo_diagnostics.png"}
    table = json.loads((sweep / "analysis" / "zoo" / "zoo.json").read_text())
    rope = next(row for row in table["tasks"]["copy"]["rows"] if row["encoding"] == "rope")
    assert rope["seeds"] == 2 and set(rope["past_train"]) == {"2x", "4x", "8x"}
    assert rope["rule"]["8x"]["variant"].startswith("test_")  # rope's test-time rules were evaluated
    assert rope["rule"]["8x"]["chosen_on"] == "selection set"
    alibi = next(row for row in table["tasks"]["copy"]["rows"] if row["encoding"] == "alibi")
    assert alibi["rule"] == {}
    assert set(table["tasks"]["flip_flop"]["baselines"]["8"]) == {"chance", "constant", "last_bit"}


def planted_run(
    directory,
    task: str,
    label: str,
    seed: int,
    accuracy: dict[int, float],
    variants=None,
    seconds: float = 60.0,
    selection=None,
    program_length=None,
) -> None:
    """A results.json as a zoo job writes it: ``accuracy`` at each test length (also past the training length),
    ``variants`` and their ``selection`` figures by length, and the baselines of a two-class task."""
    figures = {}
    for length, value in accuracy.items():
        row = {"accuracy": value, "accuracy_log_scaled": value / 2, "baseline_chance": 0.5, "baseline_constant": 0.6}
        if length > 32:
            row |= {"accuracy_past_train": value, "accuracy_log_scaled_past_train": value / 2}
            row["baseline_constant_past_train"] = 0.65
        for name, by_length in (variants or {}).items():
            if length in by_length:
                row[f"accuracy_{name}"] = row[f"accuracy_{name}_past_train"] = by_length[length]
        for name, by_length in (selection or {}).items():
            if length in by_length:
                row[f"selection_{name}"] = by_length[length]
        figures[str(length)] = row
    result = {
        "status": "success",
        "task": task,
        "encoding": label.split(":")[0],
        "label": label,
        "seed": seed,
        "train_length": 32,
        "eval_lengths": sorted(accuracy),
        "steps": 1000,
        "train_seconds": seconds,
        "figures": figures,
        "config": {
            "task": {"name": task, "program_length": program_length},
            "encoding": {"name": label.split(":")[0]},
            "seed": seed,
        },
    }
    run = directory / f"{task}_{label}_{seed}"
    run.mkdir(parents=True)
    (run / "results.json").write_text(json.dumps(result))


LENGTHS = (32, 64, 128, 256)


def plant_two_tasks(directory) -> None:
    for seed, spread in enumerate((-0.1, 0.0, 0.1)):
        # task a: good extrapolates best; flat is second; bad is last (and never learned the task at 1x)
        planted_run(directory, "a", "good", seed, dict(zip(LENGTHS, (1.0, 0.9 + spread, 0.8, 0.7))))
        planted_run(directory, "a", "flat", seed, dict(zip(LENGTHS, (1.0, 0.6, 0.6, 0.6))))
        planted_run(directory, "a", "bad", seed, dict(zip(LENGTHS, (0.5, 0.2, 0.1, 0.1))))
        # task b: the order of good and flat reverses; bad's test-time rules: ntk best on the test set, yarn best on
        # the selection set, which is the one chosen
        planted_run(directory, "b", "good", seed, dict(zip(LENGTHS, (1.0, 0.45, 0.45, 0.45))))
        planted_run(directory, "b", "flat", seed, dict(zip(LENGTHS, (1.0, 0.7, 0.7, 0.7))))
        rule = {"test_yarn": {256: 0.6}, "test_ntk": {256: 0.9}}
        chosen = {"test_yarn": {256: 0.8}, "test_ntk": {256: 0.4}}
        planted_run(directory, "b", "bad", seed, dict(zip(LENGTHS, (1.0, 0.1, 0.1, 0.1))), rule, selection=chosen)


def test_the_report_ranks_planted_runs_by_their_extrapolation_past_training_with_intervals(tmp_path):
    plant_two_tasks(tmp_path)
    result = report_zoo(tmp_path)
    tables = json.loads(result.files["zoo.json"])
    rows = {task: tables["tasks"][task]["rows"] for task in ("a", "b")}
    assert [row["encoding"] for row in rows["a"]] == ["good", "flat", "bad"]
    assert [row["encoding"] for row in rows["b"]] == ["flat", "good", "bad"]
    good = rows["a"][0]
    assert good["score"]["mean"] == pytest.approx((0.9 + 0.8 + 0.7) / 3)
    two = good["past_train"]["2x"]  # 0.8, 0.9, 1.0 over the seeds: mean 0.9, sd 0.1, t(2) = 4.303
    assert two["mean"] == pytest.approx(0.9) and two["per_seed"] == {"0": 0.8, "1": 0.9, "2": 1.0}
    assert two["low"] == pytest.approx(0.9 - 4.303 * 0.1 / math.sqrt(3), abs=1e-6) and two["high"] == 1.0  # clipped
    assert good["rank_interval"] == [1, 1] and rows["a"][2]["rank_interval"] == [3, 3]  # separated in every seed
    assert rows["a"][2]["flagged_1x"] and not good["flagged_1x"]  # 0.5 < 0.9 x 1.0
    assert "0.500 [degenerate: all 3 seeds equal] !" in result.report  # every seed 0.5: no spread, said so
    bad = rows["b"][2]
    assert bad["rule"]["8x"]["variant"] == "test_yarn" and bad["rule"]["8x"]["chosen_on"] == "selection set"
    assert bad["rule"]["8x"]["mean"] == pytest.approx(0.6)  # the chosen rule's test figure, not the best test one
    assert bad["log_scaled_past_train"]["8x"]["mean"] == pytest.approx(0.05)
    # effective length (>= 85% of 1x, every shorter length too): good on a stops at 32 at seed 0 (2x: 0.8 < 0.85)
    # and at 64 at seeds 1 and 2 (2x: 0.9, 1.0; 4x: 0.8 < 0.85); flat stops at 32 (0.6)
    assert good["effective_length"]["per_seed"] == {"0": 32.0, "1": 64.0, "2": 64.0}
    assert rows["a"][1]["effective_length"]["mean"] == 32.0
    assert "effective length (>= 85% of 1x)" in result.report and "| 53 [32, 99] |" in result.report
    assert tables["tasks"]["a"]["baselines"]["8"] == {"chance": 0.5, "constant": 0.65}
    assert tables["tasks"]["a"]["baselines"]["1"] == {"chance": 0.5, "constant": 0.6}
    assert "| constant | 0.600 | 0.650 | 0.650 | 0.650 |" in result.report
    overall = [(row["encoding"], row["mean_rank"]) for row in tables["overall"]]
    assert overall == [("flat", 1.5), ("good", 1.5), ("bad", 3.0)]  # tied ranks: the better mean score first
    assert tables["not_separated"] == [["flat", "good"]]
    assert "- flat, good" in result.report
    csv_lines = result.files["zoo.csv"].decode().splitlines()
    assert len(csv_lines) == 1 + 18 and "accuracy_past_train@8x" in csv_lines[0]


def test_seeds_that_split_are_shown_per_seed_and_plain_counting_is_not_ranked(tmp_path):
    for seed, value in enumerate((0.02, 0.98, 1.0)):
        planted_run(tmp_path, "a", "split", seed, dict(zip(LENGTHS, (1.0, value, value, value))))
        planted_run(tmp_path, "a", "steady", seed, dict(zip(LENGTHS, (1.0, 0.5, 0.5, 0.5))))
        planted_run(tmp_path, "counting", "steady", seed, dict(zip(LENGTHS, (1.0, 0.2, 0.2, 0.2))))
        planted_run(tmp_path, "counting", "split", seed, dict(zip(LENGTHS, (1.0, 0.9, 0.9, 0.9))))
    result = report_zoo(tmp_path)
    tables = json.loads(result.files["zoo.json"])
    split = next(row for row in tables["tasks"]["a"]["rows"] if row["encoding"] == "split")
    assert split["past_train"]["2x"]["split"] and "0.02 / 0.98 / 1.00 (split)" in result.report
    assert set(tables["excluded_from_ranking"]) == {"counting"} and "Left out of the ranking: counting" in result.report
    assert all(row["tasks"] == 1 for row in tables["overall"])  # ranked on task a alone


def test_t_quantiles_and_intervals():
    assert t_quantile(2) == 4.303 and t_quantile(30) == pytest.approx(2.042, abs=2e-3)
    assert t_quantile(200) == pytest.approx(1.972, abs=1e-3)
    single = Interval.of([0.4])
    assert single.n == 1 and single.cell() == "0.400"
    assert Interval.of([]).cell() == "n/a"


def test_the_cope_counting_table_is_a_zoo_over_the_number_of_variables_and_reported_per_number(tmp_path):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="train", overrides=["experiment=cope_counting"], return_hydra_config=True)
    assert dict(cfg.hydra.sweeper.params) == {
        "task": "counting",
        "task.num_variables": "1,3,5",
        "encoding": "learned,t5_bias,cope",
        "seed": "0,1,2",
    }
    assert (
        cfg.ckpt_path == "auto" and cfg.trainer.max_steps == 1000 and list(cfg.task.eval_lengths) == [32, 64, 128, 256]
    )
    for seed in range(2):
        for variables, value in ((1, 0.9), (3, 0.5)):
            planted_run(tmp_path / f"v{variables}", "counting", "cope", seed, {32: value, 64: value / 2})
    for variables, directory in ((1, "v1"), (3, "v3")):
        for result in (tmp_path / directory).rglob("results.json"):
            saved = json.loads(result.read_text())
            saved["config"]["task"]["num_variables"] = variables
            result.write_text(json.dumps(saved))
    tables = json.loads(report_zoo(tmp_path).files["zoo.json"])["tasks"]
    assert set(tables) == {"counting num_variables=1", "counting num_variables=3"}  # never averaged together
    assert tables["counting num_variables=3"]["rows"][0]["accuracy_1x"]["mean"] == 0.5


def test_the_report_gives_each_encodings_training_time_against_ropes_and_the_zoos_total(tmp_path):
    lengths = (32, 64, 128, 256)
    for task in ("a", "b"):
        for seed in (0, 1):
            planted_run(tmp_path, task, "rope", seed, dict(zip(lengths, (1.0, 0.5, 0.4, 0.3))), seconds=50.0 + seed)
            planted_run(tmp_path, task, "cope", seed, dict(zip(lengths, (1.0, 0.9, 0.8, 0.7))), seconds=150.0)
    result = report_zoo(tmp_path)
    seconds = json.loads(result.files["zoo.json"])["train_seconds"]
    assert seconds["rope"] == {"runs": 4, "mean": 50.5, "total": 202.0}
    assert seconds["cope"]["mean"] == 150.0
    assert "| cope | 4 | 150.0 | 2.97 |" in result.report and "| rope | 4 | 50.5 | 1.00 |" in result.report
    assert "8 runs trained whole in one process, 0.22 h of training" in result.report  # (202 + 600) s


def test_a_resumed_run_is_left_out_of_the_training_time(tmp_path):
    """A resumed run's train_seconds are its last process's part: averaged as a whole run it would halve a mean."""
    lengths = (32, 64, 128, 256)
    for seed in (0, 1):
        planted_run(tmp_path, "a", "rope", seed, dict(zip(lengths, (1.0, 0.5, 0.4, 0.3))), seconds=50.0)
    resumed = tmp_path / "a_rope_1" / "results.json"
    result = json.loads(resumed.read_text())
    resumed.write_text(json.dumps({**result, "train_seconds": 5.0, "trained_steps": 100}))  # of its 1,000 steps
    report = report_zoo(tmp_path)
    assert json.loads(report.files["zoo.json"])["train_seconds"]["rope"] == {"runs": 1, "mean": 50.0, "total": 50.0}
    assert "1 run trained whole in one process" in report.report


def test_the_score_averages_the_lengths_every_run_of_the_task_has_and_says_which():
    """b was never evaluated at 8x (where a is weakest): a's score and b's both average 2x and 4x, so b does not
    pass a by skipping its hardest length; the header names the lengths."""
    from poslab.analysis.zoo import ZooRun, task_rows
    from poslab.analysis.zoo_render import score_header

    def run(encoding: str, seed: int, past: dict[int, float]) -> ZooRun:
        figures = {1: {"accuracy": 1.0}} | {m: {"accuracy_past_train": v} for m, v in past.items()}
        return ZooRun("lag", encoding, seed, 32, True, figures)

    runs = [run("a", s, {2: 0.9 + 0.01 * s, 4: 0.8 + 0.01 * s, 8: 0.1}) for s in range(3)]
    runs += [run("b", s, {2: 0.7 + 0.02 * s, 4: 0.6 - 0.01 * s}) for s in range(3)]
    rows = {row.encoding: row for row in task_rows(runs)}
    assert rows["a"].score.interval.mean == pytest.approx((0.91 + 0.81) / 2)  # 2x and 4x, seed means
    assert rows["b"].score.interval.mean == pytest.approx((0.72 + 0.59) / 2)
    assert rows["a"].rank == 1 and rows["b"].rank == 2
    assert score_header(list(rows.values())) == "score (2x, 4x, past)"
