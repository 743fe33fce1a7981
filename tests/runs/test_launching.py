"""Local multiruns: one job per GPU through CUDA_VISIBLE_DEVICES (a faked GPU count here), and DDP jobs
inside a multirun, each in its own process and its own job directory."""

from __future__ import annotations

import json
import os

import pytest

from poslab.runs import launching
from tests.conftest import job_dir, run_train

CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def multirun(tmp_path, *args: str, timeout: int = 300):
    """``train.py -m args`` into ``tmp_path/sweep`` at the smallest size (2 steps, no loggers or callbacks), as
    many jobs at once as the launcher chooses; the sweep directory and the CompletedProcess."""
    sweep = tmp_path / "sweep"
    small = ["debug=small", "trainer.max_steps=2", "threads=1", "~logger", "~callbacks", f"hydra.sweep.dir={sweep}"]
    return sweep, run_train(["-m", *args, *small], tmp_path, timeout=timeout, jobs=None)


def test_job_k_gets_gpu_k_mod_n_and_ddp_jobs_consecutive_gpus(monkeypatch):
    monkeypatch.delenv("POSLAB_JOBS", raising=False)
    monkeypatch.setenv("POSLAB_GPUS", "3")
    assert [launching.gpus_for_job(k) for k in range(5)] == [["0"], ["1"], ["2"], ["0"], ["1"]]
    assert launching.parallel_jobs(1) == 3  # at most N at once by default
    monkeypatch.setenv("POSLAB_GPUS", "4,5,6,7")
    assert [launching.gpus_for_job(k, devices=2) for k in range(3)] == [["4", "5"], ["6", "7"], ["4", "5"]]
    assert launching.parallel_jobs(2) == 2
    monkeypatch.setenv("POSLAB_JOBS", "5")
    assert launching.parallel_jobs(2) == 5  # an explicit POSLAB_JOBS wins
    monkeypatch.setenv("POSLAB_GPUS", "")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.delenv("POSLAB_JOBS")
    assert launching.visible_gpus() == [] and launching.gpus_for_job(3) == [] and launching.parallel_jobs() == 2


@pytest.mark.slow
def test_a_local_multirun_on_faked_gpus_runs_each_job_on_its_own_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("POSLAB_GPUS", "2")
    monkeypatch.delenv("POSLAB_JOBS", raising=False)
    # accelerator=auto: a GPU job on a GPU machine, the CPU here; the jobs still get their GPU assignment
    # two jobs, one per GPU (job k on GPU k mod N for more jobs than GPUs: test_job_k_gets_gpu_k_mod_n above)
    sweep, result = multirun(tmp_path, "hydra/launcher=local_parallel", "seed=0,1", "trainer.accelerator=auto")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "n_jobs=2" in result.stdout + result.stderr  # one job per (faked) GPU at once
    for job in range(2):
        saved = json.loads((job_dir(sweep, job) / "results.json").read_text())
        assert saved["seed"] == job and saved["environment"]["cuda_visible_devices"] == str(job % 2)


@pytest.mark.slow
@pytest.mark.skipif(CORES < 2, reason="trainer=ddp_cpu runs 2 processes: needs 2 CPU cores")
def test_ddp_inside_a_multirun_runs_its_ranks_in_the_jobs_directory(tmp_path):
    sweep, result = multirun(tmp_path, "trainer=ddp_cpu", "seed=3", timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    saved = json.loads((job_dir(sweep, 0) / "results.json").read_text())
    assert saved["seed"] == 3 and saved["config"]["trainer"]["devices"] == 2 and saved["steps"] == 2
    assert [p.parent for p in tmp_path.rglob("results.json")] == [job_dir(sweep, 0)]  # no rank wrote elsewhere


@pytest.mark.slow
def test_a_multirun_with_a_failed_job_says_so_and_exits_nonzero(tmp_path):
    # jobs 1 and 3 resume from a checkpoint that does not exist: they fail inside the job; jobs 0 and 2 train
    missing = tmp_path / "nowhere.ckpt"
    sweep, result = multirun(tmp_path, "seed=0,1", f"ckpt_path=null,{missing}")
    assert result.returncode == 1, result.stderr[-3000:]
    summary = [line for line in result.stderr.splitlines() if line.startswith(f"multirun {sweep}: ")]
    assert summary == [f"multirun {sweep}: 4 jobs, 2 success, 2 failed."], result.stderr[-3000:]
    jobs = [line for line in result.stderr.splitlines() if line.startswith("  ")]  # one per job
    failed = next(job for job in jobs if job.startswith("  failed") and "seed=0" in job)
    assert f"ckpt_path={missing} " in failed  # its overrides, then its directory and the reason
    assert f"{job_dir(sweep, 1)}: ConfigError: ckpt_path={missing} does not exist" in failed
    assert "this job failed:" in (job_dir(sweep, 1) / "train.log").read_text()  # the reason is in the job's log too
    assert (job_dir(sweep, 0) / "results.json").is_file() and (job_dir(sweep, 2) / "results.json").is_file()
    assert not (job_dir(sweep, 3) / "results.json").is_file()


@pytest.mark.slow
def test_a_multirun_whose_jobs_all_succeed_exits_zero_with_its_summary(tmp_path):
    sweep, result = multirun(tmp_path, "seed=0,1")
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"multirun {sweep}: 2 jobs, 2 success." in result.stdout


def processes_with(*parts: str) -> list[int]:
    """The pids whose command line holds every one of ``parts`` (read from /proc)."""
    from pathlib import Path

    found = []
    for entry in Path("/proc").iterdir():
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError):
            continue
        if entry.name.isdigit() and all(part in command for part in parts):
            found.append(int(entry.name))
    return found


def test_needs_own_process_for_parallel_local_jobs_only(monkeypatch):
    joblib = "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"
    monkeypatch.delenv(launching.CHILD_MARK, raising=False)
    monkeypatch.setenv("POSLAB_JOBS", "2")
    assert launching.needs_own_process(False, 1, joblib)
    monkeypatch.setenv(launching.SHARED_WORKERS, "1")  # opted out: inside joblib's workers, as before
    assert not launching.needs_own_process(False, 1, joblib)
    monkeypatch.delenv(launching.SHARED_WORKERS)
    monkeypatch.setenv("POSLAB_JOBS", "1")  # one at a time: in the command's own process
    assert not launching.needs_own_process(False, 1, joblib)


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="finds the job's process in /proc")
def test_a_job_killed_in_a_parallel_multirun_fails_alone_and_the_others_finish(tmp_path):
    """local_parallel once ran jobs inside joblib's workers: a worker killed (OOM, a signal) ended every job of the
    pool. Each job is now a process of its own: killing seed 0's leaves seed 1 to finish, and seed 0 says why."""
    import signal
    import time

    from tests.conftest import ROOT, train_environment
    from tests.script_runs import start_script

    sweep = tmp_path / "sweep"
    args = ["-m", "hydra/launcher=local_parallel", "task=lag", "debug=small", "seed=0,1", "trainer.max_steps=600",
            "~callbacks.progress_bar", "threads=1", f"hydra.sweep.dir={sweep}"]  # fmt: skip
    env = {**train_environment(tmp_path, None, 2), "POSLAB_TEST_EXEC": "1"}
    process = start_script(ROOT / "train.py", args, tmp_path, env, tmp_path / "console.txt")
    deadline = time.monotonic() + 120
    while not (victims := processes_with("hydra.job.num=0", str(sweep))) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert victims, (tmp_path / "console.txt").read_text()[-3000:]
    time.sleep(3)
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    process.wait(timeout=600)
    seed0, seed1 = job_dir(sweep, 0), job_dir(sweep, 1)
    assert (seed1 / "results.json").is_file(), (tmp_path / "console.txt").read_text()[-3000:]
    failure = json.loads((seed0 / "failed.json").read_text())["error"]
    assert "killed by signal 9" in failure
    assert process.returncode != 0  # the summary says a job failed
