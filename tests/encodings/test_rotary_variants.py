"""xpos, randomized_rope and rope_nope_mix: each against its reference or its defining property."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import Tensor

from poslab.encodings import ModelShape, PositionInputs, build_encoding
from poslab.encodings.base import LayerContext, PositionEncoding, QueryKeyTransform
from poslab.encodings.rotary import apply_rotary, inverse_frequencies, rotation_angles
from poslab.encodings.xpos import xpos_zeta
from poslab.errors import ConfigError
from poslab.model import Transformer
from tests.conftest import tiny_model

D_MODEL, N_HEADS, HEAD_DIM, T = 32, 2, 16, 24


def tiny(name: str, attention: str = "sdpa", n_layers: int = 2, **settings: Any) -> Transformer:
    return tiny_model(name, attention, n_layers=n_layers, n_heads=N_HEADS, d_model=D_MODEL, **settings)


def encoding(name: str, n_layers: int = 1, max_length: int = 64, **settings: Any) -> PositionEncoding:
    return build_encoding({"name": name, **settings}, ModelShape.of(D_MODEL, N_HEADS, n_layers), max_length)


def transform_of(
    enc: PositionEncoding, inputs: PositionInputs, layer: int = 0, previous: QueryKeyTransform | None = None
) -> QueryKeyTransform | None:
    """The encoding's transform of ``layer`` for ``inputs`` (the hidden state is not read by these encodings)."""
    hidden = torch.zeros(*inputs.tokens.shape, D_MODEL)
    _, state = enc.begin(hidden, inputs)
    return enc.query_key_transform(LayerContext(layer, hidden, state, inputs), previous)


def random_qk(length: int = T, batch: int = 2) -> tuple[Tensor, Tensor]:
    g = torch.Generator().manual_seed(3)
    return torch.randn(batch, N_HEADS, length, HEAD_DIM, generator=g), torch.randn(
        batch, N_HEADS, length, HEAD_DIM, generator=g
    )


def tokens(length: int = T, batch: int = 2) -> Tensor:
    return torch.randint(0, 16, (batch, length), generator=torch.Generator().manual_seed(1))


def check_paths_agree(name: str, flex: bool = False, **settings: Any) -> None:
    """The same weights give the same logits on sdpa and explicit (and flex, evaluating)."""
    x = tokens(40, 3)
    sdpa, explicit = tiny(name, "sdpa", **settings), tiny(name, "explicit", **settings)
    explicit.load_state_dict(sdpa.state_dict())
    sdpa.eval(), explicit.eval()
    with torch.no_grad():
        expected = explicit(x).logits
        assert torch.allclose(sdpa(x).logits, expected, atol=1e-5)
        if flex:
            model = tiny(name, "flex", **settings).eval()
            model.load_state_dict(sdpa.state_dict())
            assert torch.allclose(model(x).logits, expected, atol=1e-4)


# ---- xpos ---------------------------------------------------------------------------------------------------
GAMMA = 16.0  # a small scale base: the factors reach ~5 within T positions, so a wrong sign or centre shows


def x_transformers_xpos(q: Tensor, k: Tensor, rotary_dim: int, gamma: float) -> tuple[Tensor, Tensor]:
    from x_transformers.x_transformers import RotaryEmbedding, apply_rotary_pos_emb

    freqs, scale = RotaryEmbedding(rotary_dim, use_xpos=True, scale_base=gamma).forward_from_seq_len(q.shape[-2])
    return apply_rotary_pos_emb(q, freqs, scale), apply_rotary_pos_emb(k, freqs, scale**-1.0)  # as its Attention


def half_to_interleaved(head_dim: int, rotary_dim: int) -> Tensor:
    """Feature order taking ``half``'s pairs (i, i + P) to interleaved places (2i, 2i + 1); the rest stay."""
    pairs = rotary_dim // 2
    order = torch.stack((torch.arange(pairs), torch.arange(pairs) + pairs), dim=-1).flatten()
    return torch.cat((order, torch.arange(rotary_dim, head_dim)))


@pytest.mark.parametrize(
    ("pairing", "rotary_dim"), [("interleaved", None), ("interleaved", 8), ("half", None), ("half", 8)]
)
def test_xpos_queries_keys_and_scores_are_x_transformers(pairing, rotary_dim):
    q, k = random_qk()
    enc = encoding("xpos", scale_base=GAMMA, pairing=pairing, rotary_dim=rotary_dim)
    transform = transform_of(enc, PositionInputs.from_tokens(tokens()))
    ours_q, ours_k = transform.queries(q), transform.keys(k)
    # x-transformers pairs (2i, 2i+1): poslab's half pairing matches it with the features reordered
    order = half_to_interleaved(HEAD_DIM, rotary_dim or HEAD_DIM) if pairing == "half" else torch.arange(HEAD_DIM)
    ref_q, ref_k = x_transformers_xpos(q[..., order], k[..., order], rotary_dim or HEAD_DIM, GAMMA)
    assert torch.allclose(ours_q[..., order], ref_q, rtol=1e-5, atol=1e-5)
    assert torch.allclose(ours_k[..., order], ref_k, rtol=1e-5, atol=1e-5)
    assert torch.allclose(ours_q @ ours_k.transpose(-1, -2), ref_q @ ref_k.transpose(-1, -2), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(ours_q, transform.inner.queries(q), atol=1e-2)  # the scale does something


def test_xpos_score_depends_only_on_distance_and_decays():
    g = torch.Generator().manual_seed(5)
    length, gamma = 64, 4.0
    v = torch.randn(HEAD_DIM, generator=g)
    same = v.expand(1, 1, length, HEAD_DIM)  # one query/key vector at every position: only positions differ

    def scores(positions: Tensor, name: str = "xpos", **settings: Any) -> Tensor:
        inputs = PositionInputs(tokens(length, 1), positions[None].float())
        transform = transform_of(encoding(name, max_length=length, **settings), inputs)
        return (transform.queries(same) @ transform.keys(same).transpose(-1, -2))[0, 0].double()

    at = scores(torch.arange(length), scale_base=gamma)
    shifted = scores(torch.arange(length) + 37, scale_base=gamma)  # another centre, another max position
    assert torch.allclose(at, shifted, rtol=1e-4, atol=1e-5)  # a function of t - s only
    for distance in (0, 5, 40):
        diagonal = at.diagonal(-distance)
        assert torch.allclose(diagonal, diagonal[0].expand_as(diagonal), rtol=1e-4, atol=1e-5)
    # each pair contributes |v_i|^2 cos(distance theta_i) zeta_i^(distance / gamma): bounded by a decaying envelope
    pair_norm = v.double().view(-1, 2).pow(2).sum(-1)  # interleaved pairs
    distance = torch.arange(length, dtype=torch.float64)
    envelope = (pair_norm * xpos_zeta(HEAD_DIM, 0.4).double() ** (distance[:, None] / gamma)).sum(-1)
    by_distance = at[:, 0]  # key at 0, query at t: distance t
    assert torch.all(by_distance.abs() <= envelope + 1e-4)
    assert torch.all(envelope[1:] < envelope[:-1]) and envelope[-1] < 0.05 * envelope[0]
    rope = scores(torch.arange(length), "rope")[:, 0]
    assert by_distance[48:].abs().mean() < 0.1 * rope[48:].abs().mean()  # RoPE alone does not decay so


def test_xpos_scales_are_fp32_under_bf16():
    q, k = random_qk()
    transform = transform_of(encoding("xpos", scale_base=GAMMA), PositionInputs.from_tokens(tokens()))
    assert transform.query_scale.dtype == transform.key_scale.dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = transform.queries(q.bfloat16())
    assert low.dtype == torch.bfloat16
    assert torch.allclose(low.float(), transform.queries(q), rtol=2e-2, atol=2e-2)


@pytest.mark.slow
def test_xpos_paths_agree_and_one_transform_per_forward():
    check_paths_agree("xpos", flex=True, scale_base=GAMMA)
    enc = encoding("xpos", n_layers=2)
    inputs = PositionInputs.from_tokens(tokens())
    first = transform_of(enc, inputs)
    hidden = torch.zeros(2, T, D_MODEL)
    assert enc.query_key_transform(LayerContext(1, hidden, first.positions, inputs), first) is first


@pytest.mark.parametrize(
    ("settings", "max_length", "fragment"),
    [
        ({"scale_base": 0}, 64, r"encoding.scale_base=0 must be a finite number greater than 0"),
        ({"zeta_ratio": 0.0}, 64, r"encoding.zeta_ratio=0.0 must be a finite number greater than 0"),
        ({"zeta_ratio": -1}, 64, r"encoding.zeta_ratio=-1 must be"),
        ({"scale_base": 0.5}, 64, r"scale_base=0.5 .* at most 35 positions .* not 64"),
        ({"pairing": "diagonal"}, 64, r"encoding.pairing"),
    ],
)
def test_xpos_bad_settings(settings, max_length, fragment):
    with pytest.raises(ConfigError, match=fragment):
        encoding("xpos", max_length=max_length, **settings)


def test_xpos_refuses_a_forward_past_its_range_instead_of_infinite_keys():
    enc = encoding("xpos", max_length=32, scale_base=1.0)  # at most 70 positions
    assert transform_of(enc, PositionInputs.from_tokens(tokens(70))).key_scale.isfinite().all()
    with pytest.raises(ConfigError, match="at most 70 positions .* not 71"):
        transform_of(enc, PositionInputs.from_tokens(tokens(71)))


# ---- randomized_rope ----------------------------------------------------------------------------------------
MAX_POSITION = 256


def sampled(enc: PositionEncoding, seeds: list[int] | None, length: int = T, rows: int = 2) -> Tensor:
    coordinates = {} if seeds is None else {"row_seed": torch.tensor(seeds)[:, None]}
    inputs = PositionInputs.from_tokens(tokens(length, len(seeds) if seeds else rows), coordinates)
    return enc.positions(torch.zeros(0), inputs)


def test_randomized_training_positions_are_sorted_distinct_in_range_and_per_row_seeded():
    enc = encoding("randomized_rope", max_position=MAX_POSITION).train()
    positions = sampled(enc, [11, 12, 13])
    assert positions.shape == (3, T) and positions.dtype == torch.float32
    assert torch.all(positions[:, 1:] > positions[:, :-1])  # sorted and distinct
    assert positions.min() >= 0 and positions.max() < MAX_POSITION and torch.equal(positions, positions.round())
    assert not torch.equal(positions[0], positions[1]) and not torch.equal(positions[1], positions[2])
    # a row's draw is a function of its seed alone: not of the batch it is in (DDP), nor of torch's RNG
    torch.manual_seed(123)
    again = sampled(enc, [99, 12])
    assert torch.equal(again[1], positions[1]) and not torch.equal(again[0], positions[0])
    assert not torch.equal(sampled(enc, None), sampled(enc, None))  # without seeds: torch's RNG, fresh draws


def test_randomized_evaluation_positions():
    enc = encoding("randomized_rope", max_position=MAX_POSITION, eval_positions="arange").eval()
    assert torch.equal(sampled(enc, None), torch.arange(float(T))[None])
    enc = encoding("randomized_rope", max_position=MAX_POSITION).eval()  # sampled, from a fixed seed
    first, again = sampled(enc, None), sampled(enc, [5, 6, 7])  # row seeds are ignored in evaluation
    assert first.shape == (1, T) and torch.equal(first, again)
    assert torch.all(first[0, 1:] > first[0, :-1]) and first.max() < MAX_POSITION
    assert not torch.equal(first, torch.arange(float(T))[None])


def test_randomized_training_covers_the_whole_test_range():
    """The paper's point: positions up to max_position (beyond the training length) are all seen in training."""
    enc = encoding("randomized_rope", max_position=MAX_POSITION).train()
    positions = sampled(enc, list(range(200)), length=16)
    assert positions.max() >= MAX_POSITION - 3 and positions.min() <= 2
    seen = torch.zeros(MAX_POSITION, dtype=torch.bool)
    seen[positions.long().flatten()] = True
    assert seen.float().mean() > 0.95  # 3200 draws of 256 positions: every one is seen, up to chance
    neighbours = (positions[:, 1:] - positions[:, :-1]).mean()
    assert 12 < neighbours < 20  # neighbours about max_position / (T + 1) = 15 apart


def test_randomized_rotates_by_the_sampled_positions_and_paths_agree():
    enc = encoding("randomized_rope", max_position=MAX_POSITION).train()
    inputs = PositionInputs.from_tokens(tokens(), {"row_seed": torch.tensor([[4], [8]])})
    transform = transform_of(enc, inputs)
    q, _ = random_qk()
    positions = sampled(enc, [4, 8])
    expected = apply_rotary(q, rotation_angles(positions, inverse_frequencies(HEAD_DIM, 10_000.0)), "interleaved")
    assert torch.allclose(transform.queries(q), expected, atol=1e-6)
    check_paths_agree("randomized_rope", max_position=MAX_POSITION)
    # training: the row seeds decide the positions, so two paths with the same seeds agree too
    x, seeds = tokens(40, 3), {"row_seed": torch.tensor([[1], [2], [3]])}
    sdpa, explicit = tiny("randomized_rope", "sdpa"), tiny("randomized_rope", "explicit")
    explicit.load_state_dict(sdpa.state_dict())
    assert torch.allclose(sdpa(x, seeds).logits, explicit(x, seeds).logits, atol=1e-5)
    assert not torch.allclose(sdpa(x, seeds).logits, sdpa.eval()(x).logits, atol=1e-4)  # evaluation: another draw


def layer_positions(enc: PositionEncoding, inputs: PositionInputs) -> list[Tensor]:
    hidden = torch.zeros(*inputs.tokens.shape, D_MODEL)
    _, state = enc.begin(hidden, inputs)
    return [enc.layer_positions(layer, hidden, state, inputs) for layer in range(enc.shape.n_layers)]


def test_randomized_draws_per_layer_as_the_authors_code():
    """The reference calls hk.next_rng_key() in each layer's attention: every layer rotates by its own subset
    (queries and keys alike); ``layer_draws: shared`` (the named deviation) draws once for all layers."""
    inputs = PositionInputs.from_tokens(tokens(), {"row_seed": torch.tensor([[4], [8]])})
    assert type(encoding("randomized_rope")).yaml_settings()["layer_draws"] == "per_layer"  # the authors'
    own = encoding("randomized_rope", n_layers=3, max_position=MAX_POSITION, layer_draws="per_layer").train()
    per_layer = layer_positions(own, inputs)
    for positions in per_layer:  # each a sorted sample of distinct positions in range
        assert positions.shape == (2, T) and torch.all(positions[:, 1:] > positions[:, :-1])
        assert positions.min() >= 0 and positions.max() < MAX_POSITION
    assert not torch.equal(per_layer[0], per_layer[1]) and not torch.equal(per_layer[1], per_layer[2])
    assert torch.equal(layer_positions(own, inputs)[2], per_layer[2])  # a function of (row seed, layer)
    shared = encoding("randomized_rope", n_layers=3, max_position=MAX_POSITION, layer_draws="shared").train()
    drawn = layer_positions(shared, inputs)
    assert drawn[0] is drawn[1] is drawn[2] and torch.equal(drawn[0], per_layer[0])
    # the layers' rotations differ, so a layer's transform is not the layer before's
    hidden = torch.zeros(2, T, D_MODEL)
    _, state = own.begin(hidden, inputs)
    first = own.query_key_transform(LayerContext(0, hidden, state, inputs), None)
    second = own.query_key_transform(LayerContext(1, hidden, state, inputs), first)
    q, _ = random_qk()
    assert second is not first and not torch.allclose(first.queries(q), second.queries(q))
    # evaluation: each layer its own fixed draw, the same on every call; arange is the same in every layer
    evaluated = layer_positions(own.eval(), inputs)
    assert evaluated[0].shape == (1, T) and not torch.equal(evaluated[0], evaluated[1])
    assert all(torch.equal(a, b) for a, b in zip(evaluated, layer_positions(own, inputs)))
    arange = encoding(
        "randomized_rope", n_layers=3, max_position=MAX_POSITION, eval_positions="arange", layer_draws="per_layer"
    ).eval()
    assert all(torch.equal(p, torch.arange(float(T))[None]) for p in layer_positions(arange, inputs))
    assert shared.label() == own.label() == "randomized_rope:256"  # told apart by the setting's column


def test_randomized_runs_recorded_before_layer_draws_read_as_shared():
    """A results.json or checkpoint from before the setting ran one draw for all layers: read so, not as the
    new default, so that reports set it apart from per-layer runs and a resume keeps what it trained."""
    from poslab.config.targets import with_added_settings

    assert encoding("randomized_rope").layer_draws == "shared"  # an encoding section without it: recorded before
    recorded = {"encoding": {"name": "randomized_rope", "max_position": 2048}}
    assert with_added_settings(recorded)["encoding"]["layer_draws"] == "shared"
    given = {"encoding": {"name": "randomized_rope", "layer_draws": "per_layer"}}
    assert with_added_settings(given)["encoding"]["layer_draws"] == "per_layer"


@pytest.mark.parametrize(
    ("settings", "fragment"),
    [
        ({"max_position": 32}, r"encoding.max_position=32 must be an integer at least .* max_length=64"),
        ({"max_position": 100.5}, r"encoding.max_position=100.5 must be an integer"),
        ({"eval_positions": "linear"}, r"encoding.eval_positions"),
        ({"layer_draws": "per_head"}, r"encoding.layer_draws.*per_layer.*shared"),
    ],
)
def test_randomized_bad_settings(settings, fragment):
    with pytest.raises(ConfigError, match=fragment):
        encoding("randomized_rope", **settings)


# ---- rope_nope_mix ------------------------------------------------------------------------------------------
def rope_rotated(x: Tensor, base: float = 10_000.0) -> Tensor:
    angles = rotation_angles(torch.arange(float(T))[None], inverse_frequencies(HEAD_DIM, base))
    return apply_rotary(x, angles, "interleaved")


def test_rope_nope_mix_leaves_the_last_layer_of_each_group_unrotated():
    enc = encoding("rope_nope_mix", n_layers=6, nope_every=3)
    inputs = PositionInputs.from_tokens(tokens())
    q, k = random_qk()
    previous = None
    for layer in range(6):
        transform = transform_of(enc, inputs, layer, previous)
        if layer in (2, 5):  # 0-based k-1, 2k-1
            assert transform is None
        else:
            assert torch.allclose(transform.queries(q), rope_rotated(q), atol=1e-6)
            assert torch.allclose(transform.keys(k), rope_rotated(k), atol=1e-6)
        previous = transform
    model = tiny("rope_nope_mix", "explicit", n_layers=3, nope_every=2)
    out = model(tokens(), return_positions=True)
    assert out.positions[1] is None and out.positions[0] is not None and out.positions[2] is not None


def test_rope_nope_mix_extremes_are_nope_and_rope():
    x = tokens()
    every = tiny("rope_nope_mix", "explicit", nope_every=1)
    assert torch.equal(every(x).logits, tiny("none", "explicit")(x).logits)  # q, k untouched in every layer
    never = tiny("rope_nope_mix", "explicit", nope_every=3)  # 2 layers: no NoPE layer
    assert torch.equal(never(x).logits, tiny("rope", "explicit")(x).logits)
    assert not torch.allclose(tiny("rope_nope_mix", "explicit", nope_every=2)(x).logits, never(x).logits)


def test_rope_nope_mix_base_per_layer():
    enc = encoding("rope_nope_mix", n_layers=2, nope_every=4, base=[10_000, 100])
    inputs = PositionInputs.from_tokens(tokens())
    q, _ = random_qk()
    first = transform_of(enc, inputs, 0)
    second = transform_of(enc, inputs, 1, first)
    assert second is not first
    assert torch.allclose(first.queries(q), rope_rotated(q, 10_000.0), atol=1e-6)
    assert torch.allclose(second.queries(q), rope_rotated(q, 100.0), atol=1e-6)
    assert enc.label() == "rope_nope_mix:nope4:10000/100"
    same = encoding("rope_nope_mix", n_layers=2, nope_every=4, base=[100, 100])  # 2 layers, none NoPE
    first = transform_of(same, inputs, 0)
    assert transform_of(same, inputs, 1, first) is first  # the same base: the layer before's rotation
    x = tokens()
    assert torch.equal(
        tiny("rope_nope_mix", "explicit", nope_every=4, base=[1000, 1000])(x).logits,
        tiny("rope", "explicit", base=1000)(x).logits,
    )


def test_rope_nope_mix_keeps_its_frequencies_fp32_when_the_model_is_cast():
    model = tiny("rope_nope_mix", base=[10_000, 100]).to(torch.bfloat16)
    assert model.encoding.inv_freq.dtype == torch.float32
    assert torch.equal(model.encoding.inv_freq[1], inverse_frequencies(HEAD_DIM, 100.0))


def test_rope_nope_mix_paths_agree():
    check_paths_agree("rope_nope_mix", nope_every=2, base=[10_000, 500])


@pytest.mark.parametrize(
    ("settings", "fragment"),
    [
        ({"nope_every": 0}, r"encoding.nope_every=0 must be an integer of at least 1"),
        ({"nope_every": 1.5}, r"encoding.nope_every=1.5 must be an integer"),
        ({"nope_every": True}, r"encoding.nope_every=True must be an integer"),
        ({"base": [10_000, 100, 10]}, r"encoding.base=\[10000, 100, 10\] has 3 values but the model has 2 layers"),
        ({"base": [10_000, 0.5]}, r"encoding.base=0.5 must be a number greater than 1"),
    ],
)
def test_rope_nope_mix_bad_settings(settings, fragment):
    with pytest.raises(ConfigError, match=fragment):
        encoding("rope_nope_mix", n_layers=2, **settings)


def test_labels():
    assert encoding("xpos").label() == "xpos"
    assert encoding("xpos", scale_base=256).label() == "xpos:gamma256"
    assert encoding("randomized_rope").label() == "randomized_rope:2048"
    assert encoding("rope_nope_mix").label() == "rope_nope_mix:nope2"  # conf/encoding/rope_nope_mix.yaml's
    assert math.isclose(encoding("xpos").longest, 36_260, rel_tol=1e-3)
