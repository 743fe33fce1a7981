"""Stick-breaking attention (Tan et al., 2024, "Scaling Stick-Breaking Attention: An Efficient Implementation and
In-Depth Study", ICLR 2025): no softmax and no position encoding. Each query breaks a stick from its nearest key
backwards::

    z[i, j] = scale * q_i . k_j
    A[i, j] = sigmoid(z[i, j]) * prod_{j < l < i} (1 - sigmoid(z[i, l]))      (j < i; the query's own key with
                                                                               attend_current: l runs to i)

so the nearest key takes its share of the stick first and what it leaves goes on to the keys before it; the
weights of a query sum to at most 1 and the stick left over goes nowhere (``remaining``). Position comes from the
order of the breaking alone: a key far back gets what the keys after it leave.

Computed in log space, as the authors' ``sb_ref`` (shawntan/stickbreaking-attention) and fla's naive reference:
``log A = logsigmoid(z) + sum_{j < l < i} logsigmoid(-z[i, l])``, a reversed cumulative sum, in fp32 (fp64 for fp64
inputs). The default, ``attend_current: false``, is past keys only (the paper's j < i), as the authors' kernel
(``sb_attn``) and fla's layer run it; a query at position 0 then has no key and an empty stick (its output 0).
``attend_current: true`` (a named deviation, labelled plain ``stick_breaking``) lets a query break its own key
first: the zoos' reruns of issues 37/38 ran it, when it was poslab's default (docs/lm_extrapolation.md measures the
two against each other on WebText). Compared with fla-core
0.6.0's ``naive_stickbreaking_attn`` and a copy of ``sb_ref`` (``tests/encodings/test_stick_breaking.py``).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from poslab.encodings.base import LayerContext, PositionEncoding, register
from poslab.errors import ConfigError


def stick_breaking_weights(q: Tensor, k: Tensor, scale: float, attend_current: bool) -> tuple[Tensor, Tensor]:
    """``(A [B, H, T, T], remaining [B, H, T])`` for ``q``, ``k`` ``[B, H, T, D]`` (the module docstring)."""
    dtype = torch.promote_types(q.dtype, torch.float32)
    z = (q.to(dtype) @ k.to(dtype).transpose(-2, -1)) * scale
    position = torch.arange(q.shape[-2], device=q.device)
    visible = position[None, :] <= position[:, None] if attend_current else position[None, :] < position[:, None]
    log_keep = F.logsigmoid(-z).masked_fill(~visible, 0.0)  # log(1 - sigmoid(z)); a hidden key breaks nothing
    after = log_keep.flip(-1).cumsum(-1).flip(-1) - log_keep  # sum over the visible keys l > j
    weights = (F.logsigmoid(z) + after).masked_fill(~visible, float("-inf")).exp()
    return weights, log_keep.sum(-1).exp()


def stick_breaking_attention(
    q: Tensor, k: Tensor, v: Tensor, scale: float | None = None, attend_current: bool = False
) -> tuple[Tensor, Tensor]:
    """Stick-breaking attention in fla's layout: ``q``, ``k``, ``v`` ``[B, T, H, D]``; returns ``(output [B, T, H,
    D], remaining stick [B, T, H])`` as fla's ``naive_stickbreaking_attn``, ``scale`` default ``1 / sqrt(D)``."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    weights, remaining = stick_breaking_weights(q.transpose(1, 2), k.transpose(1, 2), scale, attend_current)
    output = weights.to(v.dtype) @ v.transpose(1, 2)
    return output.transpose(1, 2).to(q.dtype), remaining.transpose(1, 2).to(q.dtype)


@register("stick_breaking")
class StickBreakingEncoding(PositionEncoding):
    """Stick-breaking attention (the module docstring) in every layer. No ``extra_flops_per_token``: its matrix
    products are ``z = q k^T`` and ``weights v``, the two that ``flops_per_token`` counts for every attention; the
    breaking (log-sigmoids, a cumulative sum) is elementwise, as softmax, and not counted."""

    summary = (
        "Stick-breaking attention: no softmax, no position encoding; each query breaks a stick from its nearest key "
        "backwards (sigmoid of the score times what the keys after it left)."
    )
    attention_paths = ("sdpa", "explicit")  # its own attention on either (the weights materialised)

    def __init__(self, shape: Any, attend_current: bool) -> None:
        super().__init__(shape)
        self.attend_current = bool(attend_current)

    @classmethod
    def validate(cls, settings: dict[str, Any], shape: Any, max_length: int) -> None:
        if not isinstance(settings["attend_current"], bool):
            raise ConfigError(
                f"encoding.attend_current={settings['attend_current']!r} must be false (past keys only, as the "
                f"authors' kernel and fla's layer) or true (a query's own key takes the first share, a named "
                f"deviation)."
            )

    def attention(self, context: LayerContext, q: Tensor, k: Tensor, v: Tensor, scale: float) -> tuple[Tensor, Tensor]:
        with torch.autocast(q.device.type, enabled=False):
            weights, _ = stick_breaking_weights(q, k, scale, self.attend_current)
            return (weights.to(v.dtype) @ v), weights

    def label(self) -> str:
        return "stick_breaking" if self.attend_current else "stick_breaking:past_only"
