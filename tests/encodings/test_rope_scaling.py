"""The RoPE scaling rules (poslab/encodings/rope_scaling.py) against the code people use: ``transformers``'
RoPE initialisation functions (``ROPE_INIT_FUNCTIONS``, the ``test`` extra), on the same settings, to 1e-6; p-RoPE
against its definition; each rule's validation; the test-time option; a tiny model trained under each rule.

No network: ``transformers``' functions are pure computation on a config built here.
"""

from __future__ import annotations

import math

import pytest
import torch

from poslab.encodings import ModelShape, build_encoding
from poslab.encodings.base import PositionInputs, Scaled
from poslab.encodings.rope_scaling import RULES, keep_fraction, scaled_frequencies
from poslab.errors import ConfigError
from poslab.model import Transformer
from tests.conftest import tiny_model

transformers = pytest.importorskip("transformers", reason="the test extra: pip install -e '.[test]'")
from transformers import LlamaConfig  # noqa: E402
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402

HEAD_DIMS = (16, 32, 64, 128)
BASES = (10_000.0, 500_000.0)
FACTORS = (2.0, 4.0, 8.0, 16.0)
LENGTHS = (32, 512, 8192)


def reference(rope_type: str, head_dim: int, base: float, factor: float, original: int, seq_len=None, **extra):
    """``transformers``' (inverse frequencies, attention factor) for a Llama config with these RoPE parameters."""
    parameters = {"rope_type": rope_type, "rope_theta": base, **extra}
    if rope_type != "proportional" or factor != 1.0:
        parameters["factor"] = factor
    if rope_type in ("yarn", "llama3"):
        parameters["original_max_position_embeddings"] = original
    config = LlamaConfig(
        hidden_size=head_dim * 2,
        num_attention_heads=2,
        head_dim=head_dim,
        # yarn reads max_position_embeddings / original only to warn; dynamic reads it as L
        max_position_embeddings=int(factor * original) if rope_type != "dynamic" else original,
        rope_parameters=parameters,
    )
    inv, attention = ROPE_INIT_FUNCTIONS[rope_type](config, "cpu", seq_len=seq_len)
    return inv.double(), float(attention)


def close(ours: torch.Tensor, theirs: torch.Tensor) -> None:
    # relative 1e-6: both compute base ** x, theirs in fp32 (x rounded to fp32: a relative error up to
    # ln(base) * 6e-8 ~ 8e-7 at base 5e5), ours in fp64 rounded once
    torch.testing.assert_close(ours.double(), theirs, rtol=1e-6, atol=0.0)


#: each rule's own settings, as poslab and transformers name them (the same names), defaults first
RULE_SETTINGS = {
    "linear": [{}],
    "yarn": [{"beta_fast": 32.0, "beta_slow": 1.0}, {"beta_fast": 16.0, "beta_slow": 2.0}],
    "llama3": [{"low_freq_factor": 1.0, "high_freq_factor": 4.0}, {"low_freq_factor": 2.0, "high_freq_factor": 8.0}],
}


# YaRN: the paper's eq. 18 ramps linearly in the rotation ratio r, transformers (and the authors' code) linearly
# in the pair index between rounded bounds; poslab follows the code (rope_scaling.yarn_rule says why), so this
# comparison is against the code's reading. The attention factor (eq. 22) agrees in both.
@pytest.mark.parametrize("rule", list(RULE_SETTINGS))
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("base", BASES)
def test_rules_match_transformers(rule: str, head_dim: int, base: float) -> None:
    for settings in RULE_SETTINGS[rule]:
        for factor in FACTORS:
            for original in LENGTHS:
                ours, our_attention = scaled_frequencies(rule, head_dim, base, factor, original, **settings)
                theirs, their_attention = reference(rule, head_dim, base, factor, original, **settings)
                close(ours, theirs)
                assert our_attention == pytest.approx(their_attention, rel=1e-6, abs=0), (rule, factor, original)


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("base", BASES)
def test_dynamic_ntk_matches_transformers_at_each_length(head_dim: int, base: float) -> None:
    # transformers' formula (emozilla's), not the YaRN paper's s = n / L per length (that one is test_scaling=ntk)
    for factor in FACTORS:
        for original in (32, 512):
            for n in (original // 2, original, original + 1, 2 * original, 7 * original):
                ours, attention = scaled_frequencies("dynamic", head_dim, base, factor, original, length=n)
                theirs, _ = reference("dynamic", head_dim, base, factor, original, seq_len=n)
                close(ours, theirs)
                assert attention == 1.0
    plain, _ = scaled_frequencies("none", head_dim, base)
    close(scaled_frequencies("dynamic", head_dim, base, 4.0, 64, length=64)[0], plain.double())  # no change up to L


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("base", BASES)
def test_static_ntk_is_transformers_dynamic_rule_at_factor_times_length(head_dim: int, base: float) -> None:
    # transformers has no static NTK-aware rule: its dynamic rule with factor 1 at length s * L has the base
    # base * s^(d/(d-2)), which is the NTK-aware rule with factor s (bloc97; Peng et al., 2023, section 3.1)
    for factor in FACTORS:
        ours, attention = scaled_frequencies("ntk", head_dim, base, factor)
        theirs, _ = reference("dynamic", head_dim, base, 1.0, 64, seq_len=int(factor * 64))
        close(ours, theirs)
        assert attention == 1.0
        assert float(ours[0]) == 1.0 and float(ours[-1]) == pytest.approx(
            float(reference("linear", head_dim, base, factor, 64)[0][-1]), rel=1e-6
        )


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("fraction", [0.25, 0.5, 0.75, 1.0])
def test_p_rope_matches_its_definition_and_transformers_proportional(head_dim: int, fraction: float) -> None:
    plain, _ = scaled_frequencies("none", head_dim, 10_000.0)
    ours = keep_fraction(plain, fraction)
    # Barbero et al. (2024): rotate the int(p * d/2) highest frequencies theta_i = base^(-2i/d), the rest 0
    kept = int(fraction * head_dim / 2)
    definition = torch.tensor(
        [10_000.0 ** (-2 * i / head_dim) if i < kept else 0.0 for i in range(head_dim // 2)], dtype=torch.float64
    )
    close(ours, definition)
    theirs, attention = reference("proportional", head_dim, 10_000.0, 1.0, 64, partial_rotary_factor=fraction)
    close(ours, theirs)
    assert attention == 1.0
    # Gemma's proportional rule with a factor: p-RoPE after linear scaling
    linear, _ = scaled_frequencies("linear", head_dim, 10_000.0, 8.0)
    theirs, _ = reference("proportional", head_dim, 10_000.0, 8.0, 64, partial_rotary_factor=fraction)
    close(keep_fraction(linear, fraction), theirs)


def rope(**settings):
    shape = ModelShape.of(64, 2, 2)
    return build_encoding({"name": "rope", "original_length": 32, **settings}, shape, max_length=256)


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"scaling": "ntk-by-parts"}, ["encoding.scaling='ntk-by-parts'", "linear, ntk, dynamic, yarn, llama3"]),
        ({"scaling": "linear", "scaling_factor": 0.5}, ["encoding.scaling_factor=0.5", "at least 1"]),
        ({"scaling": "ntk", "scaling_factor": "big"}, ["encoding.scaling_factor='big'", "at least 1"]),
        ({"scaling": "dynamic", "scaling_factor": 2, "original_length": None}, ["original_length=None", "integer"]),
        ({"scaling": "yarn", "scaling_factor": 4, "original_length": 1}, ["original_length=1", "at least 2"]),
        ({"scaling": "yarn", "scaling_factor": 4, "beta_fast": 1, "beta_slow": 2}, ["beta_slow=2", "beta_fast=1"]),
        ({"scaling": "yarn", "scaling_factor": 4, "beta_fast": -1}, ["encoding.beta_fast=-1", "greater than 0"]),
        (
            {"scaling": "llama3", "scaling_factor": 8, "low_freq_factor": 4, "high_freq_factor": 1},
            ["low_freq_factor=4", "high_freq_factor=1"],
        ),
        ({"scaling": "llama3", "scaling_factor": 8, "high_freq_factor": 0}, ["high_freq_factor=0", "greater than 0"]),
        ({"partial_fraction": 0}, ["encoding.partial_fraction=0", "(0, 1]"]),
        ({"partial_fraction": 1.5}, ["encoding.partial_fraction=1.5", "(0, 1]"]),
        ({"test_scaling": "dynamic"}, ["encoding.test_scaling", "none, linear, ntk, yarn, llama3"]),
        ({"test_scaling": "yarn", "original_length": None}, ["original_length=None"]),
        ({"test_scaling": "yarn", "scaling": "linear", "scaling_factor": 2}, ["test_scaling=yarn", "scaling=linear"]),
    ],
)
def test_validation_names_the_bad_value_and_what_is_allowed(settings, words) -> None:
    with pytest.raises(ConfigError) as error:
        rope(**settings)
    message = str(error.value)
    for word in words:
        assert word in message, (word, message)


def test_every_rule_is_registered_with_a_validation() -> None:
    assert list(RULES) == ["none", "linear", "ntk", "dynamic", "yarn", "llama3"]
    for name, rule in RULES.items():
        assert rule.compute.__doc__ and rule.summary, name
        rule.validate({"scaling_factor": 2.0, "original_length": 32}, name)  # good settings pass


def transform_at(encoding, length: int):
    inputs = PositionInputs.from_tokens(torch.zeros(1, length, dtype=torch.long))
    _, state = encoding.begin(torch.zeros(1, length, 64), inputs)
    from poslab.encodings.base import LayerContext

    return encoding.query_key_transform(LayerContext(0, torch.zeros(1, length, 64), state, inputs), None)


@pytest.mark.parametrize("rule", ["linear", "ntk", "yarn", "llama3"])
def test_test_time_scaling_applies_the_rule_at_each_length_and_leaves_the_training_length(rule: str) -> None:
    plain, scaled = rope(), rope(test_scaling=rule)
    q = torch.randn(1, 2, 128, 32)
    for length in (16, 32):  # up to the training length: plain RoPE, bit for bit
        a, b = transform_at(plain, length), transform_at(scaled, length)
        assert torch.equal(a.queries(q[:, :, :length]), b.queries(q[:, :, :length]))
    for length in (64, 128):  # longer: the rule with factor n / L
        transform = transform_at(scaled, length)
        inv, attention = scaled_frequencies(rule, 32, 10_000.0, length / 32, 32, length)
        expected = transform_at(rope(scaling=rule, scaling_factor=length / 32), length)
        assert torch.equal(transform.queries(q[:, :, :length]), expected.queries(q[:, :, :length]))
        assert not torch.equal(
            transform.queries(q[:, :, :length]), transform_at(plain, length).queries(q[:, :, :length])
        )
        assert isinstance(transform, Scaled) == (attention != 1.0)
        assert attention == (pytest.approx(0.1 * math.log(length / 32) + 1) if rule == "yarn" else 1.0)


def test_yarn_attention_factor_multiplies_the_scores_by_its_square() -> None:
    plain, yarn = rope(), rope(scaling="yarn", scaling_factor=4.0)
    transform = transform_at(yarn, 8)
    assert isinstance(transform, Scaled)
    q, k = torch.randn(1, 2, 8, 32), torch.randn(1, 2, 8, 32)
    m = 0.1 * math.log(4.0) + 1
    scores = transform.queries(q) @ transform.keys(k).transpose(-1, -2)
    rotation = transform.inner
    torch.testing.assert_close(scores, m**2 * (rotation.queries(q) @ rotation.keys(k).transpose(-1, -2)))
    assert plain.label() == "rope" and yarn.label() == "rope:yarn4"


@pytest.mark.parametrize(
    "settings",
    [
        {"scaling": "linear", "scaling_factor": 2.0},
        {"scaling": "ntk", "scaling_factor": 2.0},
        {"scaling": "dynamic", "scaling_factor": 2.0},
        {"scaling": "yarn", "scaling_factor": 4.0},
        {"scaling": "llama3", "scaling_factor": 8.0},
        {"partial_fraction": 0.5},
        {"test_scaling": "yarn"},
    ],
)
def test_a_tiny_model_trains_under_each_rule(settings) -> None:
    model = tiny_model("rope", d_model=64, original_length=16, **settings)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    tokens = torch.randint(0, 16, (4, 16))
    losses = []
    for _ in range(3):
        logits = model(tokens[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
    assert all(math.isfinite(x) for x in losses) and losses[-1] < losses[0]
    model.eval()
    with torch.no_grad():  # evaluated past the training length (the test-time rule's factor 64 / 16)
        assert torch.isfinite(model(torch.randint(0, 16, (1, 64))).logits).all()


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["encoding=rope", "encoding.scaling=yarnn"], ["encoding.scaling='yarnn'", "linear, ntk, dynamic, yarn"]),
        (["encoding=rope", "encoding.scaling=yarn", "encoding.scaling_factor=0.5"], ["scaling_factor=0.5"]),
        (["encoding=rope", "encoding.scaling_factor=big"], ["encoding.scaling_factor", "'big'", "number"]),
        (["encoding=rope", "encoding.test_scaling=dynamic"], ["encoding.test_scaling", "'dynamic'"]),
        (["encoding=rope", "encoding.partial_fraction=2"], ["encoding.partial_fraction=2", "(0, 1]"]),
    ],
)
def test_train_py_refuses_a_bad_scaling_setting_at_start(argv, named, capsys, tmp_path, monkeypatch) -> None:
    from poslab.running.precheck import check_command_line

    monkeypatch.setenv("POSLAB_LOG_DIR", str(tmp_path))
    with pytest.raises(SystemExit) as stopped:
        check_command_line(argv)
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("poslab: configuration error: ") and "Traceback" not in err
    for fragment in named:
        assert fragment in err, (fragment, err)


def test_original_length_defaults_to_the_training_length() -> None:
    from omegaconf import OmegaConf

    from poslab.running.compose import compose_config

    for overrides, length in ((["task=lag"], 32), (["task=lag", "task.train_length=24"], 24)):
        cfg = compose_config(["encoding=rope", *overrides])
        assert OmegaConf.to_container(cfg.encoding, resolve=True)["original_length"] == length


def test_test_time_scaling_on_the_same_weights_changes_only_the_longer_lengths() -> None:
    torch.manual_seed(0)

    def model(**settings) -> Transformer:
        return tiny_model("rope", d_model=64, original_length=16, **settings).eval()

    plain, scaled = model(), model(test_scaling="yarn")
    scaled.load_state_dict(plain.state_dict())
    tokens = torch.randint(0, 16, (2, 64))
    with torch.no_grad():
        for length in (8, 16):  # up to the training length: bit for bit
            assert torch.equal(plain(tokens[:, :length]).logits, scaled(tokens[:, :length]).logits)
        assert not torch.allclose(plain(tokens[:, :32]).logits, scaled(tokens[:, :32]).logits)
