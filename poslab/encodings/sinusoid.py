"""Fixed sinusoids added to the token embeddings (Vaswani et al., 2017).

Vaswani et al. multiply the embeddings by sqrt(d_model) before adding the sinusoids (section 3.4; fairseq, the
ALiBi paper's sinusoidal baseline, likewise), and initialise them N(0, d^-1/2), so tokens start at unit scale
beside sinusoids of amplitude 1. ``embedding_scale: null`` multiplies by sqrt(d_model), or by less where that
would put the tokens above that unit scale: a model initialised N(0, 0.02) (the language models) gets sqrt(d_model);
one that keeps PyTorch's N(0, 1) (the where_am_i model) adds its embeddings as they are. Without it, sinusoids of
amplitude 1 outweigh N(0, 0.02) tokens 35-fold and cost the lm_zoo model half a bit per byte at its own length
(docs/absolute_scale.md).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import Tensor

from poslab.encodings.base import ModelShape, PositionEncoding, PositionInputs, register


def sinusoids(positions: Tensor, d_model: int, base: float = 10_000.0) -> Tensor:
    """``[B, T] -> [B, T, D]``: ``sin(p / base^(2i/D))`` on even features, ``cos`` on odd ones."""
    freq = torch.exp(
        torch.arange(0, d_model, 2, device=positions.device, dtype=torch.float32) * (-math.log(base) / d_model)
    )
    angles = positions.float()[..., None] * freq
    return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)[..., :d_model]


def paper_embedding_scale(d_model: int, embedding_std: float | None) -> float:
    """Vaswani et al.'s ``sqrt(d_model)``, capped where it would lift the token embeddings above unit scale (their
    N(0, d^-1/2) x sqrt(d)): ``min(sqrt(d_model), 1 / std)``, ``std`` 1 for PyTorch's N(0, 1)."""
    return min(math.sqrt(d_model), 1.0 / (embedding_std or 1.0))


@register("sinusoid")
class SinusoidEncoding(PositionEncoding):
    summary = "Fixed sine and cosine waves of the absolute position added to the token embeddings."
    attention_paths = ("sdpa", "explicit", "flex")  # added before the layers: attention is plain
    model_setting_kinds: ClassVar[dict[str, str]] = {
        "embedding_scale": "sqrt(d_model), capped at unit-scale token embeddings: 1 under PyTorch's N(0, 1)"
    }

    def __init__(self, shape: ModelShape, base: float, embedding_scale: float | None) -> None:
        super().__init__(shape)
        self.base = float(base)
        paper = paper_embedding_scale(shape.d_model, shape.embedding_std)
        self.embedding_scale = float(paper if embedding_scale is None else embedding_scale)
        if embedding_scale is None:
            self.model_filled["embedding_scale"] = self.embedding_scale

    def begin(self, token_embeddings: Tensor, inputs: PositionInputs) -> tuple[Tensor, Any]:
        table = sinusoids(inputs.positions, self.shape.d_model, self.base).to(token_embeddings.dtype)
        if self.embedding_scale != 1.0:  # no elementwise pass where the tokens are added as they are
            token_embeddings = token_embeddings * self.embedding_scale
        return token_embeddings + table, None
