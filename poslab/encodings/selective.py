"""Selective attention (Leviathan, Kalman & Matias, 2024, "Selective Attention Improves Transformer", ICLR 2025): a
token can mask itself out of later tokens' attention. One head's scores decide, in every layer, how much each
token wants each earlier token forgotten from then on; the amounts accumulate and are subtracted from every head.

As the paper's pseudocode (its Figure 2), per layer::

    S = attention logits of head 0            (q . k / sqrt(d), causal: 0 above the diagonal after the ReLU)
    S = relu(S)                               only positive selection
    S[:, 0] = 0                               the first token (<BOS>) is never masked
    S = (1 - I) * S                           a token does not mask itself
    S = roll(S, 1, rows); S[0, :] = 0         a token's selection acts strictly from the next query on
    F = cumsum(S, rows)                       F[i, j] = sum over queries l < i of S[l, j]
    logits = logits - F                       every head's

``F`` at query ``i`` reads only queries before it: causal. It is a ``score_term`` (``-F``, added after the score
scale, as the pseudocode subtracts it from the scaled logits), over NoPE or RoPE (``inner``: the paper's models
keep their own position encoding; poslab's default is NoPE, so that the term is the only position signal, a named
choice). The paper's "memory pruning" (dropping masked keys from the context at inference) is not built: the
figures here are the attention it defines, on full contexts. The exempt first token is a named deviation too: the
paper's models begin with a <BOS> (an attention sink); poslab adds none, so the exempt token is whatever byte or
token opens the window. Tested against a transcription of the pseudocode
(``tests/encodings/test_selective.py``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from poslab.encodings.base import LayerContext, register
from poslab.encodings.cope import ContentTermEncoding


def selection_term(q: Tensor, k: Tensor) -> Tensor:
    """``-F [B, 1, T, T]`` (fp32) from one layer's queries and keys ``[B, H, T, head_dim]`` (head 0 selects)."""
    with torch.autocast(q.device.type, enabled=False):
        length = q.shape[-2]
        logits = (q[:, 0].float() @ k[:, 0].float().transpose(-2, -1)) / math.sqrt(q.shape[-1])  # [B, T, T]
        causal = torch.ones(length, length, dtype=torch.bool, device=q.device).tril()
        selection = F.relu(logits.masked_fill(~causal, 0.0))
        selection = selection.masked_fill(torch.eye(length, dtype=torch.bool, device=q.device), 0.0)
        selection[..., 0] = 0.0  # the first token is never masked
        shifted = F.pad(selection[:, :-1], (0, 0, 1, 0))  # row i holds query i - 1's selection; row 0 none
        return -shifted.cumsum(dim=-2)[:, None]


@register("selective")
class SelectiveAttentionEncoding(ContentTermEncoding):
    """Selective attention (the module docstring) in every layer, over NoPE or RoPE (``inner``)."""

    summary = (
        "Selective attention: head 0's positive scores, accumulated over the queries after them, are subtracted "
        "from every head's later scores (a token masks earlier ones from then on); over NoPE or RoPE (inner)."
    )

    def score_term(self, context: LayerContext, q: Tensor, k: Tensor) -> Tensor:
        return selection_term(q, k)

    def extra_flops_per_token(self, length: int, batch: int) -> float:
        """Per layer and token, head 0's own ``q k^T`` (``2 head_dim T``); times 3 for training."""
        return 6.0 * self.shape.n_layers * self.shape.head_dim * length
