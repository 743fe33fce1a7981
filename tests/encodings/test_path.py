"""PaTH and PaTH-FoX (issue 38): ``path_attention`` against fla-core 0.6.0's naive reference (loaded by file path)
and against the paper's product of Householder transforms written out; the encodings in a model."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from poslab.encodings.path import path_attention, path_scores
from poslab.model import ModelConfig, Transformer
from tests.encodings.fla_reference import fla_naive


def inputs(B: int, T: int, H: int, D: int, dtype=torch.float32, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    draw = lambda *shape: torch.randn(*shape, generator=generator, dtype=dtype)  # noqa: E731
    q, k, v = draw(B, T, H, D), draw(B, T, H, D), draw(B, T, H, D)
    w = F.normalize(draw(B, T, H, D), dim=-1)
    beta = 2 * torch.rand(B, T, H, generator=generator, dtype=dtype)
    g = F.logsigmoid(draw(B, T, H) + 2)
    return q, k, v, w, beta, g


@pytest.mark.parametrize("gated", [False, True])
def test_path_attention_is_flas_naive_reference_at_T100_H3_D24_forward_and_gradient(gated):
    naive = fla_naive("path_attn").naive_path_attn
    q, k, v, w, beta, g = (x.requires_grad_() for x in inputs(2, 100, 3, 24))
    mine = path_attention(q, k, v, w, beta, g if gated else None)
    theirs = naive(q, k, v, w, beta, g if gated else torch.zeros_like(g), 24**-0.5)
    torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=2e-5)  # both fp32; orders of sums differ
    cotangent = torch.randn_like(mine)
    grads = lambda out: torch.autograd.grad((out * cotangent).sum(), (q, k, v, w, beta, g), allow_unused=True)  # noqa: E731
    for a, b in zip(grads(mine), grads(theirs)):
        if a is not None or b is not None:
            torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("T", [1, 2, 3, 64, 65, 129])
def test_any_length_and_width(T):
    naive = fla_naive("path_attn").naive_path_attn
    q, k, v, w, beta, g = inputs(1, T, 2, 5, seed=T)
    torch.testing.assert_close(
        path_attention(q, k, v, w, beta, g), naive(q, k, v, w, beta, g, 5**-0.5), rtol=1e-4, atol=2e-5
    )


def test_scores_are_the_papers_product_of_householder_transforms():
    """fp64, every pair: q_i^T (I - b_i w_i w_i^T) ... (I - b_{j+1} w_{j+1} w_{j+1}^T) k_j."""
    q, k, _, w, beta, _ = inputs(1, 9, 1, 4, dtype=torch.float64, seed=3)
    scores = path_scores(*(x.transpose(1, 2) for x in (q, k, w)), beta.transpose(1, 2))[0, 0]
    eye = torch.eye(4, dtype=torch.float64)
    for i in range(9):
        for j in range(9):
            if j > i:
                assert scores[i, j] == float("-inf")
                continue
            product = eye
            for s in range(i, j, -1):  # H_i H_{i-1} ... H_{j+1}
                product = product @ (eye - beta[0, s, 0] * torch.outer(w[0, s, 0], w[0, s, 0]))
            assert scores[i, j].item() == pytest.approx(
                (q[0, i, 0] @ product @ k[0, j, 0]).item(), rel=1e-12, abs=1e-12
            )


def test_without_transforms_it_is_causal_softmax_attention():
    q, k, v, w, _, _ = inputs(2, 12, 2, 8, seed=5)
    plain = F.scaled_dot_product_attention(*(x.transpose(1, 2) for x in (q, k, v)), is_causal=True).transpose(1, 2)
    torch.testing.assert_close(path_attention(q, k, v, w, torch.zeros(2, 12, 2)), plain, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["path", "path_fox"])
def test_the_encodings_train_and_return_their_weights(name):
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=16, n_outputs=16, d_model=32, n_heads=2, n_layers=2, encoding={"name": name})
    model = Transformer(cfg, max_length=24)
    tokens = torch.randint(0, 16, (3, 24))
    out = model(tokens[:, :-1])
    F.cross_entropy(out.logits.reshape(-1, 16), tokens[:, 1:].reshape(-1)).backward()
    vectors = model.encoding.vectors[1]
    assert vectors.w_up.weight.grad is not None and vectors.beta.weight.grad.abs().sum() > 0
    if name == "path_fox":
        assert model.encoding.gates[0].weight.grad.abs().sum() > 0
    with torch.no_grad():
        weights = model(tokens, return_attention=True).attention
    assert len(weights) == 2 and weights[0].shape == (3, 2, 24, 24)
    torch.testing.assert_close(weights[0].sum(-1), torch.ones(3, 2, 24))
    assert torch.all(weights[0].triu(1) == 0)


def test_fp32_stays_close_to_fp64_at_long_length():
    """The UT form's triangular solve in fp32, T = 512, nearly parallel w and beta near 2 (eigenvalues near -1):
    the outputs within 1e-4 of fp64's (measured 2e-6 at T = 2,048)."""
    generator = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(1, 512, 1, 16, generator=generator, dtype=torch.float64) for _ in range(3))
    along = torch.randn(1, 1, 1, 16, generator=generator, dtype=torch.float64)
    w = F.normalize(along + 0.05 * torch.randn(1, 512, 1, 16, generator=generator, dtype=torch.float64), dim=-1)
    beta = 1.9 + 0.1 * torch.rand(1, 512, 1, generator=generator, dtype=torch.float64)
    exact = path_attention(q, k, v, w, beta)
    single = path_attention(*(x.float() for x in (q, k, v, w, beta)))
    torch.testing.assert_close(single.double(), exact, rtol=0, atol=1e-4)
