"""Issue 24, item 1: a sweep is keyed by its jobs' configs, not by folder names. A job folder is named by the job's
overrides whether or not ``ckpt_path=auto`` is given; ``ckpt_path=auto`` finds a job's earlier folder whatever it is
named (an older sweep's numbered ``0_...`` folders included) and continues there; the reports count one config and
one seed once, naming the duplicate; and a damaged results.json under ``ckpt_path=auto`` is an unfinished run, run
again with every resume check. poslab.runs.folders is imported inside the tests that use it: each test fails on its
own on code without it."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from poslab.errors import ConfigError
from poslab.running.training import run
from poslab.runs.launching import summary_lines
from poslab.runs.results import collect_runs
from tests.conftest import ROOT, compose_config, run_train
from tests.runs.test_damaged_results import grid_result

#: the smallest jobs: a few steps, small evaluation sets, no loggers, no progress bar
SMALL = ["debug=small", "threads=1", "~logger", "callbacks.progress_bar.refresh_rate=0"]


def multirun(tmp_path: Path, sweep: Path, *args: str):
    result = run_train(["-m", *args, *SMALL, f"hydra.sweep.dir={sweep}"], tmp_path)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    return result


def job_folders(sweep: Path) -> list[str]:
    return sorted(p.name for p in sweep.iterdir() if p.is_dir())


def written(sweep: Path) -> dict[str, int]:
    """Each job's results.json, by folder, with its modification time (a job trained again rewrites it)."""
    return {p.parent.name: p.stat().st_mtime_ns for p in sweep.glob("*/results.json")}


# ---- (a) one name with or without ckpt_path=auto ----------------------------------------------------------------


@pytest.mark.slow
def test_a_job_folder_has_the_same_name_with_and_without_ckpt_path_auto(tmp_path):
    sweep = tmp_path / "sweep"
    args = ["encoding=none,rope", "trainer.max_steps=2"]
    multirun(tmp_path, sweep, *args)  # started without ckpt_path=auto
    first = job_folders(sweep)
    assert len(first) == 2 and not any(name[0].isdigit() for name in first), first  # no job number
    done = written(sweep)

    multirun(tmp_path, sweep, *args, "ckpt_path=auto")  # the README's way to continue a sweep
    assert job_folders(sweep) == first  # the same folders: no job starts over in a new one
    assert written(sweep) == done  # and none trained again
    assert all("finished earlier, skipped" in (sweep / name / "train.log").read_text() for name in first)


def test_the_resolver_names_a_job_by_its_overrides_alone(tmp_path):
    """``hydra.sweep.subdir`` as Hydra resolves it for a job (conf/hydra/default.yaml), from the job's overrides."""
    from poslab.running.resolvers import register_resolvers

    register_resolvers()
    subdir = OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "hydra" / "default.yaml"))["sweep"]["subdir"]

    def resolved(overrides: list[str], ckpt_path: str | None = None) -> str:
        hydra = {"overrides": {"task": overrides}, "sweep": {"dir": str(tmp_path / "sweep"), "subdir": subdir}}
        return OmegaConf.create({"ckpt_path": ckpt_path, "hydra": hydra}).hydra.sweep.subdir

    for job in (["seed=1", "encoding=rope"], [], ["corpus.path='/data/a b'", "seed=0"], ["x=" + "y" * 200]):
        assert resolved(job) == resolved([*job, "ckpt_path=auto"], "auto")  # no earlier folder: the name alone
    assert resolved(["seed=1", "encoding=rope"]) == "encoding-rope_seed-1"  # sorted, no job number
    assert resolved([]) == "job"
    long = resolved(["x=" + "y" * 200])
    assert len(long) == 80 and long != resolved(["x=" + "y" * 199])  # cut, with a hash of the whole
    # a checkpoint a job starts from (a fine-tuning) is part of which job it is; auto, last and null are not
    start = "/runs/a/checkpoints/last.ckpt"
    assert resolved(["seed=0", f"ckpt_path={start}"], start) == "ckpt_path-_runs_a_checkpoints_last.ckpt_seed-0"
    assert resolved(["seed=0", "ckpt_path=null"]) == resolved(["seed=0", "ckpt_path=last"], "last") == "seed-0"


@pytest.mark.slow
def test_the_same_job_twice_in_one_multirun_is_refused_before_anything_runs(tmp_path):
    sweep = tmp_path / "sweep"
    result = run_train(["-m", "encoding=none,rope", "seed=0,0", *SMALL, f"hydra.sweep.dir={sweep}"], tmp_path)
    assert result.returncode == 2, (result.stdout + result.stderr)[-3000:]
    err = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(err) == 1 and "twice" in err[0] and "seed=0" in err[0], result.stderr
    assert not sweep.exists() and not (tmp_path / "logs").exists()  # nothing written


def test_a_sweeper_setting_swept_on_the_command_line_is_refused_with_the_override_to_give():
    """``hydra.sweeper.params.seed=0,1`` on the command line makes two jobs of one config (each with one value of
    the sweeper's own setting): refused up front, pointing at ``seed=0,1``."""
    from poslab.errors import ConfigError
    from poslab.runs.folders import check_distinct_jobs

    jobs = [["task=lag", "hydra.sweeper.params.seed=0"], ["task=lag", "hydra.sweeper.params.seed=1"]]
    with pytest.raises(ConfigError, match=r"give seed=a,b on the command line"):
        check_distinct_jobs(jobs)


# ---- (b) ckpt_path=auto finds the earlier folder, whatever its name ---------------------------------------------


@pytest.mark.slow
def test_a_sweep_stopped_without_ckpt_path_auto_resumes_in_its_old_numbered_folders(tmp_path):
    """An older sweep's folders (``<number>_<overrides>``), one job finished and one killed after a checkpoint:
    the same command with ``ckpt_path=auto`` skips the first and resumes the second, in those folders."""
    sweep = tmp_path / "sweep"
    args = ["seed=0,1", "trainer.max_steps=4", "callbacks.checkpoint.every_n_train_steps=2"]
    multirun(tmp_path, sweep, *args)
    for number, name in enumerate(job_folders(sweep)):  # named as before this issue: the job number first
        (sweep / name).rename(sweep / f"{number}_{name}")
    by_seed = sorted(job_folders(sweep), key=lambda n: json.loads((sweep / n / "results.json").read_text())["seed"])
    finished, killed = (sweep / name for name in by_seed)  # seed 0 finished, seed 1 killed (names may not sort so)
    for name in ("results.json", "model.pt"):  # job 1 killed after its checkpoint at step 2
        (killed / name).unlink()
    checkpoints = killed / "checkpoints"
    shutil.copyfile(checkpoints / "step000002.ckpt", checkpoints / "last.ckpt")
    (checkpoints / "step000004.ckpt").unlink()
    done = (finished / "results.json").stat().st_mtime_ns

    multirun(tmp_path, sweep, *args, "ckpt_path=auto")
    assert sorted(job_folders(sweep)) == sorted([finished.name, killed.name])  # no new folder
    assert (finished / "results.json").stat().st_mtime_ns == done  # not trained again
    log = (killed / "train.log").read_text()
    assert f"this job continues in its earlier folder {killed}" in log, log[-2000:]  # the log names the folder
    assert f"resuming from {checkpoints / 'last.ckpt'}" in log
    assert json.loads((killed / "results.json").read_text())["steps"] == 4
    assert "finished earlier, skipped" in (finished / "train.log").read_text()
    found = collect_runs([sweep])
    assert len(found.counted) == 2 and not found.duplicates and not found.missing  # one run per seed

    # the command spelled otherwise (threads is no setting of what is trained) is the same job by what Hydra recorded
    from poslab.runs.folders import RecordedJob, recorded_job

    otherwise = ["seed=0", *args[1:], *("threads=2" if o == "threads=1" else o for o in SMALL), "ckpt_path=auto"]
    root = OmegaConf.to_container(compose_config(otherwise, tmp_path, hydra_node=True), resolve=False)
    job, recorded = RecordedJob.of(otherwise, root), recorded_job(finished)
    assert recorded is not None and recorded.overrides != job.overrides and recorded.same_job(job)
    assert not recorded_job(killed).same_job(job)  # seed 1


def recorded_config(overrides: list[str], tmp_path: Path) -> dict:
    """A job's config as Hydra records it in ``.hydra/config.yaml``: composed, unresolved."""
    config = OmegaConf.to_container(compose_config(overrides, tmp_path), resolve=False)
    config["paths"]["output_dir"] = "${hydra:runtime.output_dir}"
    return config


def record_job(folder: Path, overrides: list[str], tmp_path: Path) -> dict:
    """A job folder's ``.hydra`` as Hydra writes it; returns the config."""
    config = recorded_config(overrides, tmp_path)
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(config)))
    (folder / ".hydra" / "overrides.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(overrides)))
    return config


def test_ckpt_path_auto_finds_a_job_by_its_overrides_or_by_its_settings_and_seed(tmp_path):
    from poslab.runs.folders import RecordedJob, earlier_job_folder

    sweep = tmp_path / "sweep"
    old = ["task=lag", "encoding=rope", "seed=1", "threads=1"]
    record_job(sweep / "3_encoding-rope_seed-1_task-lag_threads-1", old, tmp_path)
    record_job(sweep / "4_encoding-rope_seed-2_task-lag_threads-1", [*old[:2], "seed=2", "threads=1"], tmp_path)
    record_job(sweep / "5_encoding-none_seed-1_task-lag_threads-1", ["task=lag", "encoding=none", *old[2:]], tmp_path)

    def found(overrides: list[str]) -> str | None:
        job = RecordedJob.of(overrides, recorded_config(overrides, tmp_path))
        folder = earlier_job_folder(sweep, "the-name-hydra-would-give", job)
        return folder.name if folder is not None else None

    assert found([*old, "ckpt_path=auto"]) == "3_encoding-rope_seed-1_task-lag_threads-1"  # the same overrides
    # spelled otherwise (threads is no setting of what is trained; the default seed given): the same settings
    assert found(["task=lag", "encoding=rope", "seed=1", "threads=2"]) == "3_encoding-rope_seed-1_task-lag_threads-1"
    assert found(["encoding=rope", "task=lag", "seed=2"]) == "4_encoding-rope_seed-2_task-lag_threads-1"
    assert found(["task=lag", "encoding=rope", "seed=3"]) is None  # another seed: a job of its own
    assert found(["task=lag", "encoding=rope", "seed=1", "model.n_layers=3"]) is None  # another model


def test_of_several_folders_of_one_job_ckpt_path_auto_takes_the_finished_one(tmp_path):
    from poslab.runs.folders import RecordedJob, earlier_job_folder

    sweep = tmp_path / "sweep"
    overrides = ["task=lag", "encoding=rope", "seed=0"]
    config = record_job(sweep / "encoding-rope_seed-0_task-lag", overrides, tmp_path)  # started, nothing written
    record_job(sweep / "0_encoding-rope_seed-0_task-lag", overrides, tmp_path)
    resumable = sweep / "1_encoding-rope_seed-0_task-lag"
    record_job(resumable, overrides, tmp_path)
    (resumable / "checkpoints").mkdir()
    (resumable / "checkpoints" / "last.ckpt").write_bytes(b"a checkpoint")
    job = RecordedJob.of(overrides, config)
    assert earlier_job_folder(sweep, "encoding-rope_seed-0_task-lag", job) == resumable
    finished = sweep / "0_encoding-rope_seed-0_task-lag"
    (finished / "results.json").write_text(json.dumps(grid_result(finished, 0)))
    assert earlier_job_folder(sweep, "encoding-rope_seed-0_task-lag", job) == finished
    (finished / "results.json").write_text("{damaged")  # a damaged results.json is an unfinished run
    assert earlier_job_folder(sweep, "encoding-rope_seed-0_task-lag", job) == resumable


def test_a_report_orders_runs_by_the_job_number_their_folder_records(tmp_path):
    from poslab.runs.files import job_number

    job = tmp_path / "encoding-rope_seed-0"
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "hydra.yaml").write_text("hydra:\n  job:\n    name: train\n    num: 7\n")
    assert job_number(job) == 7
    assert job_number(tmp_path / "12_encoding-rope_seed-0") == 12  # an older sweep's folder: its name says
    assert job_number(tmp_path / "encoding-rope_seed-1") is None


# ---- (c) the reports count one config and one seed once ---------------------------------------------------------


def plant(folder: Path, seed: int, age: int, **changes) -> Path:
    """A finished grid job in ``folder`` whose results.json was written ``age`` seconds ago."""
    (folder / ".hydra").mkdir(parents=True)
    results = folder / "results.json"
    results.write_text(json.dumps({**grid_result(folder, seed), **changes}))
    stamp = 1_700_000_000 - age
    os.utime(results, (stamp, stamp))
    return folder


def test_two_runs_of_one_config_and_seed_count_once_and_the_duplicate_is_named(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    interrupted = plant(sweep / "0_seed-0", 0, age=100)  # the first launch's run
    rerun = plant(sweep / "seed-0", 0, age=10)  # the same job, trained again by a second launch: the newest
    other = plant(sweep / "seed-1", 1, age=50)

    found = collect_runs([sweep])
    assert sorted(run.path for run in found.counted) == [rerun, other]
    assert found.duplicates == [(interrupted, rerun)]
    note = next(line for line in found.notes() if "duplicate" in line)
    assert note.startswith("1 run(s) left out as duplicates") and f"{interrupted} (the same as {rerun})" in note

    from poslab.cli import main as poslab_main

    assert poslab_main(["report", "grid", str(sweep), "--output-dir", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    table = [line for line in out.splitlines() if line.startswith("| lag | rope |")]
    assert len(table) == 1 and table[0].startswith("| lag | rope | 2 | "), table  # seeds 0 and 1, not 0 twice
    assert str(interrupted) in out

    lines, ok = summary_lines(sweep)
    assert lines[0] == f"multirun {sweep}: 3 jobs, 2 success, 1 duplicate." and ok
    assert any(line.strip().startswith("duplicate") and str(interrupted) in line for line in lines[1:])


def test_a_successful_run_counts_over_a_newer_diverged_one_of_the_same_config_and_seed(tmp_path):
    sweep = tmp_path / "sweep"
    success = plant(sweep / "0_seed-0", 0, age=100)
    diverged = plant(sweep / "seed-0", 0, age=10, status="diverged")
    found = collect_runs([sweep])
    assert [run.path for run in found.counted] == [success] and not found.not_success
    assert found.duplicates == [(diverged, success)]


def test_runs_of_one_seed_with_other_settings_are_no_duplicates(tmp_path):
    sweep = tmp_path / "sweep"
    plant(sweep / "a", 0, age=10)
    other = grid_result(sweep / "b", 0)
    other["config"]["trainer"]["max_steps"] = 20  # another config: its own table row, not a second seed
    plant(sweep / "b", 0, age=20, config=other["config"])
    found = collect_runs([sweep])
    assert len(found.counted) == 2 and not found.duplicates


# ---- (d) a damaged results.json under ckpt_path=auto: an unfinished run ------------------------------------------

BASE = ["encoding=rope", *SMALL, "trainer.max_steps=4", "callbacks.checkpoint.every_n_train_steps=2"]


@pytest.mark.slow
def test_a_damaged_results_file_under_auto_resumes_with_every_resume_check(tmp_path, caplog):
    run_dir = tmp_path / "run"
    run(compose_config([*BASE, "ckpt_path=auto"], run_dir))
    (run_dir / "results.json").write_text("{damaged")
    with pytest.raises(ConfigError, match=r"model\.n_layers: 2 → 3"):  # a resume of another model: refused
        run(compose_config([*BASE, "ckpt_path=auto", "model.n_layers=3"], run_dir))
    assert (run_dir / "results.json").read_text() == "{damaged"  # nothing written

    caplog.clear()
    with caplog.at_level("WARNING", logger="poslab"):
        resumed = run(compose_config([*BASE, "ckpt_path=auto"], run_dir))
    said = [r.getMessage() for r in caplog.records if "runs it again as unfinished" in r.getMessage()]
    assert len(said) == 1 and "from its checkpoints/last.ckpt" in said[0] and "\n" not in said[0], said
    assert resumed["steps"] == 4 and json.loads((run_dir / "results.json").read_text())["status"] == "success"


def test_a_damaged_results_file_under_auto_without_a_checkpoint_trains_again_from_the_start(tmp_path, caplog):
    run_dir = tmp_path / "run"
    run(compose_config([*BASE, "ckpt_path=auto"], run_dir))
    (run_dir / "results.json").write_text("[1, 2, 3]")
    shutil.rmtree(run_dir / "checkpoints")
    with caplog.at_level("WARNING", logger="poslab"):
        again = run(compose_config([*BASE, "ckpt_path=auto"], run_dir))
    said = [r.getMessage() for r in caplog.records if "runs it again as unfinished" in r.getMessage()]
    assert len(said) == 1 and "from the start" in said[0], said
    assert again["steps"] == 4 and json.loads((run_dir / "results.json").read_text())["status"] == "success"


@pytest.mark.slow
def test_train_py_refuses_a_changed_model_over_a_damaged_results_file_in_one_sentence(tmp_path):
    run_dir = tmp_path / "run"
    run(compose_config([*BASE, "ckpt_path=auto"], run_dir))
    (run_dir / "results.json").write_text("{damaged")
    before = sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*"))
    result = run_train([*BASE, "ckpt_path=auto", "model.n_layers=3", f"hydra.run.dir={run_dir}"], tmp_path)
    assert result.returncode == 2, (result.stdout + result.stderr)[-3000:]
    assert "Traceback" not in result.stdout + result.stderr
    err = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(err) == 1 and "model.n_layers: 2 → 3" in err[0], result.stderr
    assert sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*")) == before  # nothing written


# ---- a job folder cut short: given back to train.py as it is; its older `~` name still found --------------------

#: overrides whose job folder name is cut short (over 80 characters)
LONG_JOB = ["task=lag", "encoding=rope", "seed=0", f"task.eval_lengths=[{','.join(['32'] * 20)}]"]


def older_name(overrides: list[str]) -> str:
    """The folder name poslab gave a job cut short before: 71 characters, ``~``, 8 hex digits of the whole's SHA-1."""
    import hashlib
    import re

    from poslab.runs.folders import override_dirname

    text = re.sub(r"[^\w.+-]+", "_", override_dirname(overrides)).strip("_")
    return text[:71] + "~" + hashlib.sha1(text.encode()).hexdigest()[:8]


def test_a_job_folder_cut_short_is_given_back_to_train_py_unquoted(tmp_path):
    """``parent=`` and ``ckpt_path=`` take a job folder as ``ls`` shows it: its cut mark is a character Hydra's
    override grammar takes unquoted (``~`` was refused: "takes '~' only quoted")."""
    from poslab.running.precheck import parse
    from poslab.runs.folders import job_folder_name

    name = job_folder_name(LONG_JOB)
    assert len(name) == 80 and name[:71] == older_name(LONG_JOB)[:71] and name[71:] == "+" + older_name(LONG_JOB)[72:]
    for line in (f"parent={tmp_path / name}", f"ckpt_path={tmp_path / name}/checkpoints/last.ckpt"):
        (parsed,) = parse([line])
        assert str(parsed.value()) == line.partition("=")[2]


def test_ckpt_path_auto_finds_a_job_finished_in_a_folder_of_its_older_name(tmp_path):
    """Running sweeps and committed runs have folders cut with ``~``: a job finished in one is found by its name alone
    (no recorded overrides needed), and of several folders of one job it counts as the job's own."""
    from poslab.runs.folders import RecordedJob, earlier_job_folder, existing_job_folder, folder_names, job_folder_name

    sweep = tmp_path / "sweep"
    name, older = job_folder_name(LONG_JOB), sweep / older_name(LONG_JOB)
    assert folder_names(name) == (name, older.name) and folder_names("encoding-rope_seed-0") == (
        "encoding-rope_seed-0",
    )
    assert existing_job_folder(sweep, LONG_JOB) is None
    older.mkdir(parents=True)
    assert existing_job_folder(sweep, LONG_JOB) == older
    (older / "results.json").write_text(json.dumps(grid_result(older, 0)))
    assert earlier_job_folder(sweep, name, RecordedJob.of(LONG_JOB, None)) == older
    (older / "results.json").unlink()
    config = record_job(older, LONG_JOB, tmp_path)
    record_job(sweep / "0_other_spelling", LONG_JOB, tmp_path)
    os.utime(older / ".hydra" / "config.yaml", ns=(1, 1))  # the older of the two: preferred only as the job's own
    assert earlier_job_folder(sweep, name, RecordedJob.of(LONG_JOB, config)) == older
