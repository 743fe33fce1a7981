"""The distance-based methods of issue 13: T5's buckets, KERPLE (log, power), FIRE, Sandwich, and SSMax.

Each is checked against a reference implementation where one exists (transformers and x-transformers for T5), else
against its paper's equation restated here, and for the property its paper relies on; every one computes the same
logits on the sdpa and explicit paths, its flex ``score_mod`` equals its ``score_bias``, and bad settings stop."""

from __future__ import annotations

import math

import pytest
import torch

from poslab.encodings import ModelShape, PositionInputs, build_encoding
from poslab.encodings.base import LayerContext
from poslab.encodings.fire import FireBias
from poslab.encodings.rotary import apply_rotary, inverse_frequencies, rotation_angles
from poslab.encodings.t5_bias import relative_position_bucket
from poslab.errors import ConfigError
from poslab.model import Transformer
from tests.conftest import tiny_model

SHAPE = ModelShape(d_model=32, n_heads=2, n_layers=2, head_dim=16)
CPU = torch.device("cpu")

CONFIGS = {
    "t5_bias": {"name": "t5_bias", "num_buckets": 8, "max_distance": 20},  # buckets past 4 exact ones within T = 40
    "kerple_log": {"name": "kerple_log"},
    "kerple_power": {"name": "kerple_power"},
    "fire": {"name": "fire", "threshold": 8.0, "per_layer": False},  # the shared deviation: one bias for all layers
    "fire_layer": {"name": "fire", "threshold": 8.0, "per_layer": True},
    "sandwich": {"name": "sandwich"},
    "ssmax": {"name": "ssmax"},
    "ssmax_none": {"name": "ssmax", "inner": "none"},
}
WITH_SCORE_MOD = ("t5_bias", "kerple_log", "kerple_power", "sandwich")


def tiny(encoding: dict, attention: str = "sdpa") -> Transformer:
    return tiny_model(encoding, attention)


def build(settings: dict, shape: ModelShape = SHAPE):
    torch.manual_seed(0)
    return build_encoding(settings, shape, 64)


def upper_triangle_free(bias: torch.Tensor) -> torch.Tensor:
    """``bias`` on and below the diagonal (query >= key), 0 above it, where the causal mask decides."""
    return bias * torch.ones(bias.shape[-2:]).tril()


# ---- every method: the paths agree, the score_mod is the bias, bad settings stop -----------------------------------
@pytest.mark.parametrize("key", list(CONFIGS))
def test_sdpa_and_explicit_give_the_same_logits_and_gradients_are_finite(key):
    tokens = torch.randint(0, 16, (2, 40), generator=torch.Generator().manual_seed(1))
    sdpa, explicit = tiny(CONFIGS[key], "sdpa"), tiny(CONFIGS[key], "explicit")
    explicit.load_state_dict(sdpa.state_dict())
    logits = sdpa(tokens).logits
    assert torch.allclose(logits, explicit(tokens, return_attention=True).logits, atol=1e-5)
    logits.square().mean().backward()
    grads = [p.grad for p in sdpa.encoding.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)  # power at distance 0: no NaN
    assert key == "sandwich" or any(g.abs().sum() > 0 for g in grads)  # learned ones train through the mask


@pytest.mark.parametrize("key", WITH_SCORE_MOD)
def test_the_score_mod_is_the_score_bias_at_every_head_query_and_key(key):
    encoding = build(CONFIGS[key])
    length = 48
    bias = encoding.score_bias(length, CPU)
    index = torch.arange(length)
    h, q, kv = torch.arange(SHAPE.n_heads)[:, None, None], index[None, :, None], index[None, None, :]
    modded = encoding.score_mod()(torch.zeros(()), torch.zeros((), dtype=torch.long), h, q, kv)
    assert modded.shape == bias.shape == (SHAPE.n_heads, length, length)
    assert torch.isfinite(bias).all() and torch.isfinite(modded).all()  # keys after the query too
    assert torch.allclose(upper_triangle_free(modded), upper_triangle_free(bias), atol=1e-4)


def test_fire_is_not_offered_on_flex():
    with pytest.raises(ConfigError, match="model.attention=flex .* 'fire' .* takes sdpa, explicit"):
        tiny(CONFIGS["fire"], "flex")


@pytest.mark.parametrize(
    ("settings", "fragment"),
    [
        ({"name": "t5_bias", "num_buckets": 1}, r"encoding.num_buckets=1 must be a whole number of at least 2"),
        ({"name": "t5_bias", "max_distance": 16}, r"encoding.max_distance=16 must be a whole number of at least 17"),
        ({"name": "t5_bias", "num_buckets": 8.5}, r"encoding.num_buckets=8.5 "),
        ({"name": "kerple_log", "r1": 1.0}, r"encoding 'kerple_log' got settings \['r1'\]"),
        ({"name": "fire", "hidden": 0}, r"encoding.hidden=0 must be a whole number of at least 1"),
        ({"name": "fire", "c": -1.0}, r"encoding.c=-1.0 must be a finite number greater than 0"),
        ({"name": "fire", "threshold": 0}, r"encoding.threshold=0 must be a finite number greater than 0"),
        ({"name": "fire", "per_layer": "yes"}, r"encoding.per_layer='yes' must be true"),
        ({"name": "sandwich", "dim": 7}, r"encoding.dim=7 must be an even whole number"),
        ({"name": "ssmax", "inner": "alibi"}, r"encoding.inner='alibi' is not allowed;.* allowed: rope, none"),
        ({"name": "ssmax", "s_init": 0.0}, r"encoding.s_init=0.0 must be a finite number greater than 0"),
    ],
)
def test_bad_settings_stop_naming_the_value(settings, fragment):
    with pytest.raises(ConfigError, match=fragment):
        build_encoding(settings, SHAPE, 64)


# ---- T5 ------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("num_buckets", "max_distance"), [(32, 128), (8, 20), (16, 64), (64, 1000), (2, 5)])
def test_t5_buckets_are_transformers_at_every_distance(num_buckets, max_distance):
    from transformers.models.t5.modeling_t5 import T5Attention

    relative = torch.arange(-2000, 50)  # key - query: distances 0 .. 2000, and keys after the query
    expected = T5Attention._relative_position_bucket(
        relative, bidirectional=False, num_buckets=num_buckets, max_distance=max_distance
    )
    assert torch.equal(relative_position_bucket(relative, num_buckets, max_distance), expected)
    assert expected.max() == num_buckets - 1  # the far distances reach the last bucket: the test covers all


def test_t5_bias_is_x_transformers_relative_position_bias_with_the_same_table():
    from x_transformers.x_transformers import RelativePositionBias

    encoding = build({"name": "t5_bias", "num_buckets": 16, "max_distance": 40})
    # x-transformers scales its table by `scale` (its attention passes sqrt(dim_head)); T5 adds the table itself: 1
    reference = RelativePositionBias(scale=1.0, causal=True, num_buckets=16, max_distance=40, heads=SHAPE.n_heads)
    with torch.no_grad():
        reference.relative_attention_bias.weight.copy_(encoding.table)  # both [num_buckets, heads]
    length = 64
    assert torch.allclose(encoding.score_bias(length, CPU), reference(length, length), atol=1e-5)
    # T5's initialisation: N(0, d_model^-0.5) (0.18 for d_model 32), not N(0, 1)
    table = build({"name": "t5_bias"}, ModelShape(32, 8, 1, 4)).table
    assert 0.12 < table.std().item() < 0.24


# ---- KERPLE --------------------------------------------------------------------------------------------------------
def kerple_equation(variant: str, r1: float, r2: float, distance: int) -> float:
    """The paper's kernels, shifted to 0 at distance 0: -r1 log(1 + r2 d) and -r1 d^r2."""
    return -r1 * math.log(1 + r2 * distance) if variant == "kerple_log" else -r1 * distance**r2


@pytest.mark.parametrize("variant", ["kerple_log", "kerple_power"])
def test_kerple_is_the_papers_equation_and_a_non_positive_non_increasing_bias(variant):
    encoding = build({"name": variant}, ModelShape(32, 4, 1, 8))
    bias = encoding.score_bias(24, CPU)
    for h in range(4):
        r1, r2 = encoding.r1[h].item(), encoding.r2[h].item()
        for t in range(24):
            for s in range(t + 1):
                assert bias[h, t, s].item() == pytest.approx(
                    kerple_equation(variant, r1, r2, t - s), rel=1e-5, abs=1e-6
                )
    causal = upper_triangle_free(bias)
    assert (causal <= 0).all() and (bias.diagonal(dim1=-2, dim2=-1) == 0).all()
    last_row = bias[:, -1, :].flip(-1)  # the last query's bias at distances 0, 1, ..., 23
    assert (last_row[:, 1:] <= last_row[:, :-1]).all()  # non-increasing with distance


def test_kerple_initialisation_and_projection_are_the_papers_codes():
    wide = ModelShape(64, 64, 1, 1)  # 64 heads: the uniform draws show their ranges
    log, power = build({"name": "kerple_log"}, wide), build({"name": "kerple_power"}, wide)
    assert 1.0 < log.r1.max() <= 2.0 and log.r2.max() <= 1.0 and log.r1.min() >= 0.01 and log.r2.min() >= 0.01
    assert power.r1.max() <= 1.0 and 1.0 < power.r2.max() <= 2.0
    with torch.no_grad():
        power.r1.fill_(-3.0)
        power.r2.fill_(5.0)
    power.score_bias(4, CPU)
    assert torch.all(power.r1 == 0.01) and torch.all(power.r2 == 2.0)  # clamped in place, as the paper's code


def test_kerple_power_at_r2_1_is_alibi_and_the_log_variant_grows_only_logarithmically():
    power, alibi = build({"name": "kerple_power"}), build({"name": "alibi", "slopes": [0.5, 0.25]})
    log = build({"name": "kerple_log"})
    with torch.no_grad():
        power.r1.copy_(torch.tensor([0.5, 0.25]))
        power.r2.fill_(1.0)
        log.r1.fill_(1.0)
        log.r2.fill_(1.0)
    assert torch.allclose(
        upper_triangle_free(power.score_bias(32, CPU)), upper_triangle_free(alibi.score_bias(32, CPU))
    )
    row = log.score_bias(1025, CPU)[0, -1].flip(-1)  # distances 0 .. 1024
    # doubling the distance costs ~ r1 log 2 far away, where ALiBi's cost doubles with it
    assert (row[512] - row[1024]).item() == pytest.approx(math.log(2), abs=2e-3)
    assert (row[8] - row[16]).item() == pytest.approx(math.log(17 / 9), rel=1e-5)


# ---- FIRE ----------------------------------------------------------------------------------------------------------
def test_fire_is_the_papers_equation():
    encoding = build({"name": "fire", "threshold": 6.0, "c": 0.5, "per_layer": False})
    fire = encoding.fire[0]
    with torch.no_grad():
        fire.threshold_multiplier.fill_(-1.5)  # L = |m * L0| = 9
    w1, b1 = fire.mlp[0].weight[:, 0].tolist(), fire.mlp[0].bias.tolist()
    w2, b2 = fire.mlp[2].weight.tolist(), fire.mlp[2].bias.tolist()
    bias = encoding.score_bias(20, CPU)
    for t in range(20):
        for s in range(t + 1):
            x = math.log(0.5 * (t - s) + 1) / (math.log(0.5 * max(9.0, t) + 1) + 1e-6)
            hidden = [max(0.0, w * x + b) for w, b in zip(w1, b1)]
            for h in range(SHAPE.n_heads):
                expected = sum(w * a for w, a in zip(w2[h], hidden)) + b2[h]
                assert bias[h, t, s].item() == pytest.approx(expected, rel=1e-5, abs=1e-6)


def test_fires_input_stays_in_0_1_so_a_longer_sequence_brings_no_new_input():
    for threshold in (8.0, 512.0):
        fire = build({"name": "fire", "threshold": threshold, "per_layer": False}).fire[0]
        for length in (1, 2, 32, 256):
            x = fire.normalised_distance(length, CPU).tril()  # keys at or before the query
            assert x.min() >= 0 and x.max() <= 1
    fire = build({"name": "fire", "threshold": 8.0, "per_layer": False}).fire[0]
    trained, longer = fire.normalised_distance(32, CPU).tril(), fire.normalised_distance(256, CPU).tril()
    assert trained.max() > 0.999  # training at 32 already covers [0, 1] (queries past L = 8 reach 1) ...
    assert longer.max() <= trained.max() + 1e-6  # ... so 256 asks for nothing beyond it
    assert torch.equal(longer[:32, :32], trained)  # a query's inputs do not depend on the sequence's length
    far = build({"name": "fire"}).fire[0]  # L = 512 above both lengths: no interpolation, the range grows
    assert far.normalised_distance(256, CPU).max() > far.normalised_distance(32, CPU).max() + 0.2


def test_fire_reuses_its_bias_in_evaluation_until_the_length_or_the_weights_change():
    torch.manual_seed(0)
    fire = build({"name": "fire", "threshold": 8.0, "per_layer": False}).fire[0]
    fire.eval()
    with torch.no_grad():
        first = fire(16, CPU)
        assert fire(16, CPU) is first and torch.equal(first, fire._bias(16, CPU))  # reused, and what it would compute
        shorter = fire(8, CPU)
        assert shorter.shape == (SHAPE.n_heads, 8, 8) and torch.equal(shorter, first[:, :8, :8])
        fire.mlp[0].weight.add_(0.1)  # an optimizer step updates in place: the bias is computed again
        updated = fire(8, CPU)
        assert not torch.equal(updated, shorter) and torch.equal(updated, fire._bias(8, CPU))
        fire.mlp[2].bias.data = fire.mlp[2].bias + 1.0  # replaced, not updated in place
        assert torch.equal(fire(8, CPU), updated + 1.0)
        updated = fire(8, CPU)
    with torch.inference_mode():  # Lightning's evaluation
        assert fire(8, CPU) is updated
    fire.train()  # training: a fresh bias with its graph every time, and the kept one dropped
    trained = fire(8, CPU)
    assert trained.requires_grad and fire(8, CPU) is not trained and fire._last is None


def test_fire_is_per_layer_by_default_as_its_authors_and_labelled_by_its_deviation_when_shared():
    assert build({"name": "fire"}).per_layer and build({"name": "fire"}).label() == "fire"
    assert len(build({"name": "fire"}).fire) == SHAPE.n_layers
    assert build(CONFIGS["fire"]).label() == "fire:shared"


def test_fire_per_layer_gives_each_layer_its_own_bias_through_the_score_term():
    model = tiny(CONFIGS["fire_layer"], "explicit")
    assert model.encoding.score_bias(8, CPU) is None and len(model.encoding.fire) == 2
    tokens = torch.randint(0, 16, (1, 8))
    context = [LayerContext(layer, torch.zeros(1, 8, 32), None, PositionInputs.from_tokens(tokens)) for layer in (0, 1)]
    q = torch.zeros(1, 2, 8, 16)
    terms = [model.encoding.score_term(c, q, q) for c in context]
    assert terms[0].shape == (1, 2, 8, 8) and not torch.allclose(terms[0], terms[1])
    assert torch.allclose(terms[1][0], model.encoding.fire[1](8, CPU))


def papers_fire(weights: dict[str, torch.Tensor], length: int) -> torch.Tensor:
    """The paper's FIRE restated (Li et al. 2023, its equation and PyTorch listing): ``f(psi(t - s) / (psi(max(L, t))
    + eps))`` with ``psi(x) = log(|c x| + 1)``, ``L = |m L0|`` and ``f`` the MLP ``1 -> 32 -> H`` (ReLU); ``[H, T, T]``.
    """
    position = torch.arange(length, dtype=torch.float64)
    threshold = (weights["m"] * weights["L0"]).abs()
    psi = lambda x: torch.log((weights["c"] * x).abs() + 1)  # noqa: E731
    x = psi(position[:, None] - position[None, :]) / (psi(torch.maximum(position, threshold))[:, None] + 1e-6)
    hidden = torch.relu(x[..., None] * weights["w1"] + weights["b1"])  # [T, T, 32]
    return (hidden @ weights["w2"].T + weights["b2"]).permute(2, 0, 1)


def test_fire_is_the_papers_formula_on_random_settings_forward_and_gradient():
    generator = torch.Generator().manual_seed(6)
    for length, threshold in [(24, 10.0), (40, 512.0), (33, 3.0)]:
        fire = build({"name": "fire", "threshold": threshold}).fire[1]  # a per-layer FIRE (the default)
        with torch.no_grad():
            fire.c.fill_(0.05 + torch.rand((), generator=generator).item())
            fire.threshold_multiplier.fill_(-0.5 - torch.rand((), generator=generator).item())  # |m L0|: the sign
            for parameter in fire.mlp.parameters():
                parameter.copy_(torch.randn(parameter.shape, generator=generator))
        reference = {
            "c": fire.c.detach().double().requires_grad_(),
            "m": fire.threshold_multiplier.detach().double().requires_grad_(),
            "L0": torch.tensor(threshold, dtype=torch.float64),
            "w1": fire.mlp[0].weight.detach()[:, 0].double().requires_grad_(),
            "b1": fire.mlp[0].bias.detach().double().requires_grad_(),
            "w2": fire.mlp[2].weight.detach().double().requires_grad_(),
            "b2": fire.mlp[2].bias.detach().double().requires_grad_(),
        }
        causal = torch.ones(length, length).tril()  # keys at or before the query: what attention reads
        probe = torch.randn(SHAPE.n_heads, length, length, generator=generator) * causal
        fire.train()
        ours = fire(length, CPU)
        expected = papers_fire(reference, length)
        torch.testing.assert_close(ours * causal, (expected * causal).float(), rtol=1e-4, atol=1e-5)
        (ours * probe).sum().backward()
        (expected * probe.double()).sum().backward()
        mine = {
            "c": fire.c.grad,
            "m": fire.threshold_multiplier.grad,
            "w1": fire.mlp[0].weight.grad[:, 0],
            "b1": fire.mlp[0].bias.grad,
            "w2": fire.mlp[2].weight.grad,
            "b2": fire.mlp[2].bias.grad,
        }
        for key, grad in mine.items():
            torch.testing.assert_close(grad.double(), reference[key].grad, rtol=1e-3, atol=1e-4, msg=key)
        if threshold > length:  # L above every query: the normaliser is psi(L) and m is learned through it
            assert fire.threshold_multiplier.grad.abs() > 0


def test_fire_per_layer_is_independent_each_layer_trains_only_its_own():
    encoding = tiny({"name": "fire", "threshold": 8.0}, "explicit").encoding
    tokens = torch.randint(0, 16, (1, 12), generator=torch.Generator().manual_seed(2))
    inputs = PositionInputs.from_tokens(tokens)
    q = torch.zeros(1, 2, 12, 16)

    def term(layer: int) -> torch.Tensor:
        return encoding.score_term(LayerContext(layer, torch.zeros(1, 12, 32), None, inputs), q, q)

    for layer, other in [(0, 1), (1, 0)]:
        encoding.zero_grad(set_to_none=True)
        term(layer).square().sum().backward()
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in encoding.fire[layer].mlp.parameters())
        assert all(p.grad is None for p in encoding.fire[other].parameters())  # the other layer's FIRE: untouched
    before = term(0).detach()
    with torch.no_grad():
        for parameter in encoding.fire[1].parameters():
            parameter.add_(1.0)
    assert torch.equal(term(0).detach(), before)  # changing layer 1's FIRE leaves layer 0's bias as it was
    assert not {id(p) for p in encoding.fire[0].parameters()} & {id(p) for p in encoding.fire[1].parameters()}


def test_fire_per_layer_keeps_each_layers_bias_for_reuse_in_evaluation(monkeypatch):
    model = tiny({"name": "fire", "threshold": 8.0}, "sdpa")
    tokens = torch.randint(0, 16, (2, 20), generator=torch.Generator().manual_seed(3))
    calls: list[int] = []
    compute = FireBias._bias

    def counted(self, length, device):
        calls.append(id(self))
        return compute(self, length, device)

    monkeypatch.setattr(FireBias, "_bias", counted)
    model.eval()
    with torch.enable_grad():  # a gradient wanted: computed afresh every time
        fresh = model(tokens).logits
    assert len(calls) == 2
    calls.clear()
    with torch.no_grad():
        first, second = model(tokens).logits, model(tokens[:, :20]).logits
    assert sorted(calls) == sorted(id(fire) for fire in model.encoding.fire)  # once per layer, then reused
    assert torch.equal(first, second) and torch.allclose(first, fresh, atol=1e-6)
    kept = [fire._last[1] for fire in model.encoding.fire]
    assert kept[0] is not kept[1] and not torch.allclose(kept[0], kept[1])  # each layer keeps its own
    with torch.no_grad():
        model.encoding.fire[1].mlp[2].bias.add_(1.0)  # an update to one layer recomputes that layer's only
        calls.clear()
        model(tokens)
    assert calls == [id(model.encoding.fire[1])]


# ---- Sandwich ------------------------------------------------------------------------------------------------------
def test_sandwich_is_the_papers_equation():
    for dim in (16, 128):
        encoding = build({"name": "sandwich", "dim": dim}, ModelShape(32, 4, 1, 8))
        bias = encoding.score_bias(40, CPU)
        for h in range(4):
            for t, s in [(0, 0), (5, 2), (39, 0), (30, 17)]:
                total = sum(math.cos((t - s) / 10000 ** (2 * i / dim)) for i in range(1, dim // 2 + 1))
                expected = (total - dim / 2) / (8 * (h + 1) / 4)
                assert bias[h, t, s].item() == pytest.approx(expected, rel=1e-4, abs=1e-4)


def test_sandwich_is_the_inner_product_of_sinusoids_minus_its_maximum_zero_on_the_diagonal_and_never_positive():
    dim, length, n_heads = 32, 300, 4
    encoding = build({"name": "sandwich", "dim": dim}, ModelShape(32, n_heads, 1, 8))
    bias = encoding.score_bias(length, CPU).double()
    position = torch.arange(length, dtype=torch.float64)[:, None]
    w = 10000.0 ** (-2.0 * torch.arange(1, dim // 2 + 1, dtype=torch.float64) / dim)
    embeddings = torch.cat([torch.sin(position * w), torch.cos(position * w)], dim=-1)  # p_m, [T, d']
    inner = embeddings @ embeddings.T
    assert torch.allclose(inner.max(dim=-1).values, torch.full((length,), dim / 2, dtype=torch.float64))
    divisors = 8.0 * torch.arange(1, n_heads + 1, dtype=torch.float64) / n_heads
    expected = (inner - dim / 2)[None] / divisors[:, None, None]
    assert torch.allclose(upper_triangle_free(bias), upper_triangle_free(expected), atol=1e-3)
    assert (bias.diagonal(dim1=-2, dim2=-1) == 0).all() and (bias <= 1e-6).all()
    assert (bias[0].tril() <= bias[-1].tril() + 1e-9).all()  # the first head penalises most, as ALiBi's slopes


# ---- SSMax ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("inner", ["rope", "none"])
def test_ssmax_weights_are_the_papers_softmax_of_s_log_n_times_the_scores(inner):
    model = tiny({"name": "ssmax", "inner": inner}, "explicit")
    with torch.no_grad():
        model.encoding.s.copy_(torch.tensor([[0.3, 0.7], [1.1, 0.5]]))
    tokens = torch.randint(0, 16, (2, 12), generator=torch.Generator().manual_seed(2))
    weights = model(tokens, return_attention=True).attention[0]  # layer 0 [B, H, T, T]
    block = model.blocks[0]
    x = block.norm1(model.embed(tokens))
    q, k, _ = block.attn.qkv(x).view(2, 12, 3, 2, 16).permute(2, 0, 3, 1, 4)
    if inner == "rope":
        angles = rotation_angles(torch.arange(12.0)[None], inverse_frequencies(16, 10_000.0))
        q, k = apply_rotary(q, angles, "interleaved"), apply_rotary(k, angles, "interleaved")
    z = q @ k.transpose(-2, -1) / math.sqrt(16)
    n = torch.arange(1, 13, dtype=torch.float32)  # keys seen by queries 0 .. 11
    scale = torch.tensor([0.3, 0.7])[:, None, None] * torch.log(n)[:, None]  # s[0, h] log n, per query row
    expected = (scale * z + torch.full((12, 12), float("-inf")).triu(1)).softmax(-1)
    assert torch.allclose(weights, expected, atol=1e-6)
    assert torch.allclose(weights[:, :, 0, 0], torch.ones(2, 2))  # the first query: log 1 = 0, one key, weight 1
    # layer 1 reads its own s
    context = LayerContext(1, torch.zeros(1, 12, 32), torch.arange(12.0)[None], PositionInputs.from_tokens(tokens))
    second = model.encoding.query_key_transform(context, None).query_scale
    assert torch.allclose(second[0, :, :, 0], torch.tensor([1.1, 0.5])[:, None] * torch.log(n))


def test_ssmax_keeps_a_key_ahead_by_a_fixed_margin_from_fading_as_plain_softmax_does():
    encoding = build({"name": "ssmax", "inner": "none"}, ModelShape(16, 1, 1, 16))
    margin = 4.0
    kept, faded = [], []
    for n in (16, 64, 256, 1024):
        q = torch.zeros(1, 1, n, 16)
        q[..., 0] = margin * math.sqrt(16)  # every query scores the target key `margin` above the others (0)
        k = torch.zeros(1, 1, n, 16)
        k[:, :, 0, 0] = 1.0
        transform = encoding.query_key_transform(LayerContext(0, torch.zeros(1, n, 16), None, None), None)
        scores = transform.queries(q)[0, 0, -1] @ transform.keys(k)[0, 0].T / math.sqrt(16)  # the last query, n keys
        plain = q[0, 0, -1] @ k[0, 0].T / math.sqrt(16)
        kept.append(scores.softmax(-1)[0].item())
        faded.append(plain.softmax(-1)[0].item())
    assert kept[-1] > 0.99 and all(b >= a - 1e-6 for a, b in zip(kept, kept[1:]))  # s m = 1.72 > 1: it sharpens
    assert faded[-1] < 0.06 and all(b < a for a, b in zip(faded, faded[1:]))  # e^m / (e^m + n - 1) -> 0
