"""DAPE (issue 38) against the authors' code (chuanyang-Zheng/DAPE, DAPE.py: ``AliBi_DAPE`` and
``ParallelKerpleLog_DAPE``), their forward transcribed verbatim (megatron's model-parallel slicing and the
inference-cache branch dropped, CUDA device -> CPU): same weights, random scores, forward and gradients."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from poslab.encodings import build_encoding
from poslab.encodings.base import ModelShape
from poslab.errors import ConfigError
from poslab.model import ModelConfig, Transformer
from tests.encodings.test_alibi_slopes import get_slopes


class AuthorsAliBiDAPE(nn.Module):
    """``AliBi_DAPE`` (mp_size=1): its slopes, its mlp2 and its forward."""

    def __init__(self, num_heads, mlp_width=32):
        super().__init__()
        self.num_heads = num_heads
        self.register_buffer("slopes", torch.Tensor(self._get_slopes(num_heads)))
        self.mlp2 = nn.Sequential(nn.Linear(num_heads * 2, mlp_width), nn.LeakyReLU(), nn.Linear(mlp_width, num_heads))

    def _get_slopes(self, n):
        return get_slopes(n)  # the authors' copy of ALiBi's get_slopes, the one transcribed for ALiBi's test

    def forward(self, x):
        target_seq_len = x.shape[-1]
        a = -torch.tril(
            torch.arange(target_seq_len).view(target_seq_len, 1).repeat(1, target_seq_len)
            + torch.arange(0, -target_seq_len, -1)
        )
        a = a.to(x.device).to(x.dtype)
        slopes = self.slopes.to(a.device).to(a.dtype)
        a = a * slopes.view(self.slopes.shape[0], 1, 1)
        x_a_bias = torch.cat((x, torch.tile(a, (x.shape[0], 1, 1, 1))), dim=1)
        x_a_bias = torch.permute(x_a_bias, (0, 2, 3, 1))
        x_a_bias = self.mlp2(x_a_bias)
        x_a_bias = torch.permute(x_a_bias, (0, 3, 1, 2))
        return x + a + x_a_bias


class AuthorsKerpleLogDAPE(nn.Module):
    """``ParallelKerpleLog_DAPE``: bias_p ~ U(0, 2), bias_a ~ U(0, 1) per head, clamped to >= 1e-2; its forward."""

    def __init__(self, neox_args):
        super().__init__()
        self.num_heads_per_partition = neox_args.num_attention_heads
        self.eps = 1e-2
        self.bias_p = nn.Parameter(torch.rand(self.num_heads_per_partition)[:, None, None] * 2)
        self.bias_a = nn.Parameter(torch.rand(self.num_heads_per_partition)[:, None, None] * 1)
        self.mlp2 = nn.Sequential(
            nn.Linear(self.num_heads_per_partition * 2, neox_args.mlp_width),
            nn.LeakyReLU(),
            nn.Linear(neox_args.mlp_width, self.num_heads_per_partition),
        )

    def forward(self, x):
        seq_len_k = x.shape[-1]
        diff = torch.tril(
            torch.arange(seq_len_k, device=x.device).view(seq_len_k, 1).repeat(1, seq_len_k)
            + torch.arange(0, -seq_len_k, -1, device=x.device)
        )
        diff = diff.to(x.dtype)
        self.bias_p.data = self.bias_p.data.clamp(min=self.eps)
        self.bias_a.data = self.bias_a.data.clamp(min=self.eps)
        bias = -self.bias_p * torch.log(1 + self.bias_a * diff)  # log kernel
        x_a_bias = torch.cat((x, torch.tile(bias, (x.shape[0], 1, 1, 1))), dim=1)
        x_a_bias = torch.permute(x_a_bias, (0, 2, 3, 1))
        x_a_bias = self.mlp2(x_a_bias)
        x_a_bias = torch.permute(x_a_bias, (0, 3, 1, 2))
        return x + bias + x_a_bias


def compare(base_bias: str, heads: int) -> None:
    torch.manual_seed(0)
    shape = ModelShape.of(8 * heads, heads, 2)
    encoding = build_encoding({"name": "dape", "base_bias": base_bias}, shape, max_length=16)
    layer = encoding.layers[1]
    if base_bias == "alibi":
        theirs = AuthorsAliBiDAPE(heads)
        torch.testing.assert_close(theirs.slopes, layer.bias.slopes)
    else:
        theirs = AuthorsKerpleLogDAPE(SimpleNamespace(num_attention_heads=heads, mlp_width=32))
        theirs.bias_p.data = layer.bias.r1.data[:, None, None].clone()
        theirs.bias_a.data = layer.bias.r2.data[:, None, None].clone()
    theirs.mlp2.load_state_dict(layer.mlp.state_dict())
    q, k = (torch.randn(2, heads, 12, 8, requires_grad=True) for _ in range(2))
    scores = q @ k.transpose(-2, -1) / math.sqrt(8)
    causal = torch.ones(12, 12, dtype=torch.bool).tril()
    mine = scores + encoding.score_term(SimpleNamespace(layer=1), q, k)
    reference = theirs(scores)
    torch.testing.assert_close(mine[..., causal], reference[..., causal], rtol=1e-5, atol=1e-5)
    weights = torch.randn(2, heads, 12, 12)
    (mine_q, mine_k, mine_w) = torch.autograd.grad(
        (mine[..., causal] * weights[..., causal]).sum(), (q, k, layer.mlp[0].weight), retain_graph=True
    )
    (ref_q, ref_k, ref_w) = torch.autograd.grad(
        (reference[..., causal] * weights[..., causal]).sum(), (q, k, theirs.mlp2[0].weight)
    )
    for a, b in ((mine_q, ref_q), (mine_k, ref_k), (mine_w, ref_w)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("heads", [4, 6])
def test_dape_alibi_is_the_authors(heads):
    compare("alibi", heads)


def test_dape_kerple_is_the_authors():
    compare("kerple_log", 4)


def test_the_term_is_causal_and_per_layer():
    torch.manual_seed(1)
    encoding = build_encoding({"name": "dape"}, ModelShape.of(16, 2, 2), max_length=10)
    q, k = torch.randn(1, 2, 10, 8), torch.randn(1, 2, 10, 8)
    term = encoding.score_term(SimpleNamespace(layer=0), q, k)
    changed = k.clone()
    changed[:, :, 7:] += 3.0
    again = encoding.score_term(SimpleNamespace(layer=0), q, changed)
    torch.testing.assert_close(again[..., :7, :7], term[..., :7, :7])  # queries < 7 read no later key
    other = encoding.score_term(SimpleNamespace(layer=1), q, k)
    assert not torch.allclose(other, term)  # each layer its own MLP and KERPLE


def test_bad_settings_stop_clearly():
    shape = ModelShape.of(16, 2, 2)
    with pytest.raises(ConfigError, match="base_bias='t5'"):
        build_encoding({"name": "dape", "base_bias": "t5"}, shape, max_length=8)
    with pytest.raises(ConfigError, match="mlp_width=0"):
        build_encoding({"name": "dape", "mlp_width": 0}, shape, max_length=8)


def test_the_encoding_trains():
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=16, n_outputs=16, d_model=32, n_heads=2, n_layers=2, encoding={"name": "dape"})
    model = Transformer(cfg, max_length=20)
    tokens = torch.randint(0, 16, (3, 20))
    F.cross_entropy(model(tokens[:, :-1]).logits.reshape(-1, 16), tokens[:, 1:].reshape(-1)).backward()
    assert model.encoding.layers[1].mlp[0].weight.grad.abs().sum() > 0
    assert model.encoding.layers[0].bias.r1.grad.abs().sum() > 0
