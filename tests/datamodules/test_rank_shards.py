"""Evaluation data under DDP: each rank scores its own share, none twice and none padded in (``RankShard``), for the
synthetic tasks as for language modelling; a rank the batches do not reach scores a stand-in that counts nothing."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from poslab.datamodules.language import EvaluationBatches, LanguageModelDataModule
from poslab.datamodules.synthetic import RankShard, SyntheticDataModule
from poslab.errors import ConfigError
from tests.datamodules.test_local_corpus import text_folder


def fake_trainer(rank: int, world: int) -> SimpleNamespace:
    """What a datamodule reads of its Trainer, for one DDP rank."""
    return SimpleNamespace(global_rank=rank, world_size=world, max_steps=1, accumulate_grad_batches=1)


def synthetic(rank: int, world: int, eval_size: int = 5) -> SyntheticDataModule:
    dm = SyntheticDataModule("lag", 16, 16, [16, 32], batch_size=6, eval_size=eval_size, eval_batch_size=2, k=3)
    dm.trainer = fake_trainer(rank, world)
    dm.setup()
    return dm


@pytest.mark.parametrize("world", [2, 3])
def test_synthetic_evaluation_sets_are_shared_by_the_ranks_without_padding(world):
    """5 sequences on 2 or 3 ranks (what trainer.devices=auto may give): Lightning's DistributedSampler padded the
    last rank with repeated sequences, counted twice in the figures; each sequence is now scored on one rank."""
    whole = synthetic(0, 1).test_dataloader()
    ranks = [synthetic(rank, world).test_dataloader() for rank in range(world)]
    assert synthetic(0, world).trainer_arguments()["use_distributed_sampler"] is False  # no sampler put back
    for index, loader in enumerate(whole):
        expected = torch.cat([tokens for tokens, _ in loader])
        shares = [torch.cat([tokens for tokens, _ in rank[index]]) for rank in ranks]
        assert sum(len(share) for share in shares) == len(expected) == 5
        assert sorted(map(tuple, torch.cat(shares).tolist())) == sorted(map(tuple, expected.tolist()))


def test_an_evaluation_set_smaller_than_the_world_is_refused_at_setup():
    with pytest.raises(ConfigError, match=r"task.eval_size=2 gives some of the 3 processes no evaluation sequence"):
        synthetic(0, 3, eval_size=2)


def test_a_trainer_that_would_shard_the_shares_again_is_refused():
    """A Trainer built without the datamodule's trainer_arguments() wraps RankShard in a DistributedSampler."""
    dm = synthetic(0, 2)
    dm.trainer._accelerator_connector = SimpleNamespace(use_distributed_sampler=True)
    with pytest.raises(ConfigError, match=r"use_distributed_sampler=True would shard each rank's evaluation share"):
        dm.test_dataloader()


def test_rank_shards_are_disjoint_and_a_rank_without_one_gets_a_stand_in():
    assert [list(RankShard(5, rank, 2)) for rank in range(2)] == [[0, 2, 4], [1, 3]]
    assert [list(RankShard(1, rank, 3)) for rank in range(3)] == [[0], [], []]  # no stand-in asked for
    assert [list(RankShard(1, rank, 3, stand_in=True)) for rank in range(3)] == [[0], [1], [1]]  # 1 + rank % 1
    assert [list(RankShard(2, rank, 3, stand_in=True)) for rank in range(3)] == [[0], [1], [2]]  # 2: batch 0 again
    assert [len(RankShard(0, rank, 2, stand_in=True)) for rank in range(2)] == [0, 0]  # nothing anywhere: as 1 process


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return text_folder(tmp_path_factory.mktemp("rank_shards"), n=12)


def one_batch_datamodule(folder, rank: int, world: int) -> LanguageModelDataModule:
    """A validation of one batch (debug=fast's kind of sample), on ``rank`` of ``world``."""
    corpus = {"name": "local", "path": str(folder), "format": "text", "validation_fraction": 0.3,
              "groups": {"main": {"weight": 1.0, "local": [{"pattern": f"{folder}/**/*.txt"}]}}}  # fmt: skip
    dm = LanguageModelDataModule("lm", corpus, str(folder), str(folder.parent / "cache"), context_length=16,
                                 eval_lengths=[16], val_windows=2, eval_batch_size=4)  # fmt: skip
    dm.trainer = fake_trainer(rank, world)
    dm.setup()
    return dm


def test_fewer_language_model_batches_than_ranks_give_every_rank_a_batch_and_count_each_window_once(folder):
    """One validation batch on 2 ranks: rank 1 had an empty dataloader, which Lightning refuses (debug=fast under
    trainer=ddp_cpu failed on any corpus); it now scores a stand-in (one window, no prediction scored)."""
    loaders = [one_batch_datamodule(folder, rank, 2).val_dataloader() for rank in range(2)]
    assert len(loaders[0].dataset) == 1 and [len(loader) for loader in loaders] == [1, 1]
    real, stand_in = next(iter(loaders[0])), next(iter(loaders[1]))
    length = real["tokens"].shape[1] - 1
    assert (real["scored_from"] < length).all()  # every window of the real batch is scored
    assert len(stand_in["tokens"]) == 1 and torch.equal(stand_in["tokens"][0], real["tokens"][0])
    assert (stand_in["scored_from"] == length).all()  # positions 0 .. length - 1: none is scored
    assert EvaluationBatches.shape(loaders[1].dataset, 1) == (length, False, 1)  # the test's cost counts it
