"""experiment=lm_zoo: its multirun is every encoding x prose and Python x 3 seeds (126 jobs, seed first), each job
composes at the chosen CPU size in bf16, resumable, evaluated to 16x, and passes train.py's up-front checks; the
W&B sweep is the same grid; one job runs end to end on a tiny local corpus."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from poslab.config.settings import lm_eval_lengths
from poslab.running.precheck import check_command_line, job_overrides
from tests.conftest import CONF, ROOT, GlobalHydra, compose, initialize_config_dir, run_train

ENCODINGS = sorted(p.stem for p in (CONF / "encoding").glob("*.yaml"))
CORPORA = ["openwebtext", "python_code"]  # prose: WebText since issue 37 (item 4)


def experiment(name: str, overrides: list[str] = ()):
    """``experiment=name`` composed with Hydra's own settings (its sweeper's parameters)."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="train", overrides=[f"experiment={name}", *overrides], return_hydra_config=True)


def lm_zoo(overrides: list[str] = ()):
    return experiment("lm_zoo", overrides)


def tiny_job(name: str, tmp_path, *overrides: str) -> dict:
    """One job of ``experiment=name`` trained on a tiny local corpus (one 16x window held out), its results."""
    write_corpus(tmp_path / "corpus")
    run_dir = tmp_path / "run"
    corpus = ["corpus=local", f"corpus.path={tmp_path / 'corpus'}", "task.val_windows=16", "task.eval_batch_size=4"]
    done = run_train([f"experiment={name}", *corpus, *overrides, f"hydra.run.dir={run_dir}"], tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()
    return json.loads((run_dir / "results.json").read_text())


def test_the_multirun_is_every_encoding_x_2_corpora_x_5_seeds_seed_first_and_the_wandb_sweep_is_the_same_grid():
    params = {key: str(value).split(",") for key, value in lm_zoo().hydra.sweeper.params.items()}
    assert list(params) == ["seed", "corpus", "encoding"]  # seed first: a stopped sweep holds whole seeds
    assert params["seed"] == ["0", "1", "2", "3", "4"] and params["corpus"] == CORPORA  # five seeds for a ranking
    assert sorted(params["encoding"]) == ENCODINGS  # a new encoding's YAML must join the zoo
    jobs = job_overrides(["experiment=lm_zoo"], multirun=True)
    per_seed = len(CORPORA) * len(ENCODINGS)
    assert len(jobs) == 5 * per_seed and len({tuple(job) for job in jobs}) == 5 * per_seed
    assert all("seed=0" in job for job in jobs[:per_seed]) and "seed=1" in jobs[per_seed]  # whole seeds in turn
    sweep = yaml.safe_load((ROOT / "sweeps" / "lm_zoo.yaml").read_text())["parameters"]
    assert sweep["experiment"]["value"] == "lm_zoo"
    for key in ("seed", "corpus", "encoding"):
        assert [str(v) for v in sweep[key]["values"]] == params[key]


@pytest.mark.parametrize("corpus", CORPORA)
@pytest.mark.parametrize("encoding", ["rope", "alibi", "cope", "learned", "hrope_axial"])
def test_a_job_composes_at_the_cpu_size_in_bf16_resumable_and_evaluated_to_16x(corpus, encoding):
    cfg = lm_zoo([f"corpus={corpus}", f"encoding={encoding}"])
    assert cfg.task.name == "lm" and cfg.corpus.name == corpus and cfg.corpus.tokenizer == "bytes"
    assert cfg.trainer.precision == "bf16-mixed"  # trainer/cpu.yaml's name for the CPU's bf16 path
    assert cfg.ckpt_path == "auto" and cfg.threads == 1 and cfg.callbacks.checkpoint.every_n_train_steps > 0
    assert (cfg.model.n_layers, cfg.model.n_heads, cfg.model.d_model) == (4, 4, 128)  # not the corpus default
    assert cfg.task.eval_lengths is None
    assert lm_eval_lengths(cfg.task) == [128 * m for m in (1, 2, 4, 8, 16)]
    assert cfg.hydra.sweep.dir.endswith("multirun/lm_zoo")
    assert "joblib" in cfg.hydra.launcher._target_.lower()  # local_parallel
    assert cfg.name == f"lm_{corpus}_{encoding}"


@pytest.mark.slow
def test_train_py_checks_accept_the_zoo_jobs(tmp_path, monkeypatch):
    """The command line's checks (every job composed, settings, run directories) pass for a spread of the jobs;
    the sweeper's encodings and seeds are narrowed on the command line, which wins over the config's."""
    monkeypatch.setenv("POSLAB_LOG_DIR", str(tmp_path / "logs"))
    monkeypatch.setenv("POSLAB_DATA_DIR", str(tmp_path / "data"))
    check_command_line(["-m", "experiment=lm_zoo", "encoding=rope,alibi,cope,forget_gate", "seed=0"])


def write_corpus(directory, n_documents: int = 40, seed: int = 0) -> None:
    """Text documents of seeded words: enough held-out bytes (5%) for one 16x window of the zoo's context."""
    rng = np.random.default_rng(seed)
    words = ["position", "attention", "the", "of", "model", "length", "rotary", "bias", "and", "a"]
    directory.mkdir()
    for i in range(n_documents):
        text = " ".join(rng.choice(words, size=900)) + "\n"
        (directory / f"doc{i:02d}.txt").write_text(text)


@pytest.mark.slow
def test_one_zoo_job_runs_tiny_on_a_local_corpus(tmp_path):
    """The experiment's settings end to end (bf16, checkpoints, ckpt_path=auto, 16x evaluation), two steps."""
    passkey = ["task.passkey.trials=1", "task.passkey.depths=[0.5]"]  # its grid shrunk: 7 keys, not 84
    results = tiny_job("lm_zoo", tmp_path, "encoding=alibi", "trainer.max_steps=2", *passkey)
    assert results["status"] == "success" and results["steps"] == 2
    figures = results["figures"]
    assert {str(128 * m) for m in (1, 2, 4, 8, 16)} <= set(figures)
    assert all(np.isfinite(figures[str(128 * m)]["bpb"]) for m in (1, 2, 4, 8, 16))
    assert results["config"]["trainer"]["precision"] == "bf16-mixed"


def test_the_passkey_arm_changes_only_its_named_deviations_from_the_lm_zoo():
    """experiment=lm_passkey: every encoding on prose, seeds 0 and 1, the synthetic zoo's model family at the lm_zoo's
    width, a copying warm-up then one window in ten with a pair, twice the steps; all else the lm_zoo's."""
    arm, zoo = experiment("lm_passkey", ["encoding=rope"]), lm_zoo(["encoding=rope"])
    params = {key: str(value).split(",") for key, value in arm.hydra.sweeper.params.items()}
    assert params["seed"] == ["0", "1"] and params["corpus"] == ["wikitext2"]
    assert sorted(params["encoding"]) == ENCODINGS
    assert (arm.model.n_layers, arm.model.n_heads, arm.model.d_model) == (4, 4, 128)
    assert (arm.model.norm, arm.model.mlp, arm.model.bias) == ("layernorm", "gelu", True)
    assert (zoo.model.norm, zoo.model.mlp, zoo.model.bias) == ("rmsnorm", "swiglu", False)
    assert arm.task.passkey.warmup_steps == 960 and arm.task.passkey.train_fraction == 0.1
    assert arm.trainer.max_steps == 2 * zoo.trainer.max_steps and arm.task.passkey.at_validation
    for same in ("context_length", "batch_size", "eval_batch_size", "val_windows"):
        assert arm.task[same] == zoo.task[same], same
    for key in zoo.optimizer:  # the schedule's length follows the steps
        assert arm.optimizer[key] == zoo.optimizer[key] or key == "total_steps", key
    assert arm.trainer.precision == zoo.trainer.precision
    assert arm.hydra.sweep.dir.endswith("multirun/lm_passkey")


def test_train_py_checks_accept_the_passkey_arm(tmp_path, monkeypatch):
    monkeypatch.setenv("POSLAB_LOG_DIR", str(tmp_path / "logs"))
    monkeypatch.setenv("POSLAB_DATA_DIR", str(tmp_path / "data"))
    check_command_line(["-m", "experiment=lm_passkey", "encoding=rope,cope,hrope_axial"])


@pytest.mark.slow
def test_one_passkey_arm_job_runs_tiny_with_its_warmup_on_a_local_corpus(tmp_path):
    """The arm's own settings end to end (its model, the warm-up into train_fraction, passkey at validation), four
    steps: two of warm-up, two after."""
    steps = ["trainer.max_steps=4", "task.passkey.warmup_steps=2", "task.val_every_n_steps=2", "task.passkey.trials=1"]
    steps += ["task.passkey.depths=[0.5]", "task.eval_lengths=[128,256]"]  # the grid and the lengths shrunk
    results = tiny_job("lm_passkey", tmp_path, "encoding=rope", *steps)
    assert results["status"] == "success" and results["steps"] == 4
    assert [entry["step"] for entry in results["passkey_by_step"]] == [2, 4]
    assert results["passkey"]["settings"]["warmup_steps"] == 2
