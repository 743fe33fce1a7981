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


def test_a_job_finished_in_its_folder_of_the_older_name_is_not_checked_again(tmp_path):
    """Folders cut short were named with ``~`` before (running sweeps and committed runs still are): a finished job in
    one is found, as in a folder of the current name."""
    from poslab.runs.folders import CUT_MARK, OLD_CUT_MARK

    overrides = ["task=lag", "encoding=rope,alibi", f"task.eval_lengths=[{','.join(['32'] * 20)}]"]
    overrides += [f"hydra.sweep.dir={tmp_path}", "ckpt_path=auto"]
    jobs = job_overrides(overrides, multirun=True)
    name = job_folder_name(jobs[1])
    assert len(name) == 80 and name[71] == CUT_MARK  # cut short
    older = tmp_path / (name[:71] + OLD_CUT_MARK + name[72:])
    older.mkdir(parents=True)
    shutil.copy(FINISHED, older / "results.json")
    assert finished_jobs(overrides, jobs) == {1}


@pytest.mark.parametrize(
    ("text", "sentence"),
    [
        (
            "PaTH (Yang et al., 2025): score q_i^T H_i ... H_{j+1} k_j. More.",
            "PaTH (Yang et al., 2025): score q_i^T H_i ... H_{j+1} k_j",
        ),
        (
            "NoPE (issue 23): Kazemnejad et al. (2023) find it best. Later.",
            "NoPE (issue 23): Kazemnejad et al. (2023) find it best",
        ),
        ("A mix (e.g. rope. Or none) of i.e. two. Rest.", "A mix (e.g. rope. Or none) of i.e. two"),
        ("One sentence.", "One sentence"),
        ("No full stop", "No full stop"),
        ("Version 1.5 of it. Rest.", "Version 1.5 of it"),
    ],
)
def test_help_descriptions_end_at_the_end_of_their_first_sentence(text, sentence):
    from poslab.running.precheck import first_sentence

    assert first_sentence(text) == sentence


def test_help_shows_the_descriptions_past_et_al_and_an_ellipsis():
    from poslab.running.precheck import help_text

    lines = {line.split()[0]: line for line in help_text().splitlines() if line.startswith("      ")}
    assert "Kazemnejad et al. (2023) find NoPE" in lines["position_zoo_variable"]
    assert "score q_i^T H_i ... H_{j+1} k_j" in lines["path"]
    assert all(len(line.split(None, 1)[1]) <= 110 for line in lines.values())


OTHER_NAMES = [("nope", "none"), ("NoPE", "none"), ("rotary", "rope"), ("t5", "t5_bias"), ("absolute", "learned")]


@pytest.mark.parametrize(("given", "suggested"), [*OTHER_NAMES, ("ropee", "rope")])
def test_an_encodings_well_known_other_name_suggests_poslabs(given, suggested):
    from poslab.running.precheck import config_groups, option_suggestion

    assert option_suggestion("encoding", given, config_groups()) == f" did you mean {suggested}?"


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (
            ["encoding.slopes=[0.5"],
            "encoding.slopes=[0.5: Hydra's command line does not parse the value of encoding.slopes"
            " (no viable alternative at input '[0.5'); its brackets do not close: did you mean encoding.slopes=[0.5]?",
        ),
        (["seed=0", "a={x:[1"], "a={x:[1: Hydra's command line does not parse the value of a "),
        (
            ["a=b)"],
            "a=b): Hydra's command line does not parse the value of a (extraneous input ')' expecting <EOF>); "
            "a value holding brackets, braces, parentheses, commas or quotes as text is quoted: \"a='...'\"",
        ),
    ],
)
def test_an_override_that_does_not_parse_is_named_with_a_fix(argv, named):
    from poslab.errors import ConfigError
    from poslab.running.precheck import missing_closers, parse

    with pytest.raises(ConfigError) as refused:
        parse(argv)
    assert str(refused.value).startswith(named)
    assert missing_closers("{x:[1") == "]}" and missing_closers("[1,2]]") == missing_closers("'[1'") == ""


@pytest.mark.slow
def test_cfg_prints_only_a_config_that_passes_the_checks(tmp_path, monkeypatch, capsys):
    """``--cfg job`` composes and checks the job as a run would (Hydra alone prints any config); its other flags
    (``-p``) are not taken for overrides."""
    monkeypatch.setenv("POSLAB_LOG_DIR", str(tmp_path))
    argv = ["encoding=rope", "--cfg", "job", "-p", "encoding"]
    assert check_command_line(argv) == argv
    for bad in (["encoding=rope", "encoding.base=-5", "--cfg", "job"], ["--info", "-m"]):
        with pytest.raises(SystemExit):
            check_command_line(bad)
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("poslab: configuration error: encoding.base=-5 must be"), err
    assert err[1].startswith("poslab: configuration error: -m/--multirun and --info cannot be given together"), err
    assert list(tmp_path.iterdir()) == []
