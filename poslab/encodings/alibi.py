"""ALiBi (Press, Smith & Lewis, 2022): score - slope * distance, one slope per head."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from poslab.encodings.base import ModelShape, PositionEncoding, causal_distance, register
from poslab.errors import ConfigError


def paper_slopes(n_heads: int) -> list[float]:
    """The ALiBi paper's slopes (its ``get_slopes``): for H a power of two the geometric series ``2^(-8h/H)``,
    h = 1..H (1/2 ... 1/256 for 8 heads); otherwise the series of the nearest lower power of two, P, followed by
    every other slope of the series for 2P, as many as the heads past P (6 heads: 1/4, 1/16, 1/64, 1/256 and
    1/2, 1/8). The authors' workaround keeps the slopes spread like a power of two's; ``2^(-8h/H)`` for H = 6 would
    give other values (tests/encodings/test_alibi_slopes.py compares the authors' function verbatim)."""
    if n_heads & (n_heads - 1) == 0:
        return [2.0 ** (-8.0 * h / n_heads) for h in range(1, n_heads + 1)]
    closest = 2 ** math.floor(math.log2(n_heads))
    return paper_slopes(closest) + paper_slopes(2 * closest)[0::2][: n_heads - closest]


@register("alibi")
class AlibiEncoding(PositionEncoding):
    summary = "ALiBi: each head subtracts its slope times the query-key distance from the attention scores."
    attention_paths = ("sdpa", "explicit", "flex")  # the bias as a mask, or as its score_mod inside FlexAttention

    def __init__(self, shape: ModelShape, slopes: list[float] | None) -> None:  # null: the paper's slopes
        super().__init__(shape)
        values = [float(s) for s in slopes] if slopes is not None else paper_slopes(shape.n_heads)
        self.register_buffer("slopes", torch.tensor(values, dtype=torch.float32), persistent=False)

    @classmethod
    def validate(cls, settings: dict[str, Any], shape: ModelShape, max_length: int) -> None:
        slopes = settings.get("slopes")
        if slopes is None:
            return
        if len(slopes) != shape.n_heads:
            raise ConfigError(
                f"encoding.slopes has {len(slopes)} values {list(slopes)} but the model has {shape.n_heads} heads; "
                f"give one slope per head, or null for the paper's slopes (2^(-8h/H) for a power of two H)."
            )
        if any(float(s) < 0 for s in slopes):
            raise ConfigError(f"encoding.slopes={list(slopes)} must all be >= 0 (a penalty that grows with distance).")

    def score_bias(self, length: int, device: torch.device) -> Tensor | None:
        return -self.slopes.to(device)[:, None, None] * causal_distance(length, device)

    def score_mod(self) -> Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]:
        """The same bias inside FlexAttention: ``score - slope[h] * (q_idx - kv_idx)`` (keys after the query
        are masked by the causal block mask, so the distance needs no clamp)."""
        slopes = self.slopes

        def alibi(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            return score - slopes[h] * (q_idx - kv_idx)

        return alibi

    def label(self) -> str:
        if self.slopes.numel() == 1:
            return f"alibi:{self.slopes.item():g}"
        return "alibi"
