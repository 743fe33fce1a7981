"""associative_recall's accuracy by number of pairs (Zoology's MQAR protocol: the same weights at P pairs, each
length that holds them): the fixed-P generator, and the figures in results.json from a tiny run."""

from __future__ import annotations

import pytest
import torch

from poslab.datamodules.tasks import IGNORE, make_task
from poslab.errors import ConfigError
from poslab.running.builders import build_datamodule, build_module
from tests.conftest import compose_config, fit_quietly


def test_a_fixed_number_of_pairs_queries_each_key_once_at_any_length():
    task = make_task("associative_recall", vocab_size=129, eval_pairs=[4, 8])
    mixes = task.evaluation_mixes()
    assert list(mixes) == ["pairs4", "pairs8"] and mixes["pairs8"].min_length == 32
    for length in (32, 64):
        tokens, targets = mixes["pairs4"].sample(16, length, torch.Generator().manual_seed(length))
        assert ((targets != IGNORE).sum(dim=1) == 4).all()  # 4 queries, one per key
        keys = tokens[:, 0:8:2]
        assert (keys.sort(dim=1).values.diff(dim=1) > 0).all() and (tokens[:, 8:] != task.blank).sum(dim=1).eq(4).all()
        for row, target in zip(tokens.tolist(), targets.tolist()):
            memory = {row[i]: row[i + 1] - task.num_keys for i in range(0, 8, 2)}
            assert [t for t in target if t != IGNORE] == [memory[k] for k in row[8:] if k != task.blank]


def test_too_many_pairs_for_the_keys_stops_with_one_sentence():
    with pytest.raises(ConfigError, match="holds 70 pairs"):
        make_task("associative_recall", vocab_size=129, eval_pairs=[70])


def test_a_tiny_run_reports_accuracy_by_pairs_at_each_length_that_holds_them(tmp_path):
    tiny = ["model.d_model=16", "model.n_heads=2", "model.n_layers=1", "task.batch_size=8", "task.eval_size=8"]
    overrides = ["task=associative_recall", *tiny, "task.eval_batch_size=8", "task.eval_lengths=[32,64]"]
    cfg = compose_config([*overrides, "task.eval_pairs=[4,16]"], tmp_path)
    datamodule = build_datamodule(cfg)
    module = build_module(cfg, datamodule)
    fit_quietly(module, datamodule, steps=2).test(module, datamodule=datamodule, verbose=False)
    assert 0.0 <= module.figures["32"]["accuracy_pairs4"] <= 1.0
    assert 0.0 <= module.figures["64"]["accuracy_pairs16"] <= 1.0
    assert "accuracy_pairs16" not in module.figures["32"]  # 16 pairs need 64 tokens: no figure (NaN would fail the run)
