"""Long work shows progress: with the step bar off (parallel jobs), a job's log gets a progress line now and then."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from poslab.running.callbacks import StepProgressBar, duration_text
from tests.conftest import run_train


def test_durations_read_as_a_person_reads_them():
    assert [duration_text(s) for s in (0.4, 42, 200, 3599, 7500)] == ["0 s", "42 s", "3 min 20 s", "59 min 59 s",
                                                                      "2 h 05 min"]  # fmt: skip


def test_with_the_bar_off_a_line_says_the_step_the_rate_and_the_time_left(caplog, monkeypatch):
    bar = StepProgressBar(refresh_rate=0, log_every_seconds=60)
    clock = iter([1000.0, 1030.0, 1100.0])  # start, too soon for a line, then 100 s after the start
    monkeypatch.setattr("poslab.running.callbacks.time.monotonic", lambda: next(clock))
    bar.logged_at = (next(clock), 0)
    trainer = SimpleNamespace(global_step=100, max_steps=400)
    with caplog.at_level(logging.INFO, logger="poslab"):
        bar.log_progress(trainer)  # 30 s: nothing yet
        assert not caplog.records
        trainer.global_step = 200
        bar.log_progress(trainer)
    (record,) = caplog.records
    assert record.getMessage() == "step 200/400 (50%), 0.50 s a step, about 1 min 40 s of training left"


def test_with_the_bar_on_or_lines_off_nothing_is_logged(caplog):
    trainer = SimpleNamespace(global_step=10, max_steps=20)
    for bar in (StepProgressBar(refresh_rate=5, log_every_seconds=1e-9), StepProgressBar(0, log_every_seconds=0)):
        bar.logged_at = (0.0, 0)
        with caplog.at_level(logging.INFO, logger="poslab"):
            bar.log_progress(trainer)
    assert not caplog.records


@pytest.mark.slow
def test_a_run_without_its_bar_logs_progress_lines(tmp_path):
    args = ["task=lag", "trainer.max_steps=6", "task.eval_size=32", "callbacks.progress_bar.refresh_rate=0",
            "callbacks.progress_bar.log_every_seconds=1e-6"]  # fmt: skip
    result = run_train(args, tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    (run_dir,) = (tmp_path / "logs" / "runs").iterdir()
    log = (run_dir / "train.log").read_text().splitlines()
    lines = [line for line in log if " s a step" in line]
    assert lines and lines[-1].split(" - ")[-1].startswith("step 6/6 (100%)"), lines
    # the evaluation after training too: its cost before it starts, its time when it ends (lightning_modules/progress)
    testing = [line.split(" - ")[-1] for line in log if line.split(" - ")[-1].startswith("test: ")]
    assert testing[0].startswith("test: 5 batches (160 windows) in 5 sets") and testing[-1].startswith("test: done in ")
