"""What the synthetic evaluation reports beside the plain accuracy: past-training accuracies for every way of
evaluating, baselines computed from the evaluation set itself, a selection set for test-time rules, and the
mean over position draws for randomized positions."""

from __future__ import annotations

import pytest
import torch

from poslab.datamodules.tasks import IGNORE
from poslab.running.builders import build_datamodule, build_module
from poslab.running.training import run
from tests.conftest import compose_config

FAST = ["debug=small", "~logger", "~callbacks", "trainer.max_steps=3", "task.eval_lengths=[32,64]"]


def tiny_run(tmp_path, *overrides: str) -> dict:
    return run(compose_config([*FAST, *overrides], tmp_path))


def test_baselines_are_computed_from_the_evaluation_set(tmp_path):
    figures = tiny_run(tmp_path, "task=flip_flop", "encoding=none")["figures"]
    datamodule = build_datamodule(compose_config([*FAST, "task=flip_flop"], tmp_path))
    datamodule.setup("test")
    test_set = datamodule.eval_sets[1]  # length 64
    targets = test_set.targets
    scored = targets[targets != IGNORE]
    commonest = torch.bincount(scored).max().item() / scored.numel()
    assert figures["64"]["baseline_constant"] == pytest.approx(commonest)
    last_bit = datamodule.task.trivial_rules(test_set.tokens)["last_bit"]
    expected = (last_bit[targets != IGNORE] == scored).float().mean().item()
    assert figures["64"]["baseline_last_bit"] == pytest.approx(expected)
    past = targets[:, 32:][targets[:, 32:] != IGNORE]
    assert figures["64"]["baseline_constant_past_train"] == pytest.approx(torch.bincount(past).max().item() / len(past))
    assert figures["32"]["baseline_chance"] == 0.5  # two classes


def test_every_way_of_evaluating_has_its_past_training_figure_and_a_selection_figure(tmp_path):
    figures = tiny_run(tmp_path, "task=lag", "encoding=rope")["figures"]
    for way in ("accuracy", "accuracy_log_scaled", "accuracy_test_yarn"):
        assert 0 <= figures["64"][f"{way}_past_train"] <= 1
    assert "accuracy_past_train" not in figures["32"]  # nothing past the training length at 1x
    assert set(k for k in figures["64"] if k.startswith("selection_")) == {
        "selection_log_scaled",
        "selection_test_linear",
        "selection_test_ntk",
        "selection_test_yarn",
        "selection_test_llama3",
    }


def test_selection_sets_are_other_sequences_than_the_test_sets(tmp_path):
    datamodule = build_datamodule(compose_config([*FAST, "task=lag"], tmp_path))
    datamodule.setup("test")
    assert datamodule.selection_lengths == [64]
    test_set, (selection_set,) = datamodule.eval_sets[1], datamodule.selection_sets
    assert test_set.tokens.shape == selection_set.tokens.shape
    assert not torch.equal(test_set.tokens, selection_set.tokens)
    assert len(datamodule.test_dataloader()) == 3


def test_randomized_positions_report_the_mean_over_draws_and_their_spread(tmp_path):
    cfg = compose_config([*FAST, "task=lag", "encoding=randomized_rope", "encoding.eval_draws=3"], tmp_path)
    figures = run(cfg)["figures"]
    assert figures["64"]["accuracy_draw_sd"] >= 0 and "accuracy_past_train_draw_sd" in figures["64"]
    # the mean over the 3 draws, recomputed by hand on the trained weights
    datamodule = build_datamodule(cfg)
    module = build_module(cfg, datamodule)
    module.model.load_state_dict(torch.load(tmp_path / "model.pt", weights_only=True)["state_dict"])
    module.eval()
    datamodule.setup("test")
    test_set = datamodule.eval_sets[1]
    encoding, accuracies = module.model.encoding, []
    with torch.no_grad():
        for draw in range(3):
            with encoding.evaluation_draw(draw):
                predicted = module.model(test_set.tokens).logits.argmax(-1)
            scored = test_set.targets != IGNORE
            accuracies.append((predicted[scored] == test_set.targets[scored]).float().mean().item())
    assert figures["64"]["accuracy"] == pytest.approx(sum(accuracies) / 3, abs=1e-6)
    assert figures["64"]["accuracy_draw_sd"] == pytest.approx(torch.tensor(accuracies).std().item(), abs=1e-6)


def test_one_draw_has_no_spread(tmp_path):
    figures = tiny_run(tmp_path, "task=lag", "encoding=randomized_rope", "encoding.eval_draws=1")["figures"]
    assert "accuracy_draw_sd" not in figures["64"]
