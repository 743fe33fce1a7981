"""xPos against the authors' code (microsoft/torchscale) and their evaluation: blockwise causal attention."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor

from poslab.encodings import ModelShape, PositionInputs, build_encoding
from poslab.encodings.base import LayerContext
from poslab.encodings.xpos import XposEncoding
from poslab.errors import ConfigError
from tests.conftest import tiny_model

D_MODEL, N_HEADS, HEAD_DIM = 32, 2, 16


# ---- the reference: torchscale/component/xpos_relative_position.py (microsoft/torchscale, commit 776b070d, MIT
# licence, Copyright (c) 2022 Microsoft), copied as it is but for formatting and type hints ----------------------
def fixed_pos_embedding(x: Tensor) -> tuple[Tensor, Tensor]:
    seq_len, dim = x.shape
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim) / dim))
    sinusoid_inp = torch.einsum("i , j -> i j", torch.arange(0, seq_len, dtype=torch.float), inv_freq).to(x)
    return torch.sin(sinusoid_inp), torch.cos(sinusoid_inp)


def rotate_every_two(x: Tensor) -> Tensor:
    x1 = x[:, :, ::2]
    x2 = x[:, :, 1::2]
    x = torch.stack((-x2, x1), dim=-1)
    return x.flatten(-2)


def duplicate_interleave(m: Tensor) -> Tensor:
    dim0 = m.shape[0]
    m = m.view(-1, 1)
    m = m.repeat(1, 2)
    m = m.view(dim0, -1)
    return m


def apply_rotary_pos_emb(x: Tensor, sin: Tensor, cos: Tensor, scale: Tensor | float = 1) -> Tensor:
    sin, cos = map(lambda t: duplicate_interleave(t * scale), (sin, cos))
    return (x * cos) + (rotate_every_two(x) * sin)


class XPOS(torch.nn.Module):
    def __init__(self, head_dim: int, scale_base: float = 512) -> None:
        super().__init__()
        self.head_dim = head_dim
        self.scale_base = scale_base
        self.register_buffer("scale", (torch.arange(0, head_dim, 2) + 0.4 * head_dim) / (1.4 * head_dim))

    def forward(self, x: Tensor, offset: int = 0, downscale: bool = False) -> Tensor:
        length = x.shape[1]
        min_pos = -(length + offset) // 2
        max_pos = length + offset + min_pos
        scale = self.scale ** torch.arange(min_pos, max_pos, 1).to(self.scale).div(self.scale_base)[:, None]
        sin, cos = fixed_pos_embedding(scale)
        if scale.shape[0] > length:
            scale = scale[-length:]
            sin = sin[-length:]
            cos = cos[-length:]
        if downscale:
            scale = 1 / scale
        x = apply_rotary_pos_emb(x, sin, cos, scale)
        return x


# ---- the comparison -----------------------------------------------------------------------------------------------
def xpos(max_length: int = 64, train_length: int | None = None, **settings: Any) -> XposEncoding:
    shape = ModelShape.of(D_MODEL, N_HEADS, 1)
    return build_encoding({"name": "xpos", **settings}, shape, max_length, train_length=train_length)


def ours(q: Tensor, k: Tensor, gamma: float) -> tuple[Tensor, Tensor]:
    enc = xpos(scale_base=gamma)
    inputs = PositionInputs.from_tokens(torch.zeros(q.shape[0], q.shape[2], dtype=torch.long))
    hidden = torch.zeros(q.shape[0], q.shape[2], D_MODEL)
    _, state = enc.begin(hidden, inputs)
    transform = enc.query_key_transform(LayerContext(0, hidden, state, inputs), None)
    return transform.queries(q), transform.keys(k)


def theirs(q: Tensor, k: Tensor, gamma: float) -> tuple[Tensor, Tensor]:
    """torchscale's attention: ``q = xpos(q)``, ``k = xpos(k, downscale=True)`` on ``[B * H, T, head_dim]``."""
    reference = XPOS(HEAD_DIM, scale_base=gamma)
    flat = lambda x: x.reshape(-1, *x.shape[2:])  # noqa: E731
    back = lambda x: x.view(q.shape)  # noqa: E731
    return back(reference(flat(q))), back(reference(flat(k), downscale=True))


@pytest.mark.parametrize(("length", "gamma"), [(24, 16.0), (64, 512.0), (25, 16.0)])
def test_xpos_is_torchscale_s_xpos(length, gamma):
    """Random queries and keys (seeded), rel tol 1e-5: the scores always; the transformed queries and keys too
    at even lengths (at odd ones torchscale centres at ceil(L / 2), poslab at L // 2: the factors differ by
    zeta ** (1 / gamma), the scores not)."""
    g = torch.Generator().manual_seed(7)
    q, k = (torch.randn(2, N_HEADS, length, HEAD_DIM, generator=g) for _ in range(2))
    our_q, our_k = ours(q, k, gamma)
    ref_q, ref_k = theirs(q, k, gamma)
    scores, reference = our_q @ our_k.transpose(-1, -2), ref_q @ ref_k.transpose(-1, -2)
    assert torch.allclose(scores, reference, rtol=1e-5, atol=1e-5)
    if length % 2 == 0:
        assert torch.allclose(our_q, ref_q, rtol=1e-5, atol=1e-6)
        assert torch.allclose(our_k, ref_k, rtol=1e-5, atol=1e-6)
    else:
        assert not torch.allclose(our_q, ref_q, rtol=1e-3, atol=1e-4)  # another centre: the odd case is tested
    assert not torch.allclose(reference, q @ k.transpose(-1, -2), atol=1e-2)  # the reference does something


# ---- blockwise causal attention -----------------------------------------------------------------------------------
def paper_rule(length: int, pretraining: int) -> Tensor:
    """Who sees whom, from the paper's words: past the pre-training length l, blocks of l/2, each query its own
    block and the last one (causal); within l, every earlier key (training's causal attention)."""
    block = pretraining // 2
    seen = torch.zeros(length, length, dtype=torch.bool)
    for t in range(length):
        for s in range(t + 1):
            seen[t, s] = t < pretraining or s // block in (t // block, t // block - 1)
    return seen


@pytest.mark.parametrize(("length", "pretraining"), [(40, 16), (37, 9), (16, 16)])
def test_the_blockwise_mask_is_the_paper_s_rule_past_the_pretraining_length(length, pretraining):
    enc = xpos(max_length=64, train_length=pretraining)
    assert enc.blockwise and enc.blockwise_length == pretraining  # null: the training length
    bias = enc.score_bias(length, torch.device("cpu"))
    if length <= pretraining:
        assert bias is None  # nothing to hide: training's attention
        return
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    assert bias.shape == (1, length, length)
    assert torch.equal((bias[0] == 0) & causal, paper_rule(length, pretraining))
    block = pretraining // 2
    keys_seen = paper_rule(length, pretraining).sum(-1)[pretraining:]
    assert keys_seen.min() >= block and keys_seen.max() <= 2 * block  # each query: b to 2b keys


def test_blockwise_false_is_plain_causal_attention_at_every_length():
    enc = xpos(max_length=64, train_length=8, blockwise=False)
    assert enc.score_bias(64, torch.device("cpu")) is None and enc.score_mod() is None
    assert enc.label() == "xpos:causal" and xpos().label() == "xpos"


def model(attention: str, **settings: Any):
    return tiny_model("xpos", attention, n_heads=N_HEADS, d_model=D_MODEL, scale_base=16.0, **settings).eval()


def test_blockwise_attention_hides_the_keys_and_changes_only_the_queries_past_the_pretraining_length():
    tokens = torch.randint(0, 16, (2, 40), generator=torch.Generator().manual_seed(1))
    blockwise, plain = model("explicit", blockwise_length=16), model("explicit", blockwise=False)
    with torch.no_grad():
        out, reference = blockwise(tokens, return_attention=True), plain(tokens)
    hidden = ~paper_rule(40, 16)
    for weights in out.attention:
        assert torch.all(weights[..., hidden] == 0)
    assert torch.allclose(out.logits[:, :16], reference.logits[:, :16], atol=1e-6)  # within l: as trained
    assert not torch.allclose(out.logits[:, 16:], reference.logits[:, 16:], atol=1e-3)


@pytest.mark.slow
def test_blockwise_attention_is_the_same_on_sdpa_explicit_and_flex():
    tokens = torch.randint(0, 16, (3, 40), generator=torch.Generator().manual_seed(2))
    models = {path: model(path, blockwise_length=16) for path in ("sdpa", "explicit", "flex")}
    for path in ("sdpa", "flex"):
        models[path].load_state_dict(models["explicit"].state_dict())
    with torch.no_grad():
        expected = models["explicit"](tokens).logits
        assert torch.allclose(models["sdpa"](tokens).logits, expected, atol=1e-5)
        assert torch.allclose(models["flex"](tokens).logits, expected, atol=1e-4)
        assert not torch.allclose(model("explicit", blockwise=False)(tokens).logits, expected, atol=1e-3)


@pytest.mark.parametrize(
    ("settings", "fragment"),
    [
        ({"blockwise": "yes"}, r"encoding.blockwise='yes' must be true or false"),
        ({"blockwise_length": 1}, r"encoding.blockwise_length=1 must be a whole number of at least 2"),
        ({"blockwise_length": 16.5}, r"encoding.blockwise_length=16.5 must be a whole number"),
    ],
)
def test_bad_blockwise_settings_say_what_is_allowed(settings, fragment):
    with pytest.raises(ConfigError, match=fragment):
        xpos(**settings)
