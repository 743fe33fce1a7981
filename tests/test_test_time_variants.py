"""Test-time variants: the same trained model evaluated another way at longer lengths (RoPE's scaling rules with
factor L_test / L_train), reported beside the plain accuracy without training again."""

from __future__ import annotations

import pytest
import torch

from poslab.model import ModelConfig, Transformer
from poslab.training import run

from .conftest import compose_config, tiny_model

RULES = ("test_linear", "test_ntk", "test_yarn", "test_llama3")


def model(**encoding) -> Transformer:
    return tiny_model("rope", max_length=128, **encoding)


def test_rope_trained_plain_offers_each_test_time_rule_and_others_offer_none():
    assert model(original_length=32).encoding.test_time_variants() == RULES
    assert model().encoding.test_time_variants() == ()  # no training length known: no factor L / L_train
    assert model(original_length=32, scaling="linear", scaling_factor=2.0).encoding.test_time_variants() == ()
    alibi = Transformer(ModelConfig(vocab_size=16, n_outputs=16, d_model=32, n_heads=2, encoding={"name": "alibi"}), 64)
    assert alibi.encoding.test_time_variants() == ()
    with pytest.raises(ValueError, match="no test-time variant 'test_yarn'"), alibi.encoding.evaluated_as("test_yarn"):
        pass


@pytest.mark.parametrize("variant", RULES)
def test_a_variant_is_the_rule_applied_to_the_same_weights_and_is_undone_after(variant):
    plain = model(original_length=32)
    rule = model(original_length=32, test_scaling=variant.removeprefix("test_"))
    rule.load_state_dict(plain.state_dict())
    long, short = torch.randint(0, 16, (2, 96)), torch.randint(0, 16, (2, 32))
    before = plain(long).logits
    with plain.encoding.evaluated_as(variant):
        inside = plain(long).logits
        assert torch.equal(plain(short).logits, rule(short).logits)  # at the training length: the identity
    assert torch.allclose(inside, rule(long).logits, atol=1e-6)
    assert not torch.allclose(inside, before, atol=1e-3)  # the rule changes a longer sequence's logits
    assert torch.equal(plain(long).logits, before)  # and leaves the model as it was


def test_a_run_reports_each_variant_past_the_training_length_only(tmp_path):
    overrides = ["encoding=rope", "debug=fast", "trainer.max_steps=3", "~logger", "~callbacks"]
    figures = run(compose_config(overrides, tmp_path))["figures"]
    model = {key for key in figures["32"] if not key.startswith("baseline_")}
    assert model == {"accuracy", "accuracy_log_scaled"}
    ways = ["accuracy", "accuracy_log_scaled", *(f"accuracy_{v}" for v in RULES)]
    expected = {*ways, *(f"{way}_past_train" for way in ways), *(f"selection_{v}" for v in ["log_scaled", *RULES])}
    for length in ("64", "128"):
        assert {key for key in figures[length] if not key.startswith("baseline_")} == expected
    assert all(0.0 <= value <= 1.0 for row in figures.values() for value in row.values())
