"""Issue 24, item 4: one damaged ``results.json`` neither breaks nor skews a report. A file that does not parse, or
does not fit the schema the reports read (``poslab.runs.results.results_problem``), is listed by path with its
error, left out of every table and counted under it; no report prints a traceback for it; the multirun summary
counts it; ``ckpt_path=auto`` runs its job again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from poslab.cli import main as poslab_main
from poslab.runs.launching import summary_lines
from poslab.runs.results import collect_runs, results_problem, run_status, whole_training_seconds
from tests.conftest import run_train

#: a damage, the file it leaves, and a piece of the error the report must show beside the file's path
DAMAGES = {
    "not JSON": ("garbage{ not json", "does not parse as JSON"),
    "a list": ("[1, 2, 3]", "holds a list"),
    "figures a string": (None, "figures"),  # the grid run's results with "figures": "oops"
}
LENGTHS = (32, 64, 128)


def grid_result(run_dir: Path, seed: int, label: str = "rope") -> dict:
    """A results.json as a synthetic-task job writes it (the fields the reports read)."""
    figures = {}
    for length in LENGTHS:
        row = {"accuracy": 0.9 - 0.1 * seed, "accuracy_log_scaled": 0.8, "baseline_chance": 0.0625}
        if length > 32:
            row |= {"accuracy_past_train": 0.7, "accuracy_log_scaled_past_train": 0.6, "baseline_constant": 0.1}
        figures[str(length)] = row
    return {
        "status": "success",
        "task": "lag",
        "encoding": label,
        "label": label,
        "seed": seed,
        "train_length": 32,
        "train_lengths": None,
        "eval_lengths": list(LENGTHS),
        "steps": 10,
        "parameters": 1000,
        "train_seconds": 1.5,
        "figures": figures,
        "config": {
            "seed": seed,
            "task": {"name": "lag", "eval_size": 64, "program_length": None},
            "encoding": {"name": label},
            "trainer": {"max_steps": 10},
            "paths": {"output_dir": str(run_dir)},
        },
    }


def lm_result(run_dir: Path, seed: int) -> dict:
    return {
        "status": "success",
        "task": "lm",
        "corpus": "wikitext2",
        "encoding": "rope",
        "label": "rope",
        "seed": seed,
        "steps": 10,
        "parameters": 1000,
        "groups": {"main": {"train": {"documents": 100}, "validation": {"documents": 40}}},
        "figures": {"val_loss": 2.0, "val_bpb": 3.0, "step": 10},
        "config": {"seed": seed, "task": {"name": "lm"}, "paths": {"output_dir": str(run_dir)}},
    }


def plant(sweep: Path, make, seeds: int = 3) -> list[Path]:
    """``seeds`` job folders of a multirun, each with a results.json from ``make``."""
    jobs = []
    for seed in range(seeds):
        job = sweep / f"{seed}_seed-{seed}"
        (job / ".hydra").mkdir(parents=True)
        (job / "results.json").write_text(json.dumps(make(job, seed)))
        jobs.append(job)
    return jobs


def damage(results: Path, kind: str) -> None:
    text, _ = DAMAGES[kind]
    if text is None:
        result = json.loads(results.read_text())
        result["figures"] = "oops"
        text = json.dumps(result)
    results.write_text(text)


def assert_listed(out: str, results: Path, kind: str) -> None:
    """The report names the damaged file with its error, and counts it."""
    line = next((line for line in out.splitlines() if str(results) in line), None)
    assert line is not None, out
    assert DAMAGES[kind][1] in line, line
    assert "1 results.json file(s) left out" in line, line


# ---- every report ------------------------------------------------------------------------------------------


def report_with_damage(tmp_path: Path, capsys, report: str, make, job: int, kind: str) -> str:
    """``poslab report REPORT`` on three planted runs, job ``job``'s results.json damaged by ``kind``: it exits 0
    without a traceback and lists the damaged file. What it printed."""
    jobs = plant(tmp_path / "sweep", make)
    damage(jobs[job] / "results.json", kind)
    assert poslab_main(["report", report, str(tmp_path / "sweep"), "--output-dir", str(tmp_path / "out")]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    assert_listed(captured.out, jobs[job] / "results.json", kind)
    return captured.out


@pytest.mark.parametrize("kind", list(DAMAGES))
def test_report_grid_lists_a_damaged_results_file_and_leaves_it_out(tmp_path, capsys, kind):
    out = report_with_damage(tmp_path, capsys, "grid", grid_result, 2, kind)
    table = [line for line in out.splitlines() if line.startswith("| lag | rope |")]
    assert len(table) == 1 and table[0].startswith("| lag | rope | 2 | "), table  # the two good seeds


@pytest.mark.parametrize("kind", list(DAMAGES))
def test_report_zoo_lists_a_damaged_results_file_and_leaves_it_out(tmp_path, capsys, kind):
    report_with_damage(tmp_path, capsys, "zoo", grid_result, 0, kind)
    runs = [line for line in (tmp_path / "out" / "zoo.csv").read_text().splitlines()[1:] if line]
    assert len(runs) == 2  # one row per run: the damaged one is not among them


@pytest.mark.parametrize("kind", ["not JSON", "a list"])
def test_report_losses_lists_a_damaged_results_file_and_leaves_it_out(tmp_path, capsys, kind):
    out = report_with_damage(tmp_path, capsys, "losses", lm_result, 1, kind)
    rows = [line for line in out.splitlines() if line.startswith("| wikitext2 | rope | ")]
    assert len(rows) == 2 + 1  # two runs, and their mean over the two seeds


def test_a_report_with_only_damaged_files_says_so_in_one_message_and_writes_nothing(tmp_path, capsys):
    jobs = plant(tmp_path / "sweep", grid_result, seeds=1)
    damage(jobs[0] / "results.json", "not JSON")
    for report in ("grid", "zoo", "losses"):
        assert poslab_main(["report", report, str(tmp_path / "sweep")]) == 2
        captured = capsys.readouterr()
        err = captured.err.strip().splitlines()
        assert len(err) == 1 and "Traceback" not in captured.out + captured.err, captured.err
        assert str(jobs[0] / "results.json") in err[0] and "does not parse as JSON" in err[0], err
    assert not (tmp_path / "sweep" / "analysis").exists()


@pytest.mark.parametrize("analysis", ["increments", "hrope"])
def test_the_analyses_of_a_run_refuse_its_damaged_results_file_by_name(tmp_path, capsys, analysis):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "model.pt").write_bytes(b"weights")  # never opened: the damaged results.json stops it first
    (run_dir / "results.json").write_text("{truncated")
    assert poslab_main(["analyze", analysis, str(run_dir)]) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and str(run_dir / "results.json") in err[0] and "does not parse as JSON" in err[0], err
    assert not (run_dir / "analysis").exists()


# ---- the schema ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"seed": "zero"}, "seed"),
        ({"seed": True}, "seed"),
        ({"task": None}, "task"),
        ({"label": 3}, "label"),
        ({"figures": {}}, "figures"),
        ({"figures": {"thirty-two": {"accuracy": 0.5}}}, "thirty-two"),
        ({"figures": {"32": {"accuracy": "high"}}}, "figures.32.accuracy"),
        ({"figures": {"32": {"accuracy_log_scaled": 0.5}}}, "figures.32.accuracy"),
        ({"figures": {"8": {"accuracy": 0.5, "accuracy_log_scaled": 0.5}}}, "train_length"),
        ({"train_length": "32"}, "train_length"),
        ({"steps": 2.5}, "steps"),
        ({"config": [1]}, "config"),
        ({"config": {"task": "lag"}}, "config.task"),
        ({"status": 1}, "status"),
    ],
)
def test_results_that_do_not_fit_the_schema_are_named_by_field(tmp_path, change, fragment):
    result = {**grid_result(tmp_path, 0), **change}
    problem = results_problem(result)
    assert problem is not None and fragment in problem, problem


def test_results_as_runs_write_them_fit_the_schema(tmp_path):
    assert results_problem(grid_result(tmp_path, 0)) is None
    assert results_problem(lm_result(tmp_path, 0)) is None
    diverged = {**grid_result(tmp_path, 0), "status": "diverged"}
    diverged["figures"] = {n: None for n in diverged["figures"]}  # a diverged run's figures are null
    assert results_problem(diverged) is None
    old = grid_result(tmp_path, 0)
    del old["status"], old["parameters"], old["train_seconds"]  # an older run, before they were recorded
    assert results_problem(old) is None
    lm = lm_result(tmp_path, 0)
    lm["figures"]["val_bpb"] = "low"
    assert "figures.val_bpb" in (results_problem(lm) or "")


def test_collect_runs_lists_damaged_files_whatever_a_report_keeps(tmp_path):
    jobs = plant(tmp_path / "sweep", grid_result)
    damage(jobs[1] / "results.json", "a list")
    found = collect_runs([tmp_path / "sweep"], keep=lambda result: result["task"] == "lag")  # would fail on a list
    assert [run.path for run in found.counted] == [jobs[0], jobs[2]]
    assert [path for path, _ in found.damaged] == [jobs[1] / "results.json"]
    assert not found.missing  # the job is listed once, as damaged
    assert run_status(jobs[1]).startswith("damaged: ")


# ---- the multirun ----------------------------------------------------------------------------------------------


def test_the_multirun_summary_counts_a_damaged_job_as_not_a_success(tmp_path):
    jobs = plant(tmp_path / "sweep", grid_result, seeds=2)
    damage(jobs[1] / "results.json", "not JSON")
    lines, ok = summary_lines(tmp_path / "sweep")
    assert not ok
    assert lines[0] == f"multirun {tmp_path / 'sweep'}: 2 jobs, 1 success, 1 damaged."
    damaged = next(line for line in lines if str(jobs[1]) in line)
    assert damaged.strip().startswith("damaged") and "does not parse as JSON" in damaged


@pytest.mark.slow
def test_ckpt_path_auto_runs_a_job_with_a_damaged_results_file_again(tmp_path):
    sweep = tmp_path / "sweep"
    args = ["-m", "seed=0,1", "debug=small", "threads=1", "~logger", "callbacks.progress_bar.refresh_rate=0"]
    args += ["trainer.max_steps=2", f"hydra.sweep.dir={sweep}", "ckpt_path=auto"]
    first = run_train(args, tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    (job0,) = sweep.glob("*seed-0*")
    (job1,) = sweep.glob("*seed-1*")
    done = (job0 / "results.json").read_bytes()
    (job1 / "results.json").write_text("[1, 2, 3]")

    again = run_train(args, tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Traceback" not in again.stdout + again.stderr, (again.stdout + again.stderr)[-3000:]
    assert f"multirun {sweep}: 2 jobs, 2 success." in again.stdout
    assert (job0 / "results.json").read_bytes() == done  # finished: skipped
    log = (job1 / "train.log").read_text()
    assert f"{job1 / 'results.json'} holds a list" in log and "runs it again as unfinished" in log, log[-2000:]
    assert json.loads((job1 / "results.json").read_text())["status"] == "success"  # trained again
    assert not (job1 / "failed.json").exists()


@pytest.mark.parametrize(
    ("recorded", "whole"),
    [
        ({"trained_steps": 720}, 300.0),  # one process trained every step
        ({"trained_steps": 360}, None),  # resumed half way: its seconds are the second half's
        ({"trained_steps": 0}, None),  # resumed after training ended (it only evaluated)
        ({"throughput": {"step_seconds": 0.4}}, 300.0),  # before trained_steps: 300 >= 0.75 x 720 x 0.4
        ({"throughput": {"step_seconds": 0.8}}, None),  # 300 s for 720 steps of 0.8 s: a resumed part
        ({"throughput": {}}, None),  # no step timed: at most the warm-up trained in the last process
        ({}, 300.0),  # a run from before either was recorded: taken whole
    ],
)
def test_a_resumed_runs_training_seconds_are_not_a_whole_runs(recorded, whole):
    result = {"steps": 720, "train_seconds": 300.0, **recorded}
    assert whole_training_seconds(result) == whole
    assert whole_training_seconds({"steps": 720}) is None  # no seconds recorded
