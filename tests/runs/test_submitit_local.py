"""``hydra/launcher=submitit_local``: each multirun job in its own process through submitit (the SLURM launcher's
code path), ``POSLAB_JOBS`` at a time, with the same results as joblib's ``local_parallel``."""

from __future__ import annotations

import json
import threading
import time

import pytest

from poslab.runs import launching
from tests.conftest import run_train


def sweep_results(sweep) -> dict[str, dict]:
    """Each finished job's figures keyed by its ``ckpt_path`` and seed (what the jobs differ in here)."""
    found = {}
    for path in sweep.rglob("results.json"):
        results = json.loads(path.read_text())
        config = results["config"]
        found[f"{config['ckpt_path']}:{config['seed']}"] = results["figures"]
    return found


def tiny_multirun(tmp_path, name: str, *args: str, jobs: int | None = None):
    """``train.py -m args`` at the smallest size into ``tmp_path/name``, ``jobs`` at a time (None: the launcher's
    choice); the sweep directory and the CompletedProcess."""
    sweep = tmp_path / name
    small = ["debug=small", "trainer.max_steps=3", "threads=1", "~logger", "~callbacks", f"hydra.sweep.dir={sweep}"]
    return sweep, run_train(["-m", *args, *small], tmp_path, timeout=600, jobs=jobs)


@pytest.mark.slow
def test_submitit_local_runs_jobs_in_their_own_processes_as_joblib_does(tmp_path):
    missing = tmp_path / "nowhere.ckpt"  # this job fails inside its process: the other goes on
    sweep, result = tiny_multirun(tmp_path, "submitit", "hydra/launcher=submitit_local", f"ckpt_path=null,{missing}")
    assert result.returncode == 1, result.stderr[-3000:]
    assert f"multirun {sweep}: 2 jobs, 1 success, 1 failed." in result.stderr, result.stderr[-3000:]
    logs = list((sweep / ".submitit").rglob("*_log.out"))
    assert len(logs) == 2, logs  # submitit ran each job as its own process, with its own logs
    # joblib's one-job sweep in the run's own process (its parallel workers: tests/runs/test_launching.py)
    joblib_sweep, joblib_result = tiny_multirun(
        tmp_path, "joblib", "hydra/launcher=local_parallel", "ckpt_path=null", jobs=1
    )
    assert joblib_result.returncode == 0, joblib_result.stderr[-3000:]
    assert sweep_results(sweep) == sweep_results(joblib_sweep)  # the same job, the same figures, either way
    assert list(sweep_results(sweep)) == ["None:0"]


def test_jobs_run_poslab_jobs_at_a_time_the_next_as_one_ends(monkeypatch):
    monkeypatch.setenv("POSLAB_JOBS", "2")
    running, most, lock = [0], [0], threading.Lock()

    def launch_one(jobs: list[list[str]], index: int) -> list[str]:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.05 if index % 2 else 0.01)
        with lock:
            running[0] -= 1
        return [f"{index}:{jobs[0][0]}"]

    jobs = [[f"seed={seed}"] for seed in range(7)]
    assert launching.launch_one_at_a_time(launch_one, jobs, 10) == [f"{10 + s}:seed={s}" for s in range(7)]
    assert most[0] == 2
