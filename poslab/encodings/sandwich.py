"""Sandwich (Chi, Fan, Rudnicky & Ramadge, 2023, "Dissecting Transformer Length Extrapolation via the Lens of
Receptive Field Analysis", ACL 2023): the inner product of two sinusoidal position embeddings as a fixed bias.

With ``p_m`` the sinusoidal embedding of position ``m`` in ``d'`` dimensions (pairs ``sin, cos(m * w_i)``,
``w_i = 10000 ** (-2i / d')`` for ``i = 1 .. d'/2``), ``p_t . p_s = sum_i cos((t - s) * w_i)``, whose maximum is
``d'/2`` at ``t = s``. Per head ``h = 1 .. H``::

    bias[t, s] = (sum_{i=1}^{d'/2} cos((t - s) / 10000 ** (2i / d')) - d'/2) / (8h / H)

0 on the diagonal, ``<= 0`` everywhere, and a function of ``t - s`` only: a relative encoding with no
parameters. The head-wise divisor ``8h / H`` is the paper's ALiBi-like scaling (its ALiBi figure's ``h = n * 8 / H``,
slope ``1 / 2^h``): the first heads get the strongest penalty, the last ones the weakest, as ALiBi's slopes order
them. Compared with NeMo's ``SandwichRelativePositionEmbedding`` (``nemo/collections/nlp/modules/common/megatron/
position_embedding/sandwich_relative_position_embedding.py``): the same ``i = 1 .. d'/2``, the same divisor.

``dim`` is ``d'`` (the paper's default 128; independent of the model's width). fp32; the cosine sum is computed once
per distance ``0 .. T-1`` and gathered into ``[T, T]``. The flex ``score_mod`` sums the ``d'/2`` cosines itself
(pointwise: ``d'/2`` cosines per score inside the kernel).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from poslab.encodings.base import ModelShape, PositionEncoding, ScoreMod, causal_distance, register
from poslab.errors import ConfigError


def sandwich_frequencies(dim: int) -> list[float]:
    """``w_i = 10000 ** (-2i / d')`` for ``i = 1 .. d'/2`` (the paper's indexing, from 1)."""
    return [10_000.0 ** (-2.0 * i / dim) for i in range(1, dim // 2 + 1)]


@register("sandwich")
class SandwichEncoding(PositionEncoding):
    summary = (
        "Sandwich: the inner product of the sinusoidal embeddings of query and key positions minus its maximum, "
        "divided per head by 8h/H; no parameters."
    )
    attention_paths = ("sdpa", "explicit", "flex")

    def __init__(self, shape: ModelShape, dim: int) -> None:
        super().__init__(shape)
        self.dim = int(dim)
        frequencies = torch.tensor(sandwich_frequencies(self.dim), dtype=torch.float32)
        self.register_buffer("frequencies", frequencies, persistent=False)

    @classmethod
    def validate(cls, settings: dict[str, Any], shape: ModelShape, max_length: int) -> None:
        dim = settings["dim"]
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 2 or dim % 2:
            raise ConfigError(
                f"encoding.dim={dim!r} must be an even whole number of at least 2: d', the width of the sinusoidal "
                f"embeddings whose inner product is the bias (the paper: 128)."
            )

    def score_bias(self, length: int, device: torch.device) -> Tensor:
        distance = torch.arange(length, device=device, dtype=torch.float32)
        # [T]: the bias of each distance 0 .. T-1, then gathered into [T, T]
        per_distance = torch.cos(distance[:, None] * self.frequencies.to(device)).sum(-1) - self.dim // 2
        table = per_distance[causal_distance(length, device).long()]  # [T, T]
        head = torch.arange(1, self.shape.n_heads + 1, device=device, dtype=torch.float32)
        return table[None] / (8.0 * head / self.shape.n_heads)[:, None, None]

    def score_mod(self) -> ScoreMod:
        """The same bias inside FlexAttention: the ``d'/2`` cosines of ``q_idx - kv_idx`` (clamped at 0) summed, and
        head ``h``'s divisor ``8 (h + 1) / H`` (0-based ``h``). The frequencies are read from the buffer, not held as
        Python floats: compile would turn those into inputs the flex kernel cannot lower."""
        frequencies, half, n_heads = self.frequencies, self.dim // 2, self.shape.n_heads

        def sandwich(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            distance = (q_idx - kv_idx).clamp(min=0).float()
            total = torch.zeros_like(distance)
            for i in range(half):
                total = total + torch.cos(distance * frequencies[i])
            return score + (total - half) / (8.0 * (h + 1).float() / n_heads)

        return sandwich

    def label(self) -> str:
        return self.name if self.dim == self.yaml_settings()["dim"] else f"{self.name}:{self.dim}"  # type: ignore[attr-defined]
