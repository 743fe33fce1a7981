"""Sizes that cannot run are refused before anything is allocated (issue 24, item 5): a training step or the
evaluation at the longest length whose memory estimate (``poslab.running.memory``) exceeds what the machine has free
stops
``train.py`` with one sentence giving the estimate, the limit and what to lower, exit status 2, nothing written.
The in-process tests set the machine's free memory themselves, so they do not depend on the machine they run on."""

from __future__ import annotations

import pytest

from poslab.errors import ConfigError
from poslab.running.compose import compose_config
from tests.conftest import run_train

GB = 10**9
SYNTHETIC = ["task.train_length=1024", "task.eval_lengths=[1024]", "task.batch_size=32", "task.eval_size=16"]


def parts(overrides: list[str]) -> tuple[dict[str, int], dict[str, int]]:
    """The training step's and the evaluation's parts of the estimate (bytes)."""
    from poslab.running.memory import estimates

    train, evaluation = estimates(compose_config(overrides))
    return train.parts, evaluation.parts


def free_memory(monkeypatch, size: int) -> None:
    """This machine has ``size`` bytes free, and trains on the CPU."""
    from poslab.running import memory

    monkeypatch.setattr(memory, "host_memory", lambda: memory.Limit(size, "this machine (a test's figure)"))


@pytest.mark.slow
def test_train_py_refuses_a_size_no_machine_has_in_one_sentence_and_writes_nothing(tmp_path):
    """A training batch of ten million sequences (terabytes of activations): refused before Hydra makes anything,
    with the estimate, the memory free and what to lower; before, it started allocating."""
    before = set(tmp_path.iterdir())
    done = run_train(["task=lag", "task.batch_size=10000000"], tmp_path, timeout=120)
    assert done.returncode == 2, done.stderr[-3000:]
    (message,) = done.stderr.strip().splitlines()
    assert message.startswith("poslab: configuration error: task.train_length=32 with task.batch_size=10000000 ")
    assert "needs at least" in message and "TB of memory for a training step (activations" in message
    assert "free on this machine" in message or "free on this container" in message
    assert message.endswith("nothing was written: lower task.batch_size or task.train_length."), message
    assert set(tmp_path.iterdir()) == before


def test_the_estimate_counts_attention_scores_where_the_path_materialises_them():
    """explicit keeps batch x heads x length^2 weights per layer; a bias-only encoding one heads x length^2 mask;
    the fused path without a mask nothing quadratic; everything else is the same."""
    fused, _ = parts(["encoding=rope", *SYNTHETIC])
    explicit, explicit_eval = parts(["encoding=rope", "model.attention=explicit", *SYNTHETIC])
    bias, _ = parts(["encoding=alibi", *SYNTHETIC])
    term, _ = parts(["encoding=forget_gate", *SYNTHETIC])
    scores = 32 * 1 * 1024**2 * 4  # batch x heads x length^2, fp32
    assert fused["attention scores"] == 0 and fused["activations"] == explicit["activations"]
    assert explicit["attention scores"] == (2 + 1) * scores  # one kept per layer (2), one being computed
    assert explicit_eval["attention scores"] == 16 * 1 * 1024**2 * 4  # evaluation: eval_size 16, one at a time
    assert bias["attention scores"] == 1 * 1024**2 * 4
    assert term["attention scores"] >= 2 * 2 * scores


def test_the_estimate_grows_with_batch_length_and_width_as_it_says():
    small, _ = parts(SYNTHETIC)
    longer, _ = parts(["task.train_length=2048", "task.eval_lengths=[2048]", "task.batch_size=32", "task.eval_size=16"])
    wider, _ = parts([*SYNTHETIC, "model.d_model=128"])
    assert longer["activations"] == 2 * small["activations"]
    assert wider["activations"] > small["activations"] and wider["parameters and AdamW"] > small["parameters and AdamW"]
    # 12 x d_model + 2 x the MLP width per token and layer, fp32: 32 x 1024 tokens, 2 layers of 64 (MLP 256)
    assert small["activations"] == 32 * 1024 * 2 * (12 * 64 + 2 * 256) * 4
    mixed, _ = parts([*SYNTHETIC, "trainer.precision=bf16-mixed"])
    assert mixed["activations"] == small["activations"] // 2


def test_a_size_that_does_not_fit_is_refused_with_the_estimate_the_limit_and_what_to_lower(monkeypatch):
    from poslab.running.memory import check_memory

    free_memory(monkeypatch, 1 * GB)
    cfg = compose_config(["task.train_length=4096", "task.eval_lengths=[4096]", "model.attention=explicit"])
    with pytest.raises(ConfigError) as refused:
        check_memory([cfg])
    message = str(refused.value)
    assert message.startswith("task.train_length=4096 with task.batch_size=64 needs at least ")
    assert "attention scores" in message and "more than the 1.0 GB free on this machine (a test's figure)" in message
    assert message.endswith("(or use model.attention=sdpa: explicit materialises every layer's attention weights).")
    check_memory([compose_config(["task=lag"])])  # the default sizes fit in 1 GB


def test_evaluation_at_the_longest_length_is_checked_too(monkeypatch):
    from poslab.running.memory import check_memory

    free_memory(monkeypatch, 2 * GB)
    cfg = compose_config(["task.train_length=32", "task.eval_lengths=[32,65536]"])
    with pytest.raises(ConfigError, match=r"^task.eval_lengths=\[32, 65536\] with task.eval_batch_size=256 needs at "):
        check_memory([cfg])
    with pytest.raises(ConfigError, match="for evaluation at length 65536 .* lower task.eval_batch_size or the"):
        check_memory([cfg])


def test_a_language_model_context_is_checked_before_the_corpus_is_read(monkeypatch, tmp_path):
    from poslab.running.memory import check_memory

    free_memory(monkeypatch, 1 * GB)
    overrides = ["corpus=local", f"corpus.path={tmp_path}", "task.context_length=100000"]
    with pytest.raises(ConfigError, match=r"^task.context_length=100000 with task.batch_size=\d+ needs at least .* "):
        check_memory([compose_config(overrides)])


def test_processes_that_run_at_once_share_the_memory(monkeypatch):
    """A local multirun's parallel jobs (POSLAB_JOBS) and DDP's CPU processes each need their own share."""
    from poslab.running.memory import check_memory, estimates
    from poslab.running.precheck import concurrent_jobs

    cfg = compose_config(SYNTHETIC)
    need = max(e.total for e in estimates(cfg))
    free_memory(monkeypatch, int(2.5 * need))
    check_memory([cfg], concurrent_jobs=2)
    with pytest.raises(ConfigError, match="each of 3 processes running at once may have of .* run fewer processes"):
        check_memory([cfg], concurrent_jobs=3)
    monkeypatch.setenv("POSLAB_JOBS", "3")
    assert concurrent_jobs(["hydra/launcher=local_parallel", "seed=0,1,2,3,4"], 5, multirun=True) == 3
    assert concurrent_jobs(["seed=0,1,2,3,4"], 5, multirun=True) == 1  # Hydra's basic launcher: one at a time
    assert concurrent_jobs(["task=lag"], 1, multirun=False) == 1


def test_the_memory_free_is_read_from_meminfo_and_a_cgroup_limit(tmp_path):
    from poslab.running.memory import cgroup_room, meminfo_available

    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24683584 kB\nMemFree:        1000 kB\nMemAvailable:   2000000 kB\n")
    assert meminfo_available(meminfo) == 2000000 * 1024
    assert meminfo_available(tmp_path / "missing") is None
    (tmp_path / "memory.max").write_text("max\n")
    (tmp_path / "memory.current").write_text("100\n")
    assert cgroup_room(tmp_path) is None  # no limit
    (tmp_path / "memory.max").write_text("1000000\n")
    assert cgroup_room(tmp_path) == 1000000 - 100
