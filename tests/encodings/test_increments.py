"""Learned per-token position increments: integer RoPE at init, monotone and bounded positions, gradients."""

from __future__ import annotations

import pytest
import torch

from poslab.encodings import ModelShape, build_encoding
from poslab.encodings.increments import DeltaMLP, increments_from_positions
from poslab.errors import ConfigError
from poslab.model import ModelConfig, Transformer

torch.set_num_threads(1)

INCREMENTS = ("increments_shared", "increments_layer")
VOCAB, T = 16, 24


def model(encoding: str, attention: str = "sdpa", seed: int = 0, **settings) -> Transformer:
    torch.manual_seed(seed)
    cfg = ModelConfig(
        vocab_size=VOCAB,
        n_outputs=VOCAB,
        n_layers=2,
        n_heads=2,
        d_model=32,
        norm="rmsnorm",
        mlp="swiglu",
        bias=False,
        final_norm=True,
        attention=attention,
        encoding={"name": encoding, **settings},
    )
    return Transformer(cfg, max_length=64)


def tokens(batch: int = 3, length: int = T) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(1))


def delta_mlps(m: Transformer) -> list[DeltaMLP]:
    return [module for module in m.encoding.modules() if isinstance(module, DeltaMLP)]


@torch.no_grad()
def perturb(m: Transformer, std: float, seed: int = 2) -> None:
    """Random DeltaMLP weights (different per layer), so δ depends strongly on the input."""
    g = torch.Generator().manual_seed(seed)
    for mlp in delta_mlps(m):
        for p in mlp.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * std)


@pytest.mark.parametrize("encoding", INCREMENTS)
def test_increments_are_one_at_init_and_positions_count_tokens(encoding):
    out = model(encoding)(tokens(), return_positions=True)
    expected = torch.arange(1, T + 1, dtype=torch.float32).expand(3, T)
    for positions in out.positions:
        assert positions.dtype == torch.float32 and positions.shape == (3, T)
        assert torch.allclose(increments_from_positions(positions), torch.ones(3, T), atol=1e-6)
        assert torch.allclose(positions, expected, atol=1e-5)


@pytest.mark.parametrize("encoding", INCREMENTS)
def test_at_init_the_model_is_integer_rope(encoding):
    rope, learned = model("rope", seed=0), model(encoding, seed=1)
    result = learned.load_state_dict(rope.state_dict(), strict=False)
    assert not result.unexpected_keys
    owners = {"increments_shared": "encoding.delta.", "increments_layer": "encoding.deltas."}
    assert result.missing_keys and all(key.startswith(owners[encoding]) for key in result.missing_keys)
    x = tokens()
    assert torch.allclose(learned(x).logits, rope(x).logits, atol=1e-5)
    # and the increments matter once learned: different weights, different logits
    perturb(learned, std=1.0)
    assert not torch.allclose(learned(x).logits, rope(x).logits, atol=1e-3)


@pytest.mark.parametrize(
    ("encoding", "std"),
    # large weights push most tokens' softplus to 0 (fp32 underflow): the MIN_DELTA floor keeps them apart.
    # The shared δ is unbounded, so weights much larger than this make positions so large (> 16384 at std 30)
    # that the floor falls below half their fp32 spacing; the per-layer bound keeps positions <= 10 * T.
    [("increments_shared", 1.0), ("increments_shared", 10.0), ("increments_layer", 1.0), ("increments_layer", 100.0)],
)
def test_positions_strictly_increase_even_with_large_random_weights(encoding, std):
    m = model(encoding)
    perturb(m, std=std)
    for positions in m(tokens(length=64), return_positions=True).positions:
        deltas = increments_from_positions(positions)
        assert torch.isfinite(positions).all() and (deltas > 0).all()
        assert (deltas < 1e-2).any()  # the weights are large enough to hit the floor


def test_max_delta_bounds_the_per_layer_increments():
    m = model("increments_layer", max_delta=3.0)
    perturb(m, std=1000.0)
    for mlp in delta_mlps(m):  # δ itself, on inputs as wild as the weights
        deltas = mlp(torch.randn(3, T, 32) * 1000.0)
        assert (deltas > 0).all() and (deltas <= 3.0).all() and deltas.max() > 2.99  # the bound holds them
    positions = m(tokens(), return_positions=True).positions
    deltas = torch.stack([increments_from_positions(p) for p in positions])
    assert (deltas > 0).all() and (deltas <= 3.0 + 1e-4).all()  # up to the fp32 rounding of the cumulative sum


def test_per_layer_positions_differ_and_shared_positions_are_one_tensor():
    shared, layer = model("increments_shared"), model("increments_layer")
    for m in (shared, layer):
        perturb(m, std=1.0)
    first, second = shared(tokens(), return_positions=True).positions
    assert first is second  # the model rotates once for all layers
    first, second = layer(tokens(), return_positions=True).positions
    assert first is not second and not torch.allclose(first, second, atol=1e-3)


@pytest.mark.parametrize("encoding", INCREMENTS)
def test_gradients_reach_every_delta_mlp_from_init(encoding):
    m = model(encoding)
    x = tokens()
    loss = torch.nn.functional.cross_entropy(m(x).logits.flatten(0, 1), x.roll(1, dims=1).flatten())
    loss.backward()
    mlps = delta_mlps(m)
    assert len(mlps) == (1 if encoding == "increments_shared" else 2)
    for mlp in mlps:
        grad = mlp.out.weight.grad
        assert grad is not None and grad.abs().sum() > 0


def test_increments_from_positions_inverts_the_cumulative_sum():
    deltas = torch.rand(2, 3, 10) + 0.1
    assert torch.allclose(increments_from_positions(deltas.cumsum(-1)), deltas, atol=1e-6)
    assert torch.equal(increments_from_positions(torch.tensor([2.0, 3.5, 7.0])), torch.tensor([2.0, 1.5, 3.5]))


@pytest.mark.parametrize("encoding", INCREMENTS)
def test_sdpa_and_explicit_backends_agree_with_learned_positions(encoding):
    sdpa, explicit = model(encoding, "sdpa"), model(encoding, "explicit")
    perturb(sdpa, std=1.0)
    explicit.load_state_dict(sdpa.state_dict())
    x = tokens()
    out = explicit(x, return_attention=True)
    assert torch.allclose(sdpa(x).logits, out.logits, atol=1e-5)
    assert len(out.attention) == 2


def test_settings_reach_the_modules():
    shape = ModelShape(d_model=32, n_heads=2, n_layers=3, head_dim=16)
    layer = build_encoding({"name": "increments_layer", "delta_hidden": 8, "max_delta": 4, "base": 500}, shape, 64)
    assert len(layer.deltas) == 3 and layer.deltas[0].up.out_features == 8 and layer.max_delta == 4.0
    assert isinstance(layer.deltas[0].norm, torch.nn.RMSNorm) and layer.label() == "increments_layer:500"
    shared = build_encoding({"name": "increments_shared", "pairing": "half", "rotary_dim": 8}, shape, 64)
    assert shared.pairing == "half" and shared.inv_freq.numel() == 4 and shared.delta.up.out_features == 64


@pytest.mark.parametrize(
    ("settings", "fragment"),
    [
        ({"name": "increments_shared", "delta_hidden": 0}, "encoding.delta_hidden=0 must be a whole number"),
        ({"name": "increments_layer", "delta_hidden": -3}, "encoding.delta_hidden=-3 must be a whole number"),
        ({"name": "increments_layer", "max_delta": 1.0}, "encoding.max_delta=1.0 must be a finite number greater"),
        ({"name": "increments_layer", "max_delta": 0.5}, "which the bound must allow"),
        ({"name": "increments_shared", "max_delta": 5.0}, "accepts only"),  # the shared encoding is unbounded
        ({"name": "increments_layer", "rotary_dim": 7}, "must be even"),  # RotaryEncoding's checks still apply
    ],
)
def test_bad_increment_settings_give_one_clear_sentence(settings, fragment):
    with pytest.raises(ConfigError) as info:
        build_encoding(settings, ModelShape(32, 2, 2, 16), max_length=64)
    assert fragment in str(info.value)


@pytest.mark.parametrize("encoding", INCREMENTS)
def test_positions_stay_fp32_under_bf16_autocast(encoding):
    m = model(encoding)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = m(tokens(length=300), return_positions=True)
    assert out.logits.dtype == torch.bfloat16  # the rest of the model did run in bf16
    for positions in out.positions:  # bf16 has a spacing of 2 near 300: positions would collide
        assert positions.dtype == torch.float32
        assert torch.allclose(positions, torch.arange(1, 301, dtype=torch.float32).expand(3, 300), atol=1e-4)


def test_max_delta_null_removes_the_bound_from_the_command_line_to_the_module(tmp_path):
    """The write-up's claim I4 needs increments without the bound: ``encoding.max_delta=null`` passes the typed
    check (null means something for this setting only), starts at δ = 1 and lets δ pass 10."""
    from poslab.running.compose import compose_config
    from poslab.running.precheck import check_command_line

    check_command_line(["encoding=increments_layer", "encoding.max_delta=null"])  # a refusal would exit
    with pytest.raises(SystemExit):
        check_command_line(["encoding=increments_layer", "encoding.delta_hidden=null"])  # not an optional one
    from poslab.running.builders import build_datamodule, build_module

    cfg = compose_config(["encoding=increments_layer", "encoding.max_delta=null"], tmp_path)
    model = build_module(cfg, build_datamodule(cfg)).model
    assert model.encoding.max_delta is None and model.encoding.label() == "increments_layer:unbounded"
    assert all(mlp.max_delta is None for mlp in model.encoding.deltas)
    tokens = torch.randint(0, 16, (2, 32))
    positions = model(tokens, return_positions=True).positions
    assert torch.allclose(positions[0], torch.arange(1, 33, dtype=torch.float32)[None].expand(2, -1), atol=1e-4)
    with torch.no_grad():
        model.encoding.deltas[0].out.bias.fill_(20.0)  # softplus(20) = 20: no tanh to cap it
    steps = increments_from_positions(model(tokens, return_positions=True).positions[0])
    assert steps.min() > 10.0
