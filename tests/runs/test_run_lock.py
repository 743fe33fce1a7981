"""One run per directory: a run holds a lock in its run directory for its life (``poslab.runs.guard``). A second run
into it stops at start, names the running process and writes nothing; the lock goes when the run ends (normally, by
an exception, by Ctrl-C), and a lock left by a killed process blocks nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from poslab.runs.files import LOCK_FILE
from tests.conftest import ROOT, compose_config, run_train, start_train

SMALL = ["debug=small", "threads=1", "~logger", "callbacks.progress_bar.refresh_rate=0"]


def wait_for(condition, process: subprocess.Popen, timeout: float = 240.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if process.poll() is not None:
            out, err = process.communicate()
            raise AssertionError(f"the first run ended early ({process.returncode}): {err[-3000:]}")
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def log_text(run_dir: Path) -> str:
    path = run_dir / "train.log"
    return path.read_text() if path.is_file() else ""


def snapshot(directory: Path) -> dict[str, tuple[int, int]]:
    """Every file below ``directory``: its size and modification time."""
    return {str(p.relative_to(directory)): (p.stat().st_size, p.stat().st_mtime_ns) for p in directory.rglob("*")}


def hold_lock_in_another_process(directory: Path) -> subprocess.Popen:
    """A process that takes ``directory``'s run lock and keeps it until it is stopped (prints "held" once held)."""
    code = (
        "import sys, time\n"
        "from poslab.runs.guard import take_run_directory\n"
        f"take_run_directory({str(directory)!r})\n"
        "print('held', flush=True)\n"
        "time.sleep(600)\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    assert holder.stdout.readline().strip() == "held"
    return holder


def dead_pid() -> int:
    """The id of a process that has ended (and been reaped)."""
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()
    return finished.pid


@pytest.mark.slow
def test_a_second_run_into_a_running_runs_directory_stops_naming_it_and_writes_nothing(tmp_path):
    run_dir = tmp_path / "D"
    common = ["task=lag", "encoding=rope", *SMALL, f"hydra.run.dir={run_dir}"]
    first = start_train([*common, "trainer.max_steps=100000", "task.eval_seed=200000", "seed=1"], tmp_path)
    try:
        # Hydra has written the first run's config (its lock was taken before that) and training has begun
        wait_for(lambda: "seed 1:" in log_text(run_dir), first)  # the first run has begun: its model is built
        before = snapshot(run_dir / ".hydra")
        second = run_train([*common, "trainer.max_steps=5", "seed=2"], tmp_path, timeout=300)
        assert second.returncode == 2, (second.returncode, second.stderr[-3000:])
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1, second.stderr
        assert lines[0].startswith("poslab: configuration error: ")
        assert f"process {first.pid}" in lines[0] and str(run_dir) in lines[0] and "seed=1" in lines[0]
        assert snapshot(run_dir / ".hydra") == before  # Hydra's files are the first run's
        assert "seed 2" not in (run_dir / "train.log").read_text()
        assert first.poll() is None  # the first run goes on
    finally:
        first.send_signal(signal.SIGINT)  # Ctrl-C: the run stops, and its lock goes with it
        try:
            first.communicate(timeout=120)
        except subprocess.TimeoutExpired:  # CI once lost the first Ctrl-C under load: a second, as a user would
            first.send_signal(signal.SIGINT)
            try:
                first.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                first.kill()  # never leave a 100,000-step run behind
                raise
    assert not (run_dir / LOCK_FILE).exists()
    assert "seed 2" not in (run_dir / "train.log").read_text()


def test_the_lock_is_held_during_the_run_and_gone_after_it_or_after_an_exception(tmp_path, monkeypatch):
    import poslab.running.training as training

    cfg = compose_config(["task=lag", "encoding=rope", *SMALL, "trainer.max_steps=2"], tmp_path)
    seen = []
    build = training.build_datamodule

    def while_running(config):
        seen.append((tmp_path / LOCK_FILE).is_file())
        probe = subprocess.run(
            [
                sys.executable,
                "-c",
                f"from poslab.runs.guard import take_run_directory; take_run_directory({str(tmp_path)!r})",
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        seen.append((probe.returncode, probe.stderr))
        return build(config)

    monkeypatch.setattr(training, "build_datamodule", while_running)
    training.run(cfg)
    assert seen[0] is True
    code, stderr = seen[1]
    assert code != 0 and f"process {os.getpid()}" in stderr and "RunDirectoryInUse" in stderr
    assert not (tmp_path / LOCK_FILE).exists()

    def fails(config):
        raise RuntimeError("broken on purpose")

    monkeypatch.setattr(training, "build_datamodule", fails)
    again = tmp_path / "again"
    with pytest.raises(RuntimeError, match="broken on purpose"):
        training.run(compose_config(["task=lag", "encoding=rope", *SMALL, "trainer.max_steps=2"], again))
    assert not (again / LOCK_FILE).exists()


@pytest.mark.slow
def test_a_run_into_a_directory_another_process_holds_stops_before_anything_is_written(tmp_path):
    run_dir = tmp_path / "held"
    holder = hold_lock_in_another_process(run_dir)
    try:
        result = run_train(["task=lag", *SMALL, f"hydra.run.dir={run_dir}"], tmp_path)
    finally:
        holder.kill()
        holder.wait()
    assert result.returncode == 2, result.stderr[-3000:]
    assert f"process {holder.pid}" in result.stderr and "Traceback" not in result.stderr
    assert [p.name for p in run_dir.iterdir()] == [LOCK_FILE]  # the holder's lock and nothing else
    assert not (tmp_path / "logs").exists()


@pytest.mark.slow
def test_a_stale_lock_of_a_killed_process_does_not_block_a_resume(tmp_path):
    base = ["encoding=rope", *SMALL, "callbacks.checkpoint.every_n_train_steps=3", "ckpt_path=auto"]
    from poslab.running.training import run

    run(compose_config([*base, "trainer.max_steps=3"], tmp_path))
    (tmp_path / "results.json").unlink()  # as if killed after its checkpoint at step 3 ...
    (tmp_path / "model.pt").unlink()
    stale = {"pid": dead_pid(), "host": os.uname().nodename, "command": "train.py", "started": "earlier"}
    (tmp_path / LOCK_FILE).write_text(json.dumps(stale))  # ... leaving its lock behind
    resumed = run(compose_config([*base, "trainer.max_steps=6"], tmp_path))
    assert resumed["steps"] == 6
    assert not (tmp_path / LOCK_FILE).exists()


@pytest.mark.slow
def test_a_ddp_rank_other_than_the_first_takes_no_lock(tmp_path, monkeypatch):
    from poslab.runs.guard import take_run_directory

    holder = hold_lock_in_another_process(tmp_path)  # rank 0 holds the run directory
    try:
        monkeypatch.setenv("LOCAL_RANK", "1")
        assert take_run_directory(tmp_path) is None  # rank 1 works in it without a lock of its own
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.slow
def test_a_multirun_into_a_sweep_directory_another_multirun_holds_stops(tmp_path):
    sweep = tmp_path / "sweep"
    holder = hold_lock_in_another_process(sweep)
    try:
        result = run_train(["-m", "seed=0,1", *SMALL, f"hydra.sweep.dir={sweep}", "ckpt_path=auto"], tmp_path)
    finally:
        holder.kill()
        holder.wait()
    assert result.returncode == 2, result.stderr[-3000:]
    assert f"process {holder.pid}" in result.stderr
    assert [p.name for p in sweep.iterdir()] == [LOCK_FILE]  # no job folder, no multirun.yaml


def test_a_job_s_parent_writes_no_failure_into_a_directory_another_process_holds(tmp_path):
    """A job run in its own process and refused for a directory in use exits 2; its parent must then leave that
    directory alone (no failed.json): it is the holder's."""
    from poslab.runs.guard import RunLock, held_by

    lock = RunLock(tmp_path).acquire()
    try:
        assert held_by(tmp_path) is not None
    finally:
        lock.release()
    assert held_by(tmp_path) is None
