"""Fixed sinusoids added to the token embeddings (Vaswani et al., 2017)."""

from __future__ import annotations

import math
from typing import Any

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


@register("sinusoid")
class SinusoidEncoding(PositionEncoding):
    summary = "Fixed sine and cosine waves of the absolute position added to the token embeddings."
    attention_paths = ("sdpa", "explicit", "flex")  # added before the layers: attention is plain

    def __init__(self, shape: ModelShape, base: float) -> None:
        super().__init__(shape)
        self.base = float(base)

    def begin(self, token_embeddings: Tensor, inputs: PositionInputs) -> tuple[Tensor, Any]:
        table = sinusoids(inputs.positions, self.shape.d_model, self.base).to(token_embeddings.dtype)
        return token_embeddings + table, None
