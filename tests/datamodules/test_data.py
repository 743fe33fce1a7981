"""Synthetic tasks: targets follow the rules, batches are reproducible, evaluation sets independent."""

from __future__ import annotations

import pytest
import torch

from poslab.datamodules.synthetic import EvaluationSet, SyntheticDataModule, TrainingBatches
from poslab.datamodules.tasks import IGNORE, SyntheticTask
from poslab.errors import ConfigError


def test_lag_targets_are_the_token_k_back_and_first_k_unscored():
    task = SyntheticTask("lag", vocab_size=16, k=3)
    tokens = torch.tensor([[5, 1, 2, 7, 9, 4]])
    assert task.targets(tokens).tolist() == [[IGNORE, IGNORE, IGNORE, 5, 1, 2]]
    assert task.num_classes == 16


def test_seen_targets_mark_repeats_and_score_every_position():
    task = SyntheticTask("seen", vocab_size=96)
    tokens = torch.tensor([[3, 4, 3, 5, 4, 4, 9]])
    assert task.targets(tokens).tolist() == [[0, 0, 1, 0, 1, 1, 0]]
    assert task.num_classes == 2


def test_seen_always_no_baseline_matches_the_writeup():
    """The write-up: always answering 'no' scores 85% at length 32 and 55% at 128."""
    task = SyntheticTask("seen", vocab_size=96)
    for length, expected in ((32, 0.85), (128, 0.55)):
        targets = EvaluationSet(task, 2048, length, seed=1).targets
        assert (targets == 0).float().mean().item() == pytest.approx(expected, abs=0.01)


def test_training_batches_are_a_function_of_seed_and_step_and_ranks_split_one_global_batch():
    task = SyntheticTask("lag", 16)
    whole = TrainingBatches(task, 8, 12, seed=3)
    first = [b for _, b in zip(range(3), whole)]
    again = [b for _, b in zip(range(3), TrainingBatches(task, 8, 12, seed=3))]
    assert all(torch.equal(a[0], b[0]) for a, b in zip(first, again))
    assert not torch.equal(first[0][0], first[1][0])
    assert not torch.equal(first[0][0], next(iter(TrainingBatches(task, 8, 12, seed=4)))[0])
    resumed = TrainingBatches(task, 8, 12, seed=3)
    resumed.start = 2
    assert torch.equal(next(iter(resumed))[0], first[2][0])
    halves = []
    for rank in range(2):
        part = TrainingBatches(task, 8, 12, seed=3)
        part.rank, part.world_size = rank, 2
        halves.append(next(iter(part))[0])
    assert torch.equal(torch.cat(halves), first[0][0])


def test_evaluation_sets_do_not_depend_on_the_training_seed():
    a = SyntheticDataModule("lag", 16, 32, [32, 64], eval_size=8, seed=0)
    b = SyntheticDataModule("lag", 16, 32, [32, 64], eval_size=8, seed=1)
    a.setup(), b.setup()
    assert [s.tokens.shape for s in a.eval_sets] == [(8, 32), (8, 64)]
    assert all(torch.equal(x.tokens, y.tokens) for x, y in zip(a.eval_sets, b.eval_sets))
    assert not torch.equal(a.eval_sets[0].tokens, a.eval_sets[1].tokens[:, :32])  # each length its own sequences
    assert not torch.equal(next(iter(a.train_batches))[0], next(iter(b.train_batches))[0])


def test_bad_task_settings():
    with pytest.raises(ConfigError, match="unknown synthetic task 'kopy'; allowed: lag, seen, copy"):
        SyntheticTask("kopy", 16)
    with pytest.raises(ConfigError, match="task.k=0"):
        SyntheticTask("lag", 16, k=0)
