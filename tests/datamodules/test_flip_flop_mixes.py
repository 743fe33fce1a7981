"""flip_flop's out-of-distribution mixes (Liu et al., 2023): the same weights evaluated on sparse FFL(0.98) and
dense FFL(0.1) at every evaluation length, reported as read error % by mix and length in results.json."""

from __future__ import annotations

import pytest
import torch

from poslab.datamodules.tasks import IGNORE, FlipFlop, make_task
from poslab.errors import ConfigError
from poslab.running.builders import build_datamodule, build_module
from tests.conftest import compose_config, fit_quietly


def test_the_mixes_are_the_papers_ffl_p_with_equal_write_and_read():
    task = make_task("flip_flop", vocab_size=6)
    mixes = task.evaluation_mixes()
    assert list(mixes) == ["ffl0.98", "ffl0.1"] and task.p_ignore == 0.8  # trained on FFL(0.8), as before
    sparse, dense = mixes["ffl0.98"], mixes["ffl0.1"]
    assert (sparse.p_write, sparse.p_ignore, sparse.p_read) == pytest.approx((0.01, 0.98, 0.01), abs=1e-12)
    assert (dense.p_write, dense.p_ignore, dense.p_read) == pytest.approx((0.45, 0.1, 0.45), abs=1e-12)
    for mix, p_ignore in ((sparse, 0.98), (dense, 0.1)):
        tokens, targets = mix.sample(64, 256, torch.Generator().manual_seed(0))
        instructions = tokens[:, 0::2][:, 1:-1]  # the first pair is a write and the last a read, by construction
        share = (instructions == FlipFlop.IGNORE_OP).float().mean().item()
        assert share == pytest.approx(p_ignore, abs=0.02)  # 8,064 draws: sd under 0.006
        assert ((targets != IGNORE) == (tokens == FlipFlop.READ)).all()  # only the reads are scored


def test_a_bad_mix_stops_with_one_sentence():
    with pytest.raises(ConfigError, match="task.eval_p_ignore holds 1.5"):
        make_task("flip_flop", vocab_size=6, eval_p_ignore=[1.5])


def test_a_tiny_run_reports_read_error_by_mix_and_length(tmp_path):
    tiny = ["model.d_model=16", "model.n_heads=2", "model.n_layers=1", "task.batch_size=8", "task.eval_size=8"]
    cfg = compose_config(["task=flip_flop", *tiny, "task.eval_batch_size=8", "task.eval_lengths=[32,64]"], tmp_path)
    datamodule = build_datamodule(cfg)
    module = build_module(cfg, datamodule)
    fit_quietly(module, datamodule, steps=2).test(module, datamodule=datamodule, verbose=False)
    for row in module.figures.values():
        assert row["read_error_pct"] == pytest.approx(100 * (1 - row["accuracy"]), abs=1e-6)
        for mix in ("ffl0.98", "ffl0.1"):
            assert 0.0 <= row[f"read_error_pct_{mix}"] <= 100.0 and "mix0" not in row
    again = build_module(cfg, datamodule)  # the same weights give the same mix figures: the mixes follow a seed
    again.load_state_dict(module.state_dict())
    fit_quietly(again, datamodule, steps=0).test(again, datamodule=datamodule, verbose=False)
    assert again.figures["64"]["read_error_pct_ffl0.1"] == pytest.approx(module.figures["64"]["read_error_pct_ffl0.1"])


def test_past_the_training_length_each_mix_also_scores_only_the_reads_past_it(tmp_path):
    """At 2x, ``read_error_pct_<mix>`` counts every read of the 64-token sequence, those within the 32 it trained
    at too; ``..._past_train`` the reads at positions 32..63 only, recomputed here by hand from the same batch."""
    from poslab.lightning_modules.base import logits_in_way
    from poslab.lightning_modules.synthetic import mix_seed

    tiny = ["model.d_model=16", "model.n_heads=2", "model.n_layers=1", "task.batch_size=8", "task.eval_size=8"]
    cfg = compose_config(["task=flip_flop", *tiny, "task.eval_batch_size=8", "task.eval_lengths=[32,64]"], tmp_path)
    datamodule = build_datamodule(cfg)
    module = build_module(cfg, datamodule)
    fit_quietly(module, datamodule, steps=2).test(module, datamodule=datamodule, verbose=False)
    assert "read_error_pct_ffl0.1_past_train" not in module.figures["32"]  # nothing past 1x
    row = module.figures["64"]
    assert row["read_error_pct_past_train"] == pytest.approx(100 * (1 - row["accuracy_past_train"]), abs=1e-6)
    mix = module.mixes["ffl0.1"]
    tokens, targets = mix.sample(8, 64, torch.Generator().manual_seed(mix_seed(64, 0, 1)))  # place 1, batch 0
    with torch.no_grad():
        predicted = logits_in_way(module.model, tokens, None, None, 32).argmax(-1)
    reads = targets != IGNORE
    late = reads & (torch.arange(64) >= 32)
    error = lambda scored: 100.0 * (1 - (predicted[scored] == targets[scored]).float().mean().item())  # noqa: E731
    assert row["read_error_pct_ffl0.1"] == pytest.approx(error(reads), abs=1e-4)
    assert row["read_error_pct_ffl0.1_past_train"] == pytest.approx(error(late), abs=1e-4)
    assert reads.sum() > late.sum() > 0  # two different sets of reads
