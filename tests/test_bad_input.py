"""Bad input to train.py: an unknown trainer, launcher or logger, more devices than the machine has, a
ckpt_path that does not exist or is not a checkpoint. Each gives one clear message (the bad value and what
is allowed) and a non-zero exit, and leaves what the run directory held before as it was."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from poslab.running.compose import available_devices
from tests.conftest import run_train

FAST = ["debug=small", "~callbacks.progress_bar", "threads=1"]
CORES = available_devices("cpu")


def prepare_run_dir(run_dir: Path) -> dict[Path, bytes]:
    """A run directory with earlier contents: an earlier run's results and checkpoint, and a note."""
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "notes.txt").write_text("written before; must survive\n")
    (run_dir / "results.json").write_text('{"figures": {"32": {"accuracy": 0.5}}}\n')
    (run_dir / "checkpoints" / "step000010.ckpt").write_bytes(b"an earlier checkpoint")
    return snapshot(run_dir)


def snapshot(run_dir: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file() and ".hydra" not in p.parts}


def bad_files(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "text.ckpt").write_text("not a checkpoint\n")
    torch.save({"state_dict": {"w": torch.zeros(2)}, "config": {}}, tmp_path / "model.pt")  # weights only
    torch.save({"x": torch.nn.Linear(2, 2)}, tmp_path / "pickled.ckpt")  # needs weights_only=False
    return {"text": tmp_path / "text.ckpt", "model": tmp_path / "model.pt", "pickled": tmp_path / "pickled.ckpt"}


CASES = [
    # unknown group options: the value named, the options listed (Hydra's own groups: Hydra's words, one line)
    (["trainer=nosuch"], ["trainer=nosuch: trainer has no option 'nosuch'", "allowed: cpu, ddp, ddp_cpu, gpu"]),
    (["hydra/launcher=nosuch"], ["Could not find 'hydra/launcher/nosuch'", "local_parallel", "slurm"]),
    (["logger=nosuch"], ["logger=nosuch: logger has no option 'nosuch'", "csv", "wandb"]),
    # more devices than there are
    (["trainer.devices=512"], ["trainer.devices=512 asks for 512 CPU processes", f"allowed: 1 to {CORES}"]),
    (["trainer=ddp_cpu", "trainer.devices=512"], ["trainer.devices=512 asks for 512 CPU processes"]),
    # ckpt_path
    (["ckpt_path=last"], ["ckpt_path=last resumes from this run directory's checkpoints/last.ckpt", "does not exist"]),
    (["ckpt_path={tmp}/missing.ckpt"], ["ckpt_path={tmp}/missing.ckpt does not exist", "allowed: last"]),
    (["ckpt_path={tmp}/empty_dir"], ["is a directory without a checkpoint"]),
    (
        ["ckpt_path={text}"],
        ["is not a checkpoint (not a torch.save file)", "allowed: a .ckpt file written by train.py"],
    ),
    (["ckpt_path={model}"], ["is not a training checkpoint (model.pt holds the trained weights only)"]),
    (["ckpt_path={pickled}"], ["cannot be loaded as a checkpoint with weights_only=True"]),
]


@pytest.mark.slow
@pytest.mark.parametrize(("args", "fragments"), CASES, ids=[" ".join(a) for a, _ in CASES])
def test_bad_input_gives_one_clear_message_and_leaves_the_run_directory_intact(args, fragments, tmp_path):
    files = bad_files(tmp_path)
    (tmp_path / "empty_dir").mkdir()
    values = {"tmp": tmp_path, **files}
    run_dir = tmp_path / "run"
    before = prepare_run_dir(run_dir)

    result = run_train([*(a.format(**values) for a in args), *FAST, f"hydra.run.dir={run_dir}"], tmp_path)

    assert result.returncode != 0
    for fragment in fragments:
        assert fragment.format(**values) in result.stderr, result.stderr[-2000:]
    assert "Traceback" not in result.stderr  # one message, not a stack trace
    after = snapshot(run_dir)
    assert {p: after.get(p) for p in before} == before  # every earlier file as it was
    assert set(after) - set(before) <= {run_dir / "train.log"}  # nothing new but Hydra's job log
    assert not (tmp_path / "logs").exists()


@pytest.mark.slow
def test_a_corpus_group_weight_of_zero_gives_one_message_and_leaves_the_run_directory_intact(tmp_path):
    """0 silently never trained the group, and a negative weight failed inside torch.multinomial at the first batch:
    refused when the datamodule is built, before any data is read or prepared."""
    run_dir, cache = tmp_path / "run", tmp_path / "cache"
    before = prepare_run_dir(run_dir)
    args = ["corpus=python_code", "corpus.groups.main.weight=0", "debug=fast", f"paths.cache_dir={cache}"]
    result = run_train([*args, "~callbacks.progress_bar", "threads=1", f"hydra.run.dir={run_dir}"], tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "corpus 'python_code', source group 'main': weight=0; a group's weight is its share" in result.stderr
    assert "must be a number above 0" in result.stderr and "Traceback" not in result.stderr
    after = snapshot(run_dir)
    assert {p: after.get(p) for p in before} == before and set(after) - set(before) <= {run_dir / "train.log"}
    assert not cache.exists()


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a machine without GPUs")
def test_gpu_trainer_on_a_machine_without_gpus_says_so(tmp_path):
    result = run_train(["trainer=ddp", *FAST, f"hydra.run.dir={tmp_path / 'run'}"], tmp_path)
    assert result.returncode != 0
    assert "trainer.devices=2 asks for 2 GPUs (accelerator=gpu), but this machine has none" in result.stderr
    assert "trainer=cpu or trainer=ddp_cpu" in result.stderr and "Traceback" not in result.stderr


def test_devices_check_counts_cores_of_this_process(compose_cfg):
    from poslab.errors import ConfigError
    from poslab.running.checks import check_config

    check_config(compose_cfg(f"trainer.devices={CORES}"))
    with pytest.raises(ConfigError, match=f"allowed: 1 to {CORES}"):
        check_config(compose_cfg(f"trainer.devices={CORES + 1}"))
    with pytest.raises(ConfigError, match="must be at least 1"):
        check_config(compose_cfg("trainer.devices=0"))
    assert len(os.sched_getaffinity(0)) == CORES


@pytest.mark.parametrize("key", ["batch_size", "eval_size"])
def test_ddp_needs_batch_and_evaluation_sizes_divisible_by_the_processes(key, compose_cfg):
    from poslab.errors import ConfigError
    from poslab.running.checks import check_config

    if CORES < 2:
        pytest.skip("trainer=ddp_cpu needs 2 cores")
    with pytest.raises(ConfigError, match=f"task.{key}=15 is not divisible by the 2 processes"):
        check_config(compose_cfg("trainer=ddp_cpu", f"task.{key}=15"))
