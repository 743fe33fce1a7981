"""Scalable-Softmax, SSMax (Nakanishi, 2025, "Scalable-Softmax Is Superior for Attention", arXiv 2501.19399): the
softmax over ``n`` keys takes its scores times ``s * log(n)``.

For a query at ``t`` (0-based), which attends to ``n = t + 1`` keys (causal), in layer ``l`` and head ``h``::

    weights[t, :] = softmax( s[l, h] * log(t + 1) * z[t, :] ),   z = the layer's scores (q . k / sqrt(head_dim))

that is ``n ** (s z_i) / sum_j n ** (s z_j)``: a key ahead of the others by a fixed margin keeps its weight as
``n`` grows, where plain softmax's weight falls like ``1 / n`` ("attention fading", the paper's motivation). The
factor depends on the query only, so it is a query scale on top of the inner transform: ``Scaled(inner,
query_scale=s * log(t + 1), key_scale=None)`` (``base.py``), on every attention path, flex too.

``inner``: ``rope`` (default; the paper's models use RoPE), this class's ``RotaryEncoding`` rotation at the token
index (``base``, ``pairing``, ``rotary_dim``), or ``none``: NoPE, the identity before the scale. ``s`` is learned
per layer and head, as in the paper. ``s_init``: 0.43, the value of
the paper's Figure 1 and the default of the scalable-softmax package (an unofficial implementation); the paper's own
starting value for training was not available to check here. The first query (``n = 1``): ``log 1 = 0`` makes its
scores all 0, and a softmax over one key is 1 whatever its score: the same as the paper's formula, which needs no
case there. ``s`` is kept out of weight decay (a scalar per head, as norms' gains).

Scaling rules (``scaling``, ``test_scaling``, the test-time variants; ``rotary.RotaryEncoding``), with ``inner:
rope``: the rotation's frequencies only, as ``rope``'s (YaRN's attention factor on the rotated features too); the
query scale ``s * log(t + 1)`` is computed as without a rule. With ``inner: none`` there is no rotation: no rule.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from poslab.config.settings import check_number
from poslab.encodings.base import LayerContext, ModelShape, QueryKeyTransform, Scaled, register
from poslab.encodings.rotary import OptionalRotation


@register("ssmax")
class SsmaxEncoding(OptionalRotation):
    summary = (
        "Scalable-Softmax: each query's scores times s * log(number of keys it sees), s learned per layer and head, "
        "over RoPE (inner: rope) or NoPE (inner: none)."
    )
    no_weight_decay = ("s",)

    def __init__(self, shape: ModelShape, s_init: float, **inner_and_rotary: Any) -> None:
        super().__init__(shape, **inner_and_rotary)  # inner; base, pairing, rotary_dim
        self.s = nn.Parameter(torch.full((shape.n_layers, shape.n_heads), float(s_init)))

    @classmethod
    def validate(cls, settings: dict[str, Any], shape: ModelShape, max_length: int) -> None:
        super().validate(settings, shape, max_length)
        s_init = settings["s_init"]
        check_number("encoding.s_init", s_init, 0, meaning="the starting s of s * log(n); the paper: 0.43")

    def query_key_transform(self, context: LayerContext, previous: QueryKeyTransform | None) -> Scaled:
        """Layer ``l``'s inner transform (the rotation reused from the layer before), then its queries times
        ``s[l, h] * log(t + 1)`` ``[1, H, T, 1]`` in fp32."""
        rotation = super().query_key_transform(context, previous.inner if isinstance(previous, Scaled) else None)
        inner = rotation if rotation is not None else QueryKeyTransform()  # over NoPE: the identity
        length = context.hidden.shape[1]
        log_keys = torch.log1p(torch.arange(length, device=context.hidden.device, dtype=torch.float32))  # log(t + 1)
        scale = self.s[context.layer].float()[:, None] * log_keys[None, :]  # [H, T]
        return Scaled(inner, query_scale=scale[None, :, :, None], key_scale=None)
