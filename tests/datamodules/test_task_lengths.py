"""Lengths of the synthetic tasks: training lengths drawn per batch (``task.train_lengths``), counting programs
of a fixed length padded with filler (``task.program_length``), and the tasks' trivial baselines."""

from __future__ import annotations

import json
import random

import pytest
import torch
from lightning.pytorch.callbacks import Callback

from poslab.config.settings import check_settings, max_length
from poslab.datamodules.synthetic import SyntheticDataModule, TrainingBatches
from poslab.datamodules.tasks import IGNORE, make_task
from poslab.errors import ConfigError
from poslab.running.builders import build_datamodule, build_module
from poslab.running.training import run
from tests.conftest import compose_config, fit_quietly

FAST = ["debug=small", "trainer.max_steps=3", "~logger", "~callbacks"]


# ---- train_lengths ----------------------------------------------------------------------------------------------
def test_batch_lengths_vary_within_the_range_and_follow_seed_and_index():
    task = make_task("lag", 16)
    batches = TrainingBatches(task, 8, 32, seed=3, lengths=(8, 32))
    drawn = [b for _, b in zip(range(40), batches)]
    lengths = [tokens.shape[1] for tokens, _ in drawn]
    assert all(8 <= n <= 32 for n in lengths) and len(set(lengths)) > 10
    assert lengths == [batches.batch_length(i) for i in range(40)]
    again = TrainingBatches(task, 8, 32, seed=3, lengths=(8, 32))
    again.start = 17  # a resume at step 17: the same batch, of the same length
    tokens, targets = next(iter(again))
    assert torch.equal(tokens, drawn[17][0]) and torch.equal(targets, drawn[17][1])
    other = TrainingBatches(task, 8, 32, seed=4, lengths=(8, 32))
    assert [other.batch_length(i) for i in range(40)] != lengths


def test_ranks_slice_one_global_batch_of_one_length():
    task = make_task("flip_flop", 6)
    whole = next(iter(TrainingBatches(task, 8, 64, seed=1, lengths=(8, 64))))[0]
    halves = []
    for rank in range(2):
        part = TrainingBatches(task, 8, 64, seed=1, lengths=(8, 64))
        part.rank, part.world_size = rank, 2
        halves.append(next(iter(part))[0])
    assert torch.equal(torch.cat(halves), whole)


def test_a_range_of_one_length_makes_the_fixed_length_batches():
    task = make_task("seen", 96)
    fixed = next(iter(TrainingBatches(task, 4, 32, seed=0)))[0]
    assert torch.equal(next(iter(TrainingBatches(task, 4, 32, seed=0, lengths=(32, 32))))[0], fixed)


def test_the_datamodule_reports_the_range_and_trains_up_to_its_high_end():
    data = SyntheticDataModule("lag", 16, 32, [32, 64], train_lengths=[8, 32])
    assert data.train_length == 32 and data.train_lengths == (8, 32) and data.max_length == 64
    assert data.describe() == {"train_length": 32, "train_lengths": [8, 32], "eval_lengths": [32, 64]}
    assert data.paragraph_density == 1 / 20  # one paragraph per sequence, of mean length (8 + 32) / 2
    fixed = SyntheticDataModule("lag", 16, 32, [32, 64])
    assert fixed.describe()["train_lengths"] is None and fixed.paragraph_density == 1 / 32
    assert max_length({"train_length": 32, "train_lengths": [8, 32], "eval_lengths": [16]}) == 32


@pytest.mark.parametrize(
    ("train_lengths", "fragment"),
    [
        ([32], "task.train_lengths=[32] is not allowed; task.train_lengths takes null"),
        ([8, 16, 32], "task.train_lengths=[8, 16, 32] is not allowed; task.train_lengths takes null"),
        ([8.5, 32], "task.train_lengths=[8.5, 32] is not allowed"),
        ("8,32", "task.train_lengths='8,32' is not allowed"),
        ([32, 8], "task.train_lengths=[32, 8] has its low end 32 above its high end 8"),
        ([8, 64], "task.train_lengths=[8, 64] ends at 64 but task.train_length=32; allowed: task.train_length equal"),
        ([2, 32], "length 2 is too short for task 'lag', whose shortest sequence is 4"),
    ],
)
def test_bad_train_lengths_are_refused_naming_them(train_lengths, fragment):
    with pytest.raises(ConfigError) as info:
        SyntheticDataModule("lag", 16, 32, [32, 64], train_lengths=train_lengths)
    assert fragment in str(info.value)


def test_the_typed_settings_refuse_a_bad_train_lengths_before_anything_runs(tmp_path):
    with pytest.raises(ConfigError, match=r"task.train_lengths=\[8, 'x'\] is not allowed"):
        check_settings(compose_config(["task.train_lengths=[8,x]"], tmp_path))
    with pytest.raises(ConfigError, match="task.program_length=4 is not allowed"):
        check_settings(compose_config(["task=counting", "task.program_length=4"], tmp_path))
    check_settings(compose_config(["task=counting", "task.program_length=32", "task.train_lengths=[8,32]"], tmp_path))


class BatchLengths(Callback):
    """The length of every training batch Lightning hands the module."""

    def __init__(self) -> None:
        self.lengths: list[int] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.lengths.append(int(batch[0].shape[1]))


def test_training_sees_the_drawn_lengths(tmp_path):
    cfg = compose_config(["encoding=rope", *FAST, "task.train_lengths=[8,32]"], tmp_path)
    datamodule = build_datamodule(cfg)
    seen = BatchLengths()
    fit_quietly(build_module(cfg, datamodule), datamodule, steps=6, callbacks=[seen])
    assert seen.lengths == [datamodule.train_batches.batch_length(i) for i in range(6)]
    assert len(set(seen.lengths)) > 1


def test_a_tiny_run_with_train_lengths_writes_its_results(tmp_path):
    cfg = compose_config(["encoding=rope", *FAST, "task.train_lengths=[8,32]"], tmp_path)
    run(cfg)
    written = json.loads((tmp_path / "results.json").read_text())
    assert written["train_lengths"] == [8, 32] and written["train_length"] == 32 and written["steps"] == 3
    assert set(written["figures"]) == {"32", "64", "128"}
    assert "accuracy_past_train" in written["figures"]["64"]  # past 32, the longest length trained on


# ---- counting's program_length ----------------------------------------------------------------------------------
def interpret(tokens: list[int]) -> int:
    """A brute-force run of one counting sequence: statement by statement, the printed variable's value."""
    task = make_task("counting", 21)
    *program, print_token, printed = tokens
    assert print_token == task.PRINT
    values: dict[int, int] = {}
    at = 0
    while at < len(program):
        if program[at] == task.PASS:
            at += 1
        elif program[at + 1] == task.EQUALS:
            assert program[at + 2 : at + 4] == [0, task.SEMICOLON], f"a broken set at {at}: {program}"
            values[program[at]], at = 0, at + 4
        else:
            assert program[at + 1] == task.INCREMENT, f"a broken statement at {at}: {program}"
            values[program[at]] += 1
            at += 2
    return values[printed]


def answers(task, length: int, seed: int, size: int = 2000) -> torch.Tensor:
    """The distribution of ``size`` answers at ``length``."""
    _, targets = task.sample(size, length, torch.Generator().manual_seed(seed))
    return torch.bincount(targets[:, -1], minlength=task.num_classes).float() / size


@pytest.mark.slow
def test_program_length_keeps_the_answers_distribution_across_lengths():
    padded, plain = make_task("counting", 21, program_length=32), make_task("counting", 21)
    distance = 0.5 * (answers(padded, 32, seed=1) - answers(padded, 256, seed=2)).abs().sum()
    assert distance < 0.05
    assert 0.5 * (answers(plain, 32, seed=1) - answers(plain, 256, seed=2)).abs().sum() > 0.3


@pytest.mark.parametrize("length", [32, 33, 64, 256])
def test_filler_only_adds_pass_between_whole_statements(length):
    task = make_task("counting", 21, program_length=32)
    for seed in range(50):
        sequence = task.program(length, random.Random(seed))
        assert len(sequence) == length
        interpret(sequence)  # every statement whole
        unpadded = task.program(32, random.Random(seed))
        assert [t for t in sequence if t != task.PASS] == [t for t in unpadded if t != task.PASS]


@pytest.mark.parametrize(("program_length", "length"), [(None, 32), (None, 128), (16, 16), (16, 100), (32, 256)])
def test_counting_targets_follow_an_interpreter(program_length, length):
    task = make_task("counting", 21, program_length=program_length)
    tokens, targets = task.sample(64, length, torch.Generator().manual_seed(length))
    assert targets[:, -1].tolist() == [interpret(row) for row in tokens.tolist()]
    assert (targets[:, :-1] == IGNORE).all()


@pytest.mark.parametrize(
    ("program_length", "lengths", "fragment"),
    [
        (32, [16, 64], "length 16 is shorter than task.program_length=32"),
        (4, [32], "task.program_length=4 is not allowed; task.program_length takes null"),
        (True, [32], "task.program_length=True is not allowed"),
    ],
)
def test_bad_program_lengths_are_refused_naming_them(program_length, lengths, fragment):
    with pytest.raises(ConfigError) as info:
        SyntheticDataModule("counting", 21, 32, lengths, program_length=program_length)
    assert fragment in str(info.value)


def test_program_length_composes_from_the_configs(tmp_path):
    cfg = compose_config(["task=counting", "task.program_length=32", "task.eval_size=8"], tmp_path)
    datamodule = build_datamodule(cfg)
    datamodule.setup()
    assert datamodule.task.program_length == 32 and [s.tokens.shape[1] for s in datamodule.eval_sets] == [32, 64, 128]


# ---- baselines --------------------------------------------------------------------------------------------------
def test_flip_flop_last_bit_repeats_the_bit_before_each_read():
    task = make_task("flip_flop", 6)
    w, i, r = task.WRITE, task.IGNORE_OP, task.READ
    tokens = torch.tensor([[w, 1, i, 0, r, 1, r, 1]])
    targets = task.targets(tokens)
    rule = task.trivial_rules(tokens)["last_bit"]
    scored = targets != IGNORE
    assert targets[scored].tolist() == [1, 1] and rule[scored].tolist() == [0, 1]  # fooled by the ignore's 0
    assert rule.shape == tokens.shape and rule.min() >= 0 and rule.max() < task.num_classes
    sampled, truth = task.sample(1024, 64, torch.Generator().manual_seed(0))
    predicted = task.trivial_rules(sampled)["last_bit"]
    accuracy = (predicted == truth)[truth != IGNORE].float().mean().item()
    assert 0.57 < accuracy < 0.66  # p_write + p_read + p_ignore / 2 = 0.6, a little more from the first write


def test_copy_repeat_input_predicts_the_current_token():
    task = make_task("copy", 16)
    tokens = torch.tensor([[3, 5, task.separator, 3, 5, task.padding]])
    rule = task.trivial_rules(tokens)["repeat_input"]
    assert rule.tolist() == [[3, 5, 0, 3, 5, 0]]
    scored = task.targets(tokens) != IGNORE
    assert rule[scored].tolist() == [0, 3]  # wrong: the copy asks for the next token


@pytest.mark.parametrize(
    ("name", "vocab_size", "chance"),
    [("lag", 16, 1 / 16), ("seen", 96, 1 / 2), ("associative_recall", 129, 1 / 64), ("counting", 21, 1 / 11)],
)
def test_chance_is_uniform_guessing_and_other_tasks_have_no_trivial_rule(name, vocab_size, chance):
    task = make_task(name, vocab_size)
    assert task.chance == pytest.approx(chance)
    tokens, _ = task.sample(2, 32, torch.Generator().manual_seed(0))
    assert task.trivial_rules(tokens) == {}
