"""DAPE (Zheng et al., 2024, "DAPE: Data-Adaptive Positional Encoding for Length Extrapolation", NeurIPS 2024): a
static relative bias made data-adaptive by a small MLP that reads, per (query, key), the attention scores of all
heads and the bias of all heads, and adds one value per head::

    term[t, s] = bias[t, s] + MLP([scores[:, t, s], bias[:, t, s]])      (2H -> mlp_width -> LeakyReLU -> H)

As the authors' code (github.com/chuanyang-Zheng/DAPE, ``DAPE.py``: ``ParallelKerpleLog_DAPE.forward`` and
``AliBi_DAPE.forward``, ``x + bias + mlp2(cat(x, bias))`` with ``x`` the scaled scores ``q.k / sqrt(d)``): one module
per layer (its own MLP and, for KERPLE, its own ``r1, r2``), the base bias KERPLE (log) or ALiBi (``base_bias``;
the paper's headline is DAPE-Kerple), the bias from poslab's ``kerple.py`` / ``alibi.py``. The MLP acts on each
(query, key) pair alone, so the term is causal; scores of keys after the query enter only their own (masked)
entries. Computed in fp32 (autocast off). A ``score_term``: the scores it reads are the layer's.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from poslab.config.settings import check_choice, check_whole
from poslab.encodings.alibi import AlibiEncoding
from poslab.encodings.base import LayerContext, ModelShape, PositionEncoding, register
from poslab.encodings.kerple import KerpleLogEncoding

BASE_BIASES = ("kerple_log", "alibi")


class AdaptiveBias(nn.Module):
    """One layer's DAPE: its base bias (a poslab encoding's ``score_bias``) and the MLP over scores and bias."""

    def __init__(self, shape: ModelShape, base_bias: str, mlp_width: int) -> None:
        super().__init__()
        self.bias = KerpleLogEncoding(shape) if base_bias == "kerple_log" else AlibiEncoding(shape, None)
        heads = shape.n_heads
        self.mlp = nn.Sequential(nn.Linear(2 * heads, mlp_width), nn.LeakyReLU(), nn.Linear(mlp_width, heads))

    def forward(self, q: Tensor, k: Tensor) -> Tensor:
        """``term [B, H, T, T]`` (fp32): the bias plus the MLP's correction, from queries and keys ``[B, H, T, d]``."""
        with torch.autocast(q.device.type, enabled=False):
            scores = (q.float() @ k.float().transpose(-2, -1)) / math.sqrt(q.shape[-1])
            bias = self.bias.score_bias(q.shape[-2], q.device).float()[None].expand_as(scores)
            features = torch.cat((scores, bias), dim=1).permute(0, 2, 3, 1)  # [B, T, T, 2H]
            return bias + self.mlp(features).permute(0, 3, 1, 2)


@register("dape")
class DapeEncoding(PositionEncoding):
    """DAPE (the module docstring): per layer, a base bias plus an MLP of the scores and the bias."""

    summary = (
        "DAPE: each layer adds a KERPLE or ALiBi bias plus a small MLP of all heads' scores and biases at each "
        "query-key pair (data-adaptive bias)."
    )
    attention_paths = ("sdpa", "explicit")  # a per-layer term that reads q and k: no score_mod

    def __init__(self, shape: ModelShape, base_bias: str, mlp_width: int) -> None:
        super().__init__(shape)
        self.base_bias, self.mlp_width = base_bias, int(mlp_width)
        self.layers = nn.ModuleList(AdaptiveBias(shape, base_bias, self.mlp_width) for _ in range(shape.n_layers))

    @classmethod
    def validate(cls, settings: dict[str, Any], shape: ModelShape, max_length: int) -> None:
        check_choice("encoding.base_bias", settings["base_bias"], BASE_BIASES)
        check_whole("encoding.mlp_width", settings["mlp_width"], 1, "the hidden width of the MLP; the authors' 32")

    def score_term(self, context: LayerContext, q: Tensor, k: Tensor) -> Tensor:
        return self.layers[context.layer](q, k)

    def extra_flops_per_token(self, length: int, batch: int) -> float:
        """Per layer and token, the scores' own ``q k^T`` over every head (``2 d_model T``) and the MLP ``2H ->
        mlp_width -> H`` at each of its ``T`` pairs (``6 H mlp_width`` each); times 3 for training. The base bias
        (KERPLE, ALiBi) is elementwise."""
        shape = self.shape
        per_layer = 2.0 * shape.d_model * length + 6.0 * shape.n_heads * self.mlp_width * length
        return 3.0 * shape.n_layers * per_layer

    def label(self) -> str:
        return f"dape:{self.base_bias}"
