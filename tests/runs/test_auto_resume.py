"""``ckpt_path=auto``: a multirun given again trains only what is missing. A job with results.json is skipped,
one with a last checkpoint resumes from it, one that failed runs again; job folders named by their overrides
alone (with or without ``ckpt_path=auto``) keep their names when the sweep's lists grow."""

from __future__ import annotations

import json

import pytest
import torch

from poslab.running.training import run
from poslab.runs.folders import job_folder_name
from tests.conftest import compose_config, run_train

SMALL = ["debug=small", "threads=1", "~logger", "callbacks.progress_bar.refresh_rate=0"]


def test_job_folders_are_their_overrides_without_the_job_number():
    assert job_folder_name(["seed=1", "encoding=rope", "ckpt_path=auto"]) == "encoding-rope_seed-1"
    assert job_folder_name(["seed=1", "encoding=rope"]) == "encoding-rope_seed-1"  # the same without auto
    assert job_folder_name(["ckpt_path=auto"]) == job_folder_name([]) == "job"


def test_a_finished_run_is_skipped_and_nothing_is_written(tmp_path):
    overrides = ["encoding=rope", *SMALL, "trainer.max_steps=4", "ckpt_path=auto"]
    first = run(compose_config(overrides, tmp_path))
    results = tmp_path / "results.json"
    written = results.read_bytes()
    model = (tmp_path / "model.pt").stat().st_mtime_ns
    # the same command again, even with a setting that would otherwise be refused as another model
    again = run(compose_config([*overrides, "model.d_model=64"], tmp_path))
    assert again == json.loads(written) and again["figures"] == first["figures"]
    assert results.read_bytes() == written and (tmp_path / "model.pt").stat().st_mtime_ns == model


@pytest.mark.slow
def test_an_unfinished_run_resumes_from_its_last_checkpoint_and_ends_as_an_uninterrupted_one(tmp_path):
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    base = ["encoding=rope", *SMALL, "callbacks.checkpoint.every_n_train_steps=3", "ckpt_path=auto"]
    run(compose_config([*base, "trainer.max_steps=6"], whole))
    run(compose_config([*base, "trainer.max_steps=3"], cut))
    (cut / "results.json").unlink()  # as if killed after its checkpoint at step 3
    (cut / "model.pt").unlink()
    resumed = run(compose_config([*base, "trainer.max_steps=6"], cut))
    assert resumed["steps"] == 6
    a, b = (torch.load(d / "model.pt", weights_only=True)["state_dict"] for d in (whole, cut))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_a_multirun_given_again_skips_finished_jobs_and_reruns_the_failed_one(tmp_path):
    import shutil

    sweep = tmp_path / "sweep"
    args = ["-m", "seed=0,1", *SMALL, "trainer.max_steps=2", f"hydra.sweep.dir={sweep}", "ckpt_path=auto"]
    first = run_train(args, tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    (job0,) = sweep.glob("*seed-0*")
    (job1,) = sweep.glob("*seed-1*")
    assert not job0.name[0].isdigit()  # no job number in the folder's name
    done = (job0 / "results.json").read_bytes()
    # job 1 as a job that failed: its failure recorded, no results, no checkpoint
    for name in ("results.json", "model.pt"):
        (job1 / name).unlink()
    shutil.rmtree(job1 / "checkpoints")
    (job1 / "failed.json").write_text(json.dumps({"error": "RuntimeError: out of memory"}))

    again = run_train(args, tmp_path)  # the same command again, into the same sweep directory
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"multirun {sweep}: 2 jobs, 2 success." in again.stdout
    assert "1 of 2 jobs finished earlier (ckpt_path=auto skips them): checking the other 1" in again.stdout
    assert (job0 / "results.json").read_bytes() == done  # skipped: not trained again
    assert "finished earlier, skipped" in (job0 / "train.log").read_text()
    assert (job1 / "results.json").is_file() and not (job1 / "failed.json").exists()
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == sorted([job0.name, job1.name])
