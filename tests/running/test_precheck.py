"""The pre-check of a resumed multirun checks only the jobs it will run (``poslab.running.precheck.finished_jobs``):
a job finished in its folder is skipped by ``ckpt_path=auto``, so composing and checking its config again would
only cost time (about a second a job)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from poslab.running.precheck import check_command_line, finished_jobs, job_overrides
from poslab.runs.folders import job_folder_name

ROOT = Path(__file__).resolve().parents[2]
#: a committed run's results.json: a finished job as the reports read it
FINISHED = ROOT / "docs/position_zoo/v3/runs/encoding-alibi_experiment-position_zoo_seed-0_task-lag/results.json"


def sweep(tmp_path: Path, ckpt_path: str = "auto") -> tuple[list[str], list[list[str]]]:
    overrides = ["task=lag", "encoding=rope,alibi", "seed=0,1", f"hydra.sweep.dir={tmp_path}", f"ckpt_path={ckpt_path}"]
    return overrides, job_overrides(overrides, multirun=True)


def finish(tmp_path: Path, job: list[str]) -> Path:
    folder = tmp_path / job_folder_name(job)
    folder.mkdir(parents=True)
    shutil.copy(FINISHED, folder / "results.json")
    return folder / "results.json"


def test_a_job_finished_in_its_folder_is_not_checked_again(tmp_path):
    overrides, jobs = sweep(tmp_path)
    assert len(jobs) == 4 and finished_jobs(overrides, jobs) == set()
    finish(tmp_path, jobs[2])
    assert finished_jobs(overrides, jobs) == {2}


def test_without_auto_or_with_a_damaged_results_file_every_job_is_checked(tmp_path):
    overrides, jobs = sweep(tmp_path, ckpt_path="null")
    finish(tmp_path, jobs[0])
    assert finished_jobs(overrides, jobs) == set()  # ckpt_path=null trains it again: check it
    overrides, jobs = sweep(tmp_path)
    assert finished_jobs(overrides, jobs) == {0}
    given = [line for line in overrides if not line.startswith("ckpt_path")] + ["ckpt_path=last"]
    assert finished_jobs(given, job_overrides(given, multirun=True)) == set()
    (tmp_path / job_folder_name(jobs[0]) / "results.json").write_text("{not json")
    assert finished_jobs(overrides, jobs) == set()  # damaged: ckpt_path=auto runs it again


@pytest.mark.parametrize("finished", [1, 4])
def test_the_command_line_check_says_how_many_it_leaves_out(tmp_path, monkeypatch, capsys, finished):
    monkeypatch.setenv("POSLAB_LOG_DIR", str(tmp_path / "logs"))
    overrides, jobs = sweep(tmp_path / "sweep")
    for job in jobs[:finished]:
        finish(tmp_path / "sweep", job)
    assert check_command_line(["-m", *overrides]) == ["-m", *overrides]
    expected = f"{finished} of 4 jobs finished earlier (ckpt_path=auto skips them): checking the other {4 - finished}"
    assert expected in capsys.readouterr().out
