"""The encodings: the write-up's checks, backend agreement, and the bad-config messages."""

from __future__ import annotations

import math

import pytest
import torch

from poslab.encodings import ENCODINGS, ModelShape, build_encoding
from poslab.encodings.alibi import paper_slopes
from poslab.encodings.rotary import apply_rotary, inverse_frequencies, rotation_angles
from poslab.errors import ConfigError
from poslab.lightning_modules.base import log_length_scale
from poslab.model import Attention, AttentionSettings, LayerEncoding, ModelConfig, Transformer, causal_mask

ENCODING_SETTINGS = {
    "none": {},
    "sinusoid": {},
    "learned": {"max_positions": 64},
    "rope": {"base": 10_000},
    "alibi": {"slopes": None},
}


def tiny(encoding: str, attention: str = "sdpa", n_heads: int = 2, **settings) -> Transformer:
    torch.manual_seed(0)
    cfg = ModelConfig(
        vocab_size=16,
        n_outputs=16,
        n_heads=n_heads,
        d_model=32,
        attention=attention,
        encoding={"name": encoding, **ENCODING_SETTINGS[encoding], **settings},
    )
    return Transformer(cfg, max_length=64)


def test_registry_lists_the_spine_encodings():
    assert set(ENCODING_SETTINGS) <= set(ENCODINGS)


def rope_score(q, k, m, n, base=10_000.0, pairing="interleaved"):
    inv = inverse_frequencies(q.shape[-1], base)

    def rot(x, p):
        ang = rotation_angles(torch.tensor([[float(p)]]), inv)  # [1, 1, P]
        return apply_rotary(x.view(1, 1, 1, -1), ang, pairing).flatten()

    return float(rot(q, m) @ rot(k, n))


@pytest.mark.parametrize("pairing", ["interleaved", "half"])
def test_rope_score_depends_only_on_distance(pairing):
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(8, generator=g, dtype=torch.float64), torch.randn(8, generator=g, dtype=torch.float64)
    q, k = q.float(), k.float()
    scores = [rope_score(q, k, m, m + 2, pairing=pairing) for m in (3, 10, 100)]
    assert max(scores) - min(scores) < 1e-4
    assert abs(rope_score(q, k, 3, 10, pairing=pairing) - scores[0]) > 1e-3  # another distance, another score
    # rotation keeps length
    inv = inverse_frequencies(8, 10_000.0)
    ang = rotation_angles(torch.tensor([[57.0]]), inv)
    rotated = apply_rotary(q.view(1, 1, 1, -1), ang, pairing)
    assert torch.allclose(rotated.norm(), q.norm(), atol=1e-5)


def test_rope_matches_the_writeup_formula():
    """The write-up's numpy rope(): pairs (2i, 2i+1), theta_i = base^(-i/half)."""
    x = torch.randn(8)
    half = 4
    theta = 10_000.0 ** (-torch.arange(half) / half)
    ang = 5.0 * theta
    expected = torch.empty(8)
    expected[0::2] = x[0::2] * ang.cos() - x[1::2] * ang.sin()
    expected[1::2] = x[0::2] * ang.sin() + x[1::2] * ang.cos()
    a = rotation_angles(torch.tensor([[5.0]]), inverse_frequencies(8, 10_000.0))
    assert torch.allclose(apply_rotary(x.view(1, 1, 1, 8), a, "interleaved").flatten(), expected, atol=1e-6)


def test_attention_without_positions_is_permutation_equivariant_and_causal_mask_breaks_it():
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=4, n_outputs=4, d_model=8, n_heads=1, attention="explicit")
    attn = Attention(cfg)
    x = torch.randn(1, 5, 8)
    perm = torch.randperm(5)
    while torch.equal(perm, torch.arange(5)):
        perm = torch.randperm(5)
    no_mask = torch.zeros(1, 1, 5, 5)
    full = lambda inp: attn(inp, AttentionSettings(mask=no_mask), LayerEncoding())[0]
    causal = lambda inp: attn(inp, AttentionSettings(mask=causal_mask(5, inp.device)[None, None]), LayerEncoding())[0]
    assert torch.allclose(full(x[:, perm]), full(x)[:, perm], atol=1e-6)
    assert not torch.allclose(causal(x[:, perm]), causal(x)[:, perm], atol=1e-4)


@pytest.mark.parametrize("encoding", list(ENCODING_SETTINGS))
@pytest.mark.parametrize("score_scale", [1.0, math.log(64) / math.log(16), "per_query"])
def test_sdpa_and_explicit_backends_agree(encoding, score_scale):
    tokens = torch.randint(0, 16, (3, 40))
    if score_scale == "per_query":  # log-length scaling: one factor per query position, 1 up to t + 1 = 16
        score_scale = log_length_scale(40, 16)
    sdpa, explicit = tiny(encoding, "sdpa"), tiny(encoding, "explicit")
    explicit.load_state_dict(sdpa.state_dict())
    a = sdpa(tokens, score_scale=score_scale).logits
    out = explicit(tokens, score_scale=score_scale, return_attention=True)
    assert torch.allclose(a, out.logits, atol=1e-5)
    assert len(out.attention) == 2 and out.attention[0].shape == (3, 2, 40, 40)
    # the sdpa backend also materialises weights when asked (analyses), and they agree
    assert torch.allclose(
        sdpa(tokens, return_attention=True).attention[1],
        explicit(tokens, return_attention=True).attention[1],
        atol=1e-5,
    )


def test_alibi_bias_sign_and_slope():
    shape = ModelShape(d_model=32, n_heads=2, n_layers=1, head_dim=16)
    alibi = build_encoding({"name": "alibi", "slopes": [0.5, 0.0625]}, shape, 16)
    bias = alibi.score_bias(6, torch.device("cpu"))
    assert bias.shape == (2, 6, 6)
    assert bias[0, 5, 2] == pytest.approx(-0.5 * 3)  # query 5, key 2: distance 3, penalty slope * 3
    assert bias[1, 5, 0] == pytest.approx(-0.0625 * 5)
    assert torch.all(bias.diagonal(dim1=-2, dim2=-1) == 0)
    assert torch.all(bias <= 0)
    assert alibi.label() == "alibi:0.5" or alibi.label() == "alibi"
    geometric = build_encoding({"name": "alibi", "slopes": None}, ModelShape(64, 8, 1, 8), 16)
    assert torch.allclose(geometric.slopes, torch.tensor([2.0 ** -(h + 1) for h in range(8)]))
    assert paper_slopes(8)[-1] == 1 / 256


def test_alibi_penalises_distance_in_the_attention_weights():
    model = tiny("alibi", "explicit", n_heads=1, slopes=[4.0])
    tokens = torch.zeros(1, 8, dtype=torch.long)  # identical tokens: content scores are all equal
    weights = model(tokens, return_attention=True).attention[0][0, 0, 7]
    assert torch.all(weights[1:] > weights[:-1])  # nearer keys get more attention


def test_labels():
    shape = ModelShape(64, 1, 2, 64)
    assert build_encoding({"name": "rope", "base": 1_000_000}, shape, 128).label() == "rope:1000000"
    assert build_encoding({"name": "rope"}, shape, 128).label() == "rope"
    assert build_encoding({"name": "alibi", "slopes": [0.0625]}, shape, 128).label() == "alibi:0.0625"


@pytest.mark.parametrize(
    ("settings", "shape", "fragment"),
    [
        ({"name": "nope"}, ModelShape(64, 1, 2, 64), "registered encodings are: alibi, "),
        ({"name": "rope", "rotary_dim": 7}, ModelShape(64, 1, 2, 64), "must be even"),
        ({"name": "rope"}, ModelShape(63, 7, 2, 9), "must be even"),
        ({"name": "rope", "pairing": "diagonal"}, ModelShape(64, 1, 2, 64), "allowed: interleaved, half"),
        (
            {"name": "alibi", "slopes": [0.5, 0.25]},
            ModelShape(64, 1, 2, 64),
            "2 values [0.5, 0.25] but the model has 1 heads",
        ),
        ({"name": "learned", "max_positions": 64}, ModelShape(64, 1, 2, 64), "max_positions=64 is shorter"),
        ({"name": "rope", "colour": 3}, ModelShape(64, 1, 2, 64), "accepts only"),
    ],
)
def test_bad_encoding_settings_give_one_clear_sentence(settings, shape, fragment):
    with pytest.raises(ConfigError, match=None) as info:
        build_encoding(settings, shape, max_length=128)
    assert fragment in str(info.value)


def test_rope_half_and_interleaved_pairings_are_a_reordering():
    x = torch.randn(1, 1, 3, 8)
    ang = rotation_angles(torch.arange(3.0)[None], inverse_frequencies(8, 100.0))
    interleaved = apply_rotary(x, ang, "interleaved")
    order = torch.tensor([0, 2, 4, 6, 1, 3, 5, 7])  # (2i, 2i+1) -> (i, i + 4)
    half = apply_rotary(x[..., order], ang, "half")
    assert torch.allclose(half, interleaved[..., order], atol=1e-6)


def test_partial_rotary_leaves_the_rest_unchanged():
    model = tiny("rope", rotary_dim=8)
    x = torch.randn(1, 2, 5, 16)
    ang = rotation_angles(torch.arange(5.0)[None], model.encoding.inv_freq)
    out = apply_rotary(x, ang, "interleaved")
    assert torch.equal(out[..., 8:], x[..., 8:]) and not torch.allclose(out[..., :8], x[..., :8])


def test_a_learned_table_left_null_is_as_long_as_the_run_needs():
    cfg = ModelConfig(vocab_size=16, n_outputs=16, d_model=32, n_heads=2, encoding={"name": "learned"})
    assert Transformer(cfg, max_length=256).encoding.table.num_embeddings == 256  # the longest evaluation length
    given = ModelConfig(
        vocab_size=16, n_outputs=16, d_model=32, n_heads=2, encoding={"name": "learned", "max_positions": 300}
    )
    assert Transformer(given, max_length=256).encoding.table.num_embeddings == 300
