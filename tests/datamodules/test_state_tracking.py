"""state_tracking (the S5 / A5 word problem): the groups are closed and the right size, A5 holds only even
permutations, the targets are the running product recomputed by a plain loop of compositions, the data follows
its seed, and a tiny model trains and evaluates on it through the configs."""

from __future__ import annotations

import itertools

import pytest
import torch

from poslab.datamodules.tasks import StateTracking, compose, group_elements, make_task, permutation_parity
from poslab.errors import ConfigError
from poslab.running.builders import build_datamodule, build_module
from tests.conftest import compose_config, fit_quietly


@pytest.mark.parametrize(("group", "order"), [("S5", 120), ("A5", 60)])
def test_the_group_is_closed_has_its_order_and_an_identity_first(group, order):
    elements = group_elements(group)
    assert len(elements) == len(set(elements)) == order and elements[0] == (0, 1, 2, 3, 4)
    members = set(elements)
    for a, b in itertools.product(elements, repeat=2):
        assert compose(a, b) in members
    table = make_task("state_tracking", vocab_size=order, group=group).table
    assert table.shape == (order, order) and (table.sort(dim=1).values == torch.arange(order)).all()  # Latin square


def test_a5_is_the_even_permutations_and_s5_holds_the_odd_ones_too():
    assert all(permutation_parity(p) == 0 for p in group_elements("A5"))
    assert sum(permutation_parity(p) for p in group_elements("S5")) == 60
    assert permutation_parity((1, 0, 2, 3, 4)) == 1 and permutation_parity((1, 2, 0, 3, 4)) == 0


def running_product_by_loop(row: list[int], elements: list[tuple[int, ...]]) -> list[int]:
    """Apply each element in turn to the arrangement 0..4 and read off the product so far."""
    state = list(range(5))
    out = []
    for token in row:
        g = elements[token]
        state = [g[s] for s in state]  # the new element applied after the product so far
        out.append(elements.index(tuple(state)))
    return out


@pytest.mark.parametrize(("group", "order"), [("S5", 120), ("A5", 60)])
def test_targets_are_the_running_product_of_a_naive_composition(group, order):
    task = make_task("state_tracking", vocab_size=order, group=group)
    tokens, targets = task.sample(4, 40, torch.Generator().manual_seed(3))
    assert tokens.max() < order and targets.shape == tokens.shape
    elements = group_elements(group)
    for row, target in zip(tokens.tolist(), targets.tolist()):
        assert target == running_product_by_loop(row, elements)


def test_a_planted_s5_word_composes_the_later_element_after_the_earlier():
    task, elements = make_task("state_tracking", vocab_size=120, group="S5"), group_elements("S5")
    swap01, swap12 = elements.index((1, 0, 2, 3, 4)), elements.index((0, 2, 1, 3, 4))
    planted = task.targets(torch.tensor([[swap01, swap12]]))  # (0 1), then (1 2): i -> (1 2)[(0 1)[i]]
    assert planted.tolist() == [[swap01, elements.index((2, 0, 1, 3, 4))]]


def test_the_data_follows_its_seed_only():
    task = make_task("state_tracking", vocab_size=60, group="A5")
    first = task.sample(8, 32, torch.Generator().manual_seed(11))
    again = task.sample(8, 32, torch.Generator().manual_seed(11))
    other = task.sample(8, 32, torch.Generator().manual_seed(12))
    assert all(torch.equal(x, y) for x, y in zip(first, again)) and not torch.equal(first[0], other[0])
    assert task.chance == pytest.approx(1 / 60)


@pytest.mark.parametrize(
    ("settings", "fragment"),
    [({"vocab_size": 60, "group": "S4"}, "task.group='S4'"), ({"vocab_size": 60, "group": "S5"}, "vocab_size >= 120")],
)
def test_bad_settings_stop_with_one_sentence(settings, fragment):
    with pytest.raises(ConfigError, match=fragment.replace("[", r"\[")):
        StateTracking(**settings)


def test_a_tiny_model_trains_and_evaluates_on_state_tracking(tmp_path):
    tiny = ["model.d_model=16", "model.n_heads=2", "model.n_layers=1", "task.batch_size=8", "task.eval_size=8"]
    cfg = compose_config(
        ["task=state_tracking", *tiny, "task.eval_batch_size=8", "task.eval_lengths=[32,64]"], tmp_path
    )
    datamodule = build_datamodule(cfg)
    module = build_module(cfg, datamodule)
    assert module.model.cfg.n_outputs == 60
    fit_quietly(module, datamodule, steps=2).test(module, datamodule=datamodule, verbose=False)
    assert set(module.figures) == {"32", "64"}
    assert module.figures["64"]["baseline_chance"] == pytest.approx(1 / 60, abs=1e-6)
    for row in module.figures.values():  # 8 sequences: a multiple of 1/8, never above the per-token accuracy
        assert 0 <= row["sequence_accuracy"] <= row["accuracy"] + 1e-6
        assert row["sequence_accuracy"] * 8 == pytest.approx(round(row["sequence_accuracy"] * 8), abs=1e-6)


def test_sequence_accuracy_counts_only_wholly_right_sequences():
    from poslab.datamodules.tasks import IGNORE
    from poslab.lightning_modules.synthetic import SequenceAccuracy

    metric = SequenceAccuracy()
    targets = torch.tensor([[1, 2, IGNORE], [1, 2, 3], [4, 4, 4]])
    predicted = torch.tensor([[1, 2, 9], [1, 2, 0], [4, 4, 4]])  # row 0 right where scored, row 1 wrong once
    metric.update(predicted, targets)
    assert float(metric.compute()) == pytest.approx(2 / 3, abs=1e-6)
