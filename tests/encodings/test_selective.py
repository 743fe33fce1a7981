"""Selective attention (issue 38) against the paper's pseudocode (Leviathan et al. 2024, Figure 2), transcribed
step by step in numpy, forward; gradients flow to the selecting head; the encoding in a model."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from poslab.encodings.selective import selection_term
from poslab.model import ModelConfig, Transformer


def pseudocode_weights(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """The paper's selective attention weights for one sequence: q, k [H, T, d] -> [H, T, T] (float64)."""
    heads, n, d = q.shape
    logits = np.einsum("hnd,hmd->hnm", q, k) / np.sqrt(d)
    causal = np.tril(np.ones((n, n), dtype=bool))
    logits = np.where(causal, logits, -np.inf)
    S = logits[0].copy()  # only head 0
    S = np.maximum(S, 0)  # only positive selection
    S[..., 0] = 0  # do not mask <BOS>
    S = (1 - np.eye(n)) * S  # do not mask self
    S = np.roll(S, 1, axis=-2)  # mask strictly in the future
    S[..., 0, :] = 0
    F_ = np.cumsum(S, axis=-2)  # accumulate
    logits = logits - F_[None]
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    return weights / weights.sum(-1, keepdims=True)


def test_the_term_gives_the_papers_weights():
    generator = torch.Generator().manual_seed(0)
    q, k = (torch.randn(2, 3, 11, 8, generator=generator, dtype=torch.float64) * 2 for _ in range(2))
    term = selection_term(q, k)  # [B, 1, T, T]
    causal = torch.ones(11, 11, dtype=torch.bool).tril()
    scores = (q @ k.transpose(-2, -1)) / np.sqrt(8) + term
    mine = scores.masked_fill(~causal, float("-inf")).softmax(-1)
    for b in range(2):
        np.testing.assert_allclose(
            mine[b].numpy(), pseudocode_weights(q[b].numpy(), k[b].numpy()), rtol=1e-5, atol=1e-7
        )
    assert torch.all(term <= 0) and torch.all(term[:, :, 0] == 0) and torch.all(term[..., 0] == 0)


def test_only_head_0_selects_and_the_term_is_causal():
    generator = torch.Generator().manual_seed(1)
    q, k = (torch.randn(1, 2, 9, 4, generator=generator, requires_grad=True) for _ in range(2))
    term = selection_term(q, k)
    term.sum().backward()
    assert q.grad[:, 1].abs().sum() == 0 and q.grad[:, 0].abs().sum() > 0
    changed_k = k.detach().clone()
    changed_k[:, :, 6:] += 1.0  # later keys: rows 0..6 of the term read nothing of them (row i: queries < i)
    again = selection_term(q.detach(), changed_k)
    torch.testing.assert_close(again[..., :7, :6], term.detach()[..., :7, :6])


def test_the_encoding_trains():
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=16, n_outputs=16, d_model=32, n_heads=2, n_layers=2, encoding={"name": "selective"})
    model = Transformer(cfg, max_length=20)
    tokens = torch.randint(0, 16, (3, 20))
    F.cross_entropy(model(tokens[:, :-1]).logits.reshape(-1, 16), tokens[:, 1:].reshape(-1)).backward()
    assert model.blocks[1].attn.qkv.weight.grad.abs().sum() > 0


def pseudocode_torch(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """The paper's Figure 2 in torch, line for line (q, k [B, H, T, d]): the attention weights, differentiable."""
    n, dk = q.shape[-2], q.shape[-1]
    causal_mask = torch.ones(n, n, dtype=torch.bool).tril()
    attn_logits = torch.einsum("bhnd,bhmd->bhnm", q, k) / np.sqrt(dk)
    attn_logits = torch.where(causal_mask, attn_logits, float("-inf"))
    S = attn_logits[:, 0]  # Only head 0
    S = F.relu(S)  # Only positive selection
    S = S.clone()
    S[..., 0] = 0  # Do not mask <BOS>
    S = (1 - torch.eye(n, dtype=q.dtype)) * S  # Do not mask self
    S = torch.roll(S, 1, -2)  # Mask strictly in the future
    S[..., 0, :] = 0
    F_ = torch.cumsum(S, dim=-2)  # Accumulate
    attn_logits = attn_logits - F_[:, None]
    return attn_logits.softmax(-1)


def test_the_term_gives_the_papers_weights_and_gradients_in_torch():
    generator = torch.Generator().manual_seed(3)
    q, k = (torch.randn(2, 3, 10, 8, generator=generator, dtype=torch.float64, requires_grad=True) for _ in range(2))
    causal = torch.ones(10, 10, dtype=torch.bool).tril()
    scores = (q @ k.transpose(-2, -1)) / np.sqrt(8) + selection_term(q, k)
    mine = scores.masked_fill(~causal, float("-inf")).softmax(-1)
    reference = pseudocode_torch(q, k)
    # the term is computed in fp32 (selection_term casts): fp32 tolerances
    torch.testing.assert_close(mine, reference, rtol=1e-5, atol=1e-6)
    weights = torch.randn(mine.shape, generator=generator, dtype=torch.float64)
    mine_grads = torch.autograd.grad((mine * weights).sum(), (q, k))
    reference_grads = torch.autograd.grad((reference * weights).sum(), (q, k))
    for a, b in zip(mine_grads, reference_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
