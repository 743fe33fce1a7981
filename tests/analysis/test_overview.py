"""``poslab runs DIR`` (``poslab.analysis.overview``): each run directory of a sweep in the state its files say,
how far an unfinished one got (its newest checkpoint, its saved test), and who holds the sweep."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import torch

from poslab.cli import main
from poslab.runs.guard import RunLock

ROOT = Path(__file__).resolve().parents[2]
#: a committed run's results.json: a finished run as the reports read it
FINISHED = ROOT / "docs/position_zoo/v3/runs/encoding-alibi_experiment-position_zoo_seed-0_task-lag/results.json"


def plant(sweep: Path) -> None:
    """One run directory of each state under ``sweep``."""
    for name in ("finished", "diverged", "damaged", "analysis/finished_too"):
        (sweep / name).mkdir(parents=True)
        shutil.copy(FINISHED, sweep / name / "results.json")
    diverged = json.loads(FINISHED.read_text()) | {"status": "diverged", "diverged_at_step": 3}
    (sweep / "diverged" / "results.json").write_text(json.dumps(diverged))
    (sweep / "damaged" / "results.json").write_text("{not json")
    (sweep / "failed").mkdir()
    (sweep / "failed" / "failed.json").write_text(json.dumps({"error": "out of memory at step 3\nTraceback ..."}))
    for name, steps in (("training", (200, 400)), ("testing", (720,)), ("ddp_testing", (720,)), ("held", ())):
        (sweep / name / "checkpoints").mkdir(parents=True)
        (sweep / name / ".hydra").mkdir()
        (sweep / name / ".hydra" / "config.yaml").write_text("trainer:\n  max_steps: 720\n")
        for step in steps:
            (sweep / name / "checkpoints" / f"step{step:06d}.ckpt").write_bytes(b"")
    saved = {"rounds_done": ["selection"], "scored": 12, "module": {"test_round": "test"}}
    torch.save(saved, sweep / "testing" / "checkpoints" / "evaluation.pt")
    for rank, scored in ((1, 30), (0, 7)):  # a DDP run: each rank's own file; rank 0's is shown
        rank_state = {"rounds_done": [], "scored": scored, "module": {"test_round": "selection"}}
        torch.save(rank_state, sweep / "ddp_testing" / "checkpoints" / f"evaluation-rank{rank}.pt")


def rows(output: str) -> dict[str, tuple[str, str]]:
    """The table's rows: run -> (state, detail)."""
    found = {}
    for line in output.splitlines()[2:]:
        if line.startswith("| "):
            run, state, detail = (cell.strip() for cell in line.strip("|").split("|"))
            found[run] = (state, detail)
    return found


def test_each_run_is_shown_in_the_state_its_files_say(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    plant(sweep)
    locks = [RunLock(sweep / "held").acquire(), RunLock(sweep).acquire()]  # as a live multirun holds them
    try:
        assert main(["runs", str(sweep)]) == 0
    finally:
        for lock in locks:
            lock.release()
    output = capsys.readouterr().out
    found = rows(output)
    assert "finished" not in found and "analysis/finished_too" not in found  # finished: counted, not listed
    assert found["diverged"][0] == "diverged" and found["damaged"][0].startswith("damaged:")
    assert found["failed"] == ("failed", "out of memory at step 3")
    assert found["training"][0] == "in progress" and found["training"][1].startswith("step 400 of 720 saved; last")
    assert found["testing"][1].startswith(
        "step 720 of 720 saved; in its test: round selection done, 12 batches of round test saved; last written"
    )
    assert found["ddp_testing"][1].startswith("step 720 of 720 saved; in its test: 7 batches of round selection saved")
    assert found["held"][0] == "running" and found["held"][1].endswith(f"process {os.getpid()}")
    assert list(found) == ["held", "ddp_testing", "testing", "training", "failed", "damaged", "diverged"]
    assert "8 runs: 3 in progress, 1 damaged, 1 diverged, 1 failed, 1 finished, 1 running" in output  # most first
    assert f"{sweep}: held by process {os.getpid()} (" in output


def test_all_lists_the_finished_runs_and_a_lock_let_go_is_no_longer_running(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    plant(sweep)
    assert main(["runs", str(sweep), "--all"]) == 0
    found = rows(capsys.readouterr().out)
    assert found["finished"] == ("finished", "") and found["held"][0] == "in progress"


def test_a_directory_without_runs_is_refused_in_one_line(tmp_path, capsys):
    assert main(["runs", str(tmp_path)]) == 2
    assert "no run directory below it" in capsys.readouterr().err
    assert main(["runs", str(tmp_path / "missing")]) == 2
    assert "no such directory" in capsys.readouterr().err


def test_a_sweep_directory_counts_the_jobs_of_its_latest_command_not_started(tmp_path, capsys):
    from poslab.runs.folders import job_folder_name

    sweep = tmp_path / "sweep"
    task = ["task=lag", "encoding=rope,alibi", "seed=0,1"]
    (sweep / job_folder_name(["task=lag", "encoding=alibi", "seed=1"])).mkdir(parents=True)
    shutil.copy(FINISHED, sweep / job_folder_name(["task=lag", "encoding=alibi", "seed=1"]) / "results.json")
    (sweep / "multirun.yaml").write_text(json.dumps({"hydra": {"overrides": {"task": task}}}))  # JSON is YAML
    assert main(["runs", str(sweep)]) == 0
    expected = "1 run: 1 finished; its latest command (multirun.yaml) names 4 jobs, 3 not started"
    assert expected in capsys.readouterr().out
    (sweep / "multirun.yaml").write_text(json.dumps({"hydra": {"overrides": {"task": ["experiment=no_such"]}}}))
    assert main(["runs", str(sweep)]) == 0  # the folders still count; why the jobs do not is said
    assert "1 run: 1 finished; its latest command's jobs not counted (" in capsys.readouterr().out


def test_the_work_left_is_each_job_not_started_at_its_finished_seeds_median(tmp_path, capsys):
    """rope at seeds 0 and 1 (120 s, 240 s), alibi at seed 0 resumed (its 10 steps at its median step: 500 s, and
    a 100 s test); not started: rope seed 2 (180 s), alibi seeds 1 and 2 (600 s each), and kerple_log, never run,
    at every run's median (240 s) x 3: 2,100 s."""
    from poslab.runs.folders import job_folder_name

    sweep = tmp_path / "sweep"
    finished = json.loads(FINISHED.read_text()) | {"steps": 10}
    for job, figures in (
        (["task=lag", "encoding=rope", "seed=0"], {"train_seconds": 100, "trained_steps": 10, "test_seconds": 20}),
        (["task=lag", "encoding=rope", "seed=1"], {"train_seconds": 200, "trained_steps": 10, "test_seconds": 40}),
        (
            ["task=lag", "encoding=alibi", "seed=0"],
            {"train_seconds": 30, "trained_steps": 3, "test_seconds": 100, "throughput": {"step_seconds": 50.0}},
        ),  # fmt: skip
    ):
        run_dir = sweep / job_folder_name(job)
        (run_dir / ".hydra").mkdir(parents=True)
        (run_dir / ".hydra" / "overrides.yaml").write_text(json.dumps(job))
        (run_dir / "results.json").write_text(json.dumps(finished | figures))
    task = ["task=lag", "encoding=rope,alibi,kerple_log", "seed=0,1,2"]
    (sweep / "multirun.yaml").write_text(json.dumps({"hydra": {"overrides": {"task": task}}}))
    assert main(["runs", str(sweep)]) == 0
    expected = (
        "3 runs: 3 finished; its latest command (multirun.yaml) names 9 jobs, 6 not started; about 35 min of work in "
        "them, one job at a time (each at the median training and test time of its finished runs at other seeds; "
        "3 with none at the sweep's median)"
    )
    assert expected in capsys.readouterr().out


def test_the_listing_loads_neither_lightning_nor_torch_until_a_saved_test_is_read(tmp_path):
    """``poslab runs`` on a sweep of hundreds of runs answers in about a second: importing Lightning for every run in
    progress (to look for a saved test) took 9 s of 10 once."""
    sweep = tmp_path / "sweep"
    plant(sweep)
    for saved in sweep.glob("*/checkpoints/evaluation*.pt"):
        saved.unlink()
    code = (
        "import sys; from poslab.analysis.overview import runs_overview; text = runs_overview(sys.argv[1]); "
        "print(sorted({'lightning', 'torch'} & set(sys.modules)), 'in progress' in text)"
    )
    found = subprocess.run([sys.executable, "-c", code, str(sweep)], capture_output=True, text=True, cwd=ROOT)
    assert found.returncode == 0, found.stderr
    assert found.stdout.split() == ["[]", "True"]
