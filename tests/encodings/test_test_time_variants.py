"""Test-time variants: the same trained model evaluated another way at longer lengths (the RoPE scaling rules with
factor L_test / L_train, on every encoding that rotates by RoPE's frequencies), reported beside the plain accuracy
without training again, and each equal to the model built with that rule on the same weights."""

from __future__ import annotations

import inspect

import pytest
import torch
from omegaconf import OmegaConf
from torch import Tensor

from poslab.encodings import ENCODINGS
from poslab.encodings.rope_scaling import RULE_SETTINGS, keep_fraction, plain, rule_defaults, scaled_frequencies
from poslab.encodings.rotary import RotaryEncoding
from poslab.errors import ConfigError
from poslab.model import ModelConfig, Transformer
from poslab.running.training import run
from tests.conftest import CONF, compose_config, tiny_model

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
    overrides = ["encoding=rope", "debug=small", "trainer.max_steps=3", "~logger", "~callbacks"]
    figures = run(compose_config(overrides, tmp_path))["figures"]
    model = {key for key in figures["32"] if not key.startswith("baseline_")}
    assert model == {"accuracy", "accuracy_log_scaled"}
    ways = ["accuracy", "accuracy_log_scaled", *(f"accuracy_{v}" for v in RULES)]
    expected = {*ways, *(f"{way}_past_train" for way in ways), *(f"selection_{v}" for v in ["log_scaled", *RULES])}
    for length in ("64", "128"):
        assert {key for key in figures[length] if not key.startswith("baseline_")} == expected
    assert all(0.0 <= value <= 1.0 for row in figures.values() for value in row.values())


# ---- every encoding that rotates by RoPE's frequencies ---------------------------------------------------------
TRAIN = 16  # the training length the tiny models below are given (original_length)
ROTARY = {  # each rotary encoding, with settings that fit the tiny model and take its rotation
    "rope": {},
    "xpos": {},
    "ssmax": {"inner": "rope"},
    "cope": {"inner": "rope"},
    "forget_gate": {"inner": "rope"},
    "selective": {"inner": "rope"},
    "bipe": {},  # inter: rope, rotated by the sentence index
    "rope_nope_mix": {"nope_every": 2},  # the second layer NoPE
    "randomized_rope": {"max_position": 256, "eval_draws": 1},
    "increments_shared": {},
    "increments_layer": {},
    "hrope_axial": {},
    "rand_axial": {"paragraph_density": 0.1},
    "period_axial": {"paragraph_density": 0.1},
}
#: the other branches of the frequencies: p-RoPE, hRoPE's own ladders per block, a base per layer
BRANCHES = {
    "rope:p0.5": ("rope", {"partial_fraction": 0.5}),
    "hrope_axial:full": ("hrope_axial", {"frequencies": "full"}),
    "rope_nope_mix:bases": ("rope_nope_mix", {"nope_every": 3, "base": [10_000.0, 500.0, 1_000.0]}),
}
CASES = {**{name: (name, settings) for name, settings in ROTARY.items()}, **BRANCHES}


def rotary_model(name: str, settings: dict, **scaling) -> Transformer:
    """A tiny model of encoding ``name`` with training length ``TRAIN`` (``original_length``), seeded: the same
    initial weights with a rule (``scaling``) as without one."""
    n_layers = len(settings.get("base", [0, 0]))
    return tiny_model(name, n_layers=n_layers, max_length=4 * TRAIN, original_length=TRAIN, **settings, **scaling)


def perturbed(model: Transformer) -> Transformer:
    """``model`` with seeded noise on every parameter, so learned parts that start at zero or at 1 (CoPE's table, the
    increments' last layer) are not at their start: what the rule meets in a trained model."""
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.2 * torch.randn(parameter.shape, generator=g))
    return model.eval()


def batch_of(length: int) -> tuple[Tensor, dict[str, Tensor]]:
    """Seeded tokens with paragraph and sentence coordinates (what hRoPE reads; the others ignore them)."""
    g = torch.Generator().manual_seed(2)
    tokens = torch.randint(0, 16, (2, length), generator=g)
    paragraph = (torch.rand(2, length, generator=g) < 0.1).long().cumsum(-1)
    sentence = (torch.rand(2, length, generator=g) < 0.3).long().cumsum(-1)
    return tokens, {"paragraph": paragraph, "sentence": sentence}


def logits(model: Transformer, length: int) -> Tensor:
    tokens, coordinates = batch_of(length)
    with torch.no_grad():
        return model(tokens, coordinates).logits


def test_the_cases_cover_every_rotary_encoding():
    registered = {name: cls for name, cls in ENCODINGS.items() if not name.startswith("test_")}  # others' test-only
    rotary = {name for name, cls in registered.items() if issubclass(cls, RotaryEncoding)}
    assert rotary == set(ROTARY)


@pytest.mark.parametrize("case", list(CASES))
def test_every_rotary_encoding_trained_plain_offers_each_test_time_rule(case):
    name, settings = CASES[case]
    assert rotary_model(name, settings).encoding.test_time_variants() == RULES
    assert tiny_model(name, n_layers=3, **settings).encoding.test_time_variants() == ()  # no training length
    trained_with_rule = rotary_model(name, settings, scaling="linear", scaling_factor=2.0)
    assert trained_with_rule.encoding.test_time_variants() == ()


@pytest.mark.parametrize("rule", [variant.removeprefix("test_") for variant in RULES])
@pytest.mark.parametrize("case", list(CASES))
def test_a_variant_is_the_model_built_with_that_rule_on_the_same_weights(case, rule):
    """At L = 2x and 4x the training length, evaluated_as(test_<rule>) gives the logits of the model built with
    scaling=<rule>, scaling_factor=L / L_train and the same state dict; at or below it, those of the plain model."""
    name, settings = CASES[case]
    plain = perturbed(rotary_model(name, settings))
    before = {length: logits(plain, length) for length in (TRAIN // 2, TRAIN, 2 * TRAIN, 4 * TRAIN)}
    for length in (2 * TRAIN, 4 * TRAIN):
        built = rotary_model(name, settings, scaling=rule, scaling_factor=length / TRAIN).eval()
        built.load_state_dict(plain.state_dict())
        with plain.encoding.evaluated_as(f"test_{rule}"):
            inside = logits(plain, length)
        torch.testing.assert_close(inside, logits(built, length), rtol=1e-5, atol=1e-5)
        assert not torch.allclose(inside, before[length], atol=1e-4), (case, rule, length)  # the rule did something
    with plain.encoding.evaluated_as(f"test_{rule}"):
        for length in (TRAIN // 2, TRAIN):  # at or below the training length: the identity, bit for bit
            assert torch.equal(logits(plain, length), before[length]), (case, rule, length)
    for length, expected in before.items():  # and the model is as it was after the block
        assert torch.equal(logits(plain, length), expected), (case, rule, length)


@pytest.mark.parametrize("rule", ["linear", "ntk", "yarn", "llama3"])
def test_a_rule_on_split_hrope_with_every_coordinate_the_token_index_is_the_rule_on_rope(rule):
    """hRoPE's split bands are rungs of RoPE's ladder and each is scaled as that rung of RoPE: with the paragraph
    and sentence coordinates equal to the token index, hRoPE under a rule is RoPE under it."""
    tokens = torch.randint(0, 16, (2, 4 * TRAIN), generator=torch.Generator().manual_seed(3))
    index = torch.arange(4 * TRAIN).expand(2, -1)
    rope = perturbed(rotary_model("rope", {}, scaling=rule, scaling_factor=4.0))
    hrope = rotary_model("hrope_axial", {}, scaling=rule, scaling_factor=4.0).eval()
    hrope.load_state_dict(rope.state_dict())
    with torch.no_grad():
        expected = rope(tokens).logits
        got = hrope(tokens, {"paragraph": index, "sentence": index}).logits
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("rule", ["linear", "ntk", "dynamic", "yarn", "llama3"])
def test_a_rule_scales_each_encodings_own_frequencies_as_those_rungs_of_ropes_ladder(rule):
    """hRoPE's axes take rungs of RoPE's ladder (in another order for token_first and interleaved): each is scaled
    as that rung; a base per layer: each layer's ladder as rope with that base."""
    length = 3 * TRAIN  # dynamic reads it
    ladder = plain(16, 10_000.0)
    expected, _ = scaled_frequencies(rule, 16, 10_000.0, 4.0, TRAIN, length)
    for frequencies in ("split", "token_first", "interleaved"):
        encoding = rotary_model("hrope_axial", {"frequencies": frequencies}, scaling=rule, scaling_factor=4.0).encoding
        rung = (encoding.own_freq[:, None] == ladder[None, :]).double().argmax(dim=1)  # which rung each pair is
        assert torch.equal(ladder[rung], encoding.own_freq)
        torch.testing.assert_close(encoding.rule_frequencies(length)[0], expected[rung], rtol=1e-6, atol=0.0)
    bases = [10_000.0, 500.0, 1_000.0]
    mix = rotary_model("rope_nope_mix", {"nope_every": 3, "base": bases}, scaling=rule, scaling_factor=4.0).encoding
    for layer, base in enumerate(bases):
        expected, _ = scaled_frequencies(rule, 16, base, 4.0, TRAIN, length)
        torch.testing.assert_close(mix.rule_frequencies(length)[0][layer], expected, rtol=1e-6, atol=0.0)


@pytest.mark.parametrize("name", ["cope", "forget_gate", "ssmax"])
def test_over_nope_there_is_no_rotation_to_scale(name):
    over_nope = tiny_model(name, inner="none", original_length=TRAIN)
    assert over_nope.encoding.test_time_variants() == ()
    with (
        pytest.raises(ValueError, match="no test-time variant 'test_yarn'"),
        over_nope.encoding.evaluated_as("test_yarn"),
    ):
        pass
    for setting in ({"scaling": "yarn", "scaling_factor": 2.0}, {"test_scaling": "ntk"}):
        with pytest.raises(ConfigError) as error:
            tiny_model(name, inner="none", original_length=TRAIN, **setting)
        key, value = next(iter(setting.items()))
        message = str(error.value)
        assert f"encoding.{key}={value}" in message and "encoding.inner=none rotates nothing" in message, message
        assert "set encoding.inner=rope" in message, message


def test_a_rope_nope_mix_with_no_rope_layer_offers_no_variant():
    assert tiny_model("rope_nope_mix", nope_every=1, original_length=TRAIN).encoding.test_time_variants() == ()


@pytest.mark.parametrize("name", list(ROTARY))
def test_every_rotary_encoding_validates_the_scaling_settings_alike(name):
    settings = {**ROTARY[name], "original_length": TRAIN}
    for bad, words in (
        ({"scaling": "yarnn"}, ["encoding.scaling='yarnn'", "linear, ntk, dynamic, yarn, llama3"]),
        ({"scaling": "linear", "scaling_factor": 0.5}, ["encoding.scaling_factor=0.5", "at least 1"]),
        ({"test_scaling": "dynamic"}, ["encoding.test_scaling='dynamic'", "ntk", "none, linear, ntk, yarn, llama3"]),
        ({"test_scaling": "yarn", "original_length": None}, ["original_length=None", "at least 2"]),
        ({"original_length": "long"}, ["encoding.original_length='long' must be the training length"]),
        ({"scaling": "yarn", "scaling_factor": 2, "beta_fast": 1, "beta_slow": 2}, ["beta_slow=2", "beta_fast=1"]),
    ):
        with pytest.raises(ConfigError) as error:
            tiny_model(name, n_layers=3, **{**settings, **bad})
        for word in words:
            assert word in str(error.value), (name, bad, str(error.value))


def test_the_rule_settings_live_in_the_shared_yaml_only():
    """One home for each rule setting's default, conf/encoding/shared/rotary.yaml: the code reads it
    (rope_scaling.rule_defaults), the constructor has no default of its own, and no encoding's YAML repeats it."""
    shared = OmegaConf.load(CONF / "encoding" / "shared" / "rotary.yaml")
    assert rule_defaults() == {key: float(shared[key]) for key in RULE_SETTINGS}
    defaults = inspect.signature(RotaryEncoding.__init__).parameters
    assert all(defaults[key].default is inspect.Parameter.empty for key in RULE_SETTINGS)
    rope_yaml = OmegaConf.load(CONF / "encoding" / "rope.yaml")
    assert not set(RULE_SETTINGS) & set(rope_yaml), "rope.yaml sets a rule setting the shared file already has"


@pytest.mark.parametrize("head_dim", [16, 64])
def test_dynamic_ntk_at_test_time_is_the_ntk_variant(head_dim):
    """Why there is no test_dynamic: a plain model evaluated under dynamic NTK (factor 1, as transformers loads
    one) has at length n the NTK base of factor n / L, which is test_ntk at n."""
    for n in (2 * TRAIN, 3 * TRAIN + 5, 8 * TRAIN):
        dynamic, _ = scaled_frequencies("dynamic", head_dim, 10_000.0, 1.0, TRAIN, length=n)
        ntk, _ = scaled_frequencies("ntk", head_dim, 10_000.0, n / TRAIN)
        torch.testing.assert_close(dynamic, ntk, rtol=1e-6, atol=0.0)
    plain = perturbed(rotary_model("rope", {}))
    dynamic = rotary_model("rope", {}, scaling="dynamic", scaling_factor=1.0).eval()
    dynamic.load_state_dict(plain.state_dict())
    with plain.encoding.evaluated_as("test_ntk"):
        torch.testing.assert_close(logits(plain, 4 * TRAIN), logits(dynamic, 4 * TRAIN), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rule", ["linear", "ntk", "dynamic", "yarn", "llama3"])
def test_p_rope_is_the_same_before_a_rule_or_after_it(rule):
    """Every rule acts on each frequency alone and keeps 0 at 0: p-RoPE's zeros taken before the rule (how rope
    builds it) are p-RoPE after the rule (how transformers' proportional rule composes)."""
    rope = rotary_model("rope", {"partial_fraction": 0.5}, scaling=rule, scaling_factor=4.0).encoding
    inv, _ = rope.rule_frequencies(3 * TRAIN)
    after, _ = scaled_frequencies(rule, 16, 10_000.0, 4.0, TRAIN, 3 * TRAIN)
    torch.testing.assert_close(inv, keep_fraction(after, 0.5), rtol=1e-6, atol=0.0)
    assert (inv[4:] == 0).all() and (inv[:4] > 0).all()


@pytest.mark.parametrize("rule", ["linear", "ntk", "dynamic", "yarn", "llama3"])
def test_a_rule_on_any_frequency_reads_its_index_on_the_ladder(rule):
    """On RoPE's ladder the per-frequency form is the rule (transformers' numbers,
    tests/encodings/test_rope_scaling.py); a frequency between rungs is scaled between its neighbours' scales, and 1
    (the fastest) as on the ladder."""
    ladder = plain(32, 10_000.0)
    on_ladder, _ = scaled_frequencies(rule, 32, 10_000.0, 4.0, TRAIN, 4 * TRAIN, theta=ladder)
    torch.testing.assert_close(on_ladder, scaled_frequencies(rule, 32, 10_000.0, 4.0, TRAIN, 4 * TRAIN)[0])
    between = (ladder[:-1] * ladder[1:]).sqrt()  # geometric midpoints: pair index i + 1/2
    scaled, _ = scaled_frequencies(rule, 32, 10_000.0, 4.0, TRAIN, 4 * TRAIN, theta=between)
    ratio, ladder_ratio = scaled.double() / between, on_ladder.double() / ladder
    low, high = torch.minimum(ladder_ratio[:-1], ladder_ratio[1:]), torch.maximum(ladder_ratio[:-1], ladder_ratio[1:])
    assert ((ratio >= low - 1e-6) & (ratio <= high + 1e-6)).all(), (rule, ratio, ladder_ratio)


def test_labels_name_a_rule_on_every_rotary_encoding():
    assert rotary_model("xpos", {}, scaling="yarn", scaling_factor=4.0).encoding.label() == "xpos:yarn4"
    assert rotary_model("hrope_axial", {}, test_scaling="ntk").encoding.label() == "hrope_axial:test_ntk"
    assert rotary_model("cope", {"inner": "rope"}, scaling="linear", scaling_factor=2.0).encoding.label() == (
        f"cope:{4 * TRAIN + 1}:rope:linear2"
    )
    mix = rotary_model("rope_nope_mix", {"nope_every": 2}, scaling="llama3", scaling_factor=8.0)
    assert mix.encoding.label() == "rope_nope_mix:nope2:llama38"


@pytest.mark.parametrize("encoding", ["increments_shared", "hrope_axial"])
def test_a_synthetic_run_reports_the_variants_of_another_rotary_encoding(encoding, tmp_path):
    overrides = [f"encoding={encoding}", "debug=small", "trainer.max_steps=3", "~logger", "~callbacks"]
    figures = run(compose_config(overrides, tmp_path))["figures"]
    assert not any(key.startswith("accuracy_test_") for key in figures["32"])  # at the training length: none
    for length in ("64", "128"):
        assert {f"accuracy_{v}" for v in RULES} | {f"selection_{v}" for v in RULES} <= set(figures[length])
        assert {f"accuracy_{v}_past_train" for v in RULES} <= set(figures[length])
