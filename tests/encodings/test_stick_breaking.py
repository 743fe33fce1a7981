"""Stick-breaking attention (issue 38): against fla-core 0.6.0's naive reference (loaded by file path), the
authors' sb_ref and the paper's product written out as a loop, forward and gradient; the encoding in a model."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from poslab.encodings.stick_breaking import stick_breaking_attention
from poslab.model import ModelConfig, Transformer
from tests.encodings.fla_reference import fla_naive


def qkv(B: int, T: int, H: int, D: int, dtype=torch.float32, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(B, T, H, D, generator=generator, dtype=dtype) for _ in range(3)]


@pytest.mark.parametrize("attend_current", [False, True])
def test_stick_breaking_is_flas_naive_reference_forward_and_gradient(attend_current):
    naive = fla_naive("stickbreaking_attn").naive_stickbreaking_attn
    q, k, v = (x.requires_grad_() for x in qkv(2, 50, 3, 16))
    mine, mine_left = stick_breaking_attention(q, k, v, attend_current=attend_current)
    theirs, theirs_left = naive(q, k, v, attend_current=attend_current)
    torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(mine_left, theirs_left, rtol=1e-5, atol=1e-6)
    cotangent = torch.randn_like(mine)
    grads = [torch.autograd.grad((out * cotangent).sum(), (q, k, v)) for out in (mine, theirs)]
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def sb_ref(q, k, v, mask, cum_weight):
    """The authors' reference, ``stickbreaking`` of shawntan/stickbreaking-attention ``stickbreaking_attention/
    sb_ref.py`` (commit ea69b8d), its steps transcribed (its debug print left out): ``[B, H, T, D]``, the hidden
    keys ``mask`` filled with -1e5 in log space, the breaks after each key summed by a matmul with the strictly
    lower-triangular ``cum_weight``. Returns (output, remaining stick)."""
    logits = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    log_z = F.logsigmoid(logits.float()).masked_fill(mask, -1e5)
    log_beta = F.logsigmoid(-logits.float()).masked_fill(mask, 0)
    log_att = log_z + torch.einsum("bhij,jk->bhik", log_beta, cum_weight.to(log_beta))
    att = log_att.exp()
    return att @ v, 1 - att.sum(dim=-1)


@pytest.mark.parametrize("attend_current", [False, True])
def test_stick_breaking_is_the_authors_sb_ref_forward_and_gradient(attend_current):
    """As the authors' tests/test_attn.py calls it: mask triu(1) (attend_current) or triu(0), cum_weight tril(-1);
    both in fp32, so only the order of sums differs (the tolerances)."""
    q, k, v = (x.requires_grad_() for x in qkv(2, 40, 3, 16, seed=4))
    T = 40
    mask = torch.ones(T, T).triu(1 if attend_current else 0).bool()
    theirs, theirs_left = sb_ref(*(x.transpose(1, 2) for x in (q, k, v)), mask, torch.ones(T, T).tril(-1))
    mine, mine_left = stick_breaking_attention(q, k, v, attend_current=attend_current)
    torch.testing.assert_close(mine, theirs.transpose(1, 2), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(mine_left, theirs_left.transpose(1, 2), rtol=1e-5, atol=1e-6)
    cotangent = torch.randn_like(mine)
    grads = [torch.autograd.grad((out * cotangent).sum(), (q, k, v)) for out in (mine, theirs.transpose(1, 2))]
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("attend_current", [False, True])
def test_the_weights_are_the_papers_broken_stick(attend_current):
    """A_ij = sigmoid(z_ij) * prod over the visible keys l after j of (1 - sigmoid(z_il)), fp64, as a loop."""
    q, k, v = qkv(1, 7, 1, 4, dtype=torch.float64, seed=2)
    out, left = stick_breaking_attention(q, k, v, scale=0.7, attend_current=attend_current)
    z = (q[0, :, 0] @ k[0, :, 0].T) * 0.7
    for i in range(7):
        last = i if attend_current else i - 1
        weights = torch.zeros(7, dtype=torch.float64)
        for j in range(last + 1):
            weights[j] = torch.sigmoid(z[i, j]) * torch.prod(1 - torch.sigmoid(z[i, j + 1 : last + 1]))
        torch.testing.assert_close(out[0, i, 0], weights @ v[0, :, 0], rtol=1e-12, atol=1e-12)
        assert left[0, i, 0].item() == pytest.approx(1 - weights.sum().item(), abs=1e-12)


@pytest.mark.parametrize(
    ("settings", "label", "own_key"),
    [({}, "stick_breaking:past_only", False), ({"attend_current": True}, "stick_breaking", True)],
    ids=["default", "attend_current"],
)
def test_the_encoding_trains_and_its_weights_are_a_broken_stick(settings, label, own_key):
    """The default runs as the authors' kernel (past keys only: the diagonal and the first query's row are empty);
    ``attend_current: true`` gives each query its own key first."""
    torch.manual_seed(0)
    cfg = ModelConfig(
        vocab_size=16, n_outputs=16, d_model=32, n_heads=2, n_layers=2, encoding={"name": "stick_breaking", **settings}
    )
    model = Transformer(cfg, max_length=20)
    tokens = torch.randint(0, 16, (3, 20))
    out = model(tokens[:, :-1])
    F.cross_entropy(out.logits.reshape(-1, 16), tokens[:, 1:].reshape(-1)).backward()
    assert model.blocks[0].attn.qkv.weight.grad.abs().sum() > 0
    with torch.no_grad():
        weights = model(tokens, return_attention=True).attention[0]
    assert torch.all(weights.sum(-1) <= 1 + 1e-6) and torch.all(weights >= 0) and torch.all(weights.triu(1) == 0)
    diagonal = weights.diagonal(dim1=-2, dim2=-1)
    assert bool(diagonal.min() > 0) if own_key else bool(torch.all(diagonal == 0))
    assert weights[:, :, 1, 0].min() > 0 and model.encoding.label() == label
