"""T5's relative position bias (Raffel et al., 2020, "Exploring the Limits of Transfer Learning with a Unified
Text-to-Text Transformer", JMLR): one learned scalar per head and bucket of the query-key distance.

For a query at ``t`` and a key at ``s <= t``, the distance ``n = t - s`` falls in a causal (unidirectional) bucket::

    exact = num_buckets // 2
    bucket(n) = n                                                                          if n < exact
              = min(exact + floor(log(n / exact) / log(max_distance / exact) * (num_buckets - exact)),
                    num_buckets - 1)                                                       otherwise
    bias[t, s] = table[bucket(t - s), h]

so the first half of the buckets are single distances and the rest widen logarithmically up to ``max_distance``;
every farther distance shares the last bucket. One table for all layers, as T5 (its first layer's bias is reused by
the others) and poslab's ``score_bias``. The score is T5's: the table value itself, not scaled.

References compared with (``tests/encodings/test_distance_biases.py``): transformers'
``T5Attention._relative_position_bucket`` (``bidirectional=False``), the same bucket for every distance;
x-transformers' ``RelativePositionBias(scale=1, causal=True)``, the same bias given the same table. x-transformers
multiplies its table by ``scale``, which its attention layers set to ``sqrt(dim_head)`` (a reparametrisation of an
N(0, 1) table); ``scale=1`` is T5's bias.

Initialisation as transformers' ``T5PreTrainedModel._init_weights``: ``table ~ N(0, d_model ** -0.5)``.

Both settings are tied to the training length ``L`` (``train_length_settings``), so that the last bucket, which
every distance past ``max_distance`` shares at test time, is one training reaches, at every training length:

- ``num_buckets``: null is ``min(32, L)``: T5's 32, fewer where the training sequences are shorter than that
  (half of them exact distances, the rest log-spaced over what is left).
- ``max_distance``: null is ``max(L - 1, num_buckets // 2 + 1)``: the largest distance training sees, so bucket
  ``num_buckets - 1`` is that distance's (the formula's log ratio is 1 there) and every farther distance shares a
  bucket training updated. (At L = 2 the floor keeps the log ratio defined.)

T5's own 32 and 128 belong to its training length 512: kept at a training length of 32, they left buckets 22-31
(distances 35 and up) at their initial values for evaluation to read, and the earlier default (``max_distance`` =
L) reached the last bucket only where the formula happened to round up to it (L = 32, 128) and was refused
outright at L = 16. An explicit setting that leaves buckets untrained is allowed (replicating T5's 128 at 512)
and said at start: ``untrained_at_test`` names the buckets evaluation uses that training never did (logged and in
results.json). ``tests/encodings/test_t5_buckets.py`` checks the defaults at every training length 2..4096.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from poslab.config.settings import check_whole
from poslab.encodings.base import ModelShape, PositionEncoding, ScoreMod, TrainLengthRule, register


def relative_position_bucket(relative_position: Tensor, num_buckets: int, max_distance: int) -> Tensor:
    """T5's causal bucket of ``relative_position = key - query`` (integers; positive ones, keys after the query,
    are bucket 0), the same values as transformers' ``_relative_position_bucket(bidirectional=False)``."""
    n = -torch.minimum(relative_position, torch.zeros_like(relative_position))  # t - s, 0 for keys after the query
    exact = num_buckets // 2
    # n = 0 would take log(0); those n are below `exact`, where the bucket is n itself, so 1 stands in for them
    log_ratio = torch.log(n.clamp(min=1).float() / exact) / math.log(max_distance / exact)
    large = exact + (log_ratio * (num_buckets - exact)).to(torch.long)
    large = torch.minimum(large, torch.full_like(large, num_buckets - 1))
    return torch.where(n < exact, n, large)


#: T5's bucket count, the default where training sequences are at least as long
T5_BUCKETS = 32


def default_buckets(train_length: int, settings: dict[str, Any]) -> int:
    """``num_buckets`` left null: T5's 32, or the training length where that is shorter (at least 2)."""
    return max(2, min(T5_BUCKETS, int(train_length)))


def default_max_distance(train_length: int, settings: dict[str, Any]) -> int:
    """``max_distance`` left null: the largest training distance, ``L - 1``, so it falls in the last bucket; at
    least ``num_buckets // 2 + 1``, where the log-spaced buckets start."""
    return max(int(train_length) - 1, int(settings["num_buckets"]) // 2 + 1)


@register("t5_bias")
class T5BiasEncoding(PositionEncoding):
    summary = "T5 relative bias: a learned scalar per head for each bucket of the query-key distance (log-spaced)."
    attention_paths = ("sdpa", "explicit", "flex")  # the bucket is pointwise and the table a lookup: a score_mod
    train_length_settings = {  # in this order: max_distance reads num_buckets (the module docstring)
        "num_buckets": TrainLengthRule(default_buckets, "min(32, the training length)"),
        "max_distance": TrainLengthRule(
            default_max_distance, "the training length - 1 (at least num_buckets // 2 + 1)"
        ),
    }
    no_weight_decay = ("table",)  # a bucket training never reads keeps its initial value, as a learned row

    def __init__(self, shape: ModelShape, num_buckets: int, max_distance: int) -> None:
        super().__init__(shape)
        self.num_buckets, self.max_distance = int(num_buckets), int(max_distance)
        # [num_buckets, H], the layout of T5's and x-transformers' nn.Embedding: their weights copy over as they are
        self.table = nn.Parameter(torch.randn(self.num_buckets, shape.n_heads) * shape.d_model**-0.5)

    @classmethod
    def validate(cls, settings: dict[str, Any], shape: ModelShape, max_length: int) -> None:
        buckets = settings["num_buckets"]
        check_whole("encoding.num_buckets", buckets, 2, "T5: 32")
        distance = settings["max_distance"]
        check_whole(
            "encoding.max_distance",
            distance,
            buckets // 2 + 1,
            "past the num_buckets // 2 exact ones; null: the training length - 1 (T5: 128 at training length 512)",
        )

    def buckets(self, length: int, device: torch.device) -> Tensor:
        """``[T, T]`` bucket of every query (rows) and key (columns)."""
        position = torch.arange(length, device=device)
        return relative_position_bucket(position[None, :] - position[:, None], self.num_buckets, self.max_distance)

    def used_buckets(self, length: int) -> set[int]:
        """The buckets of the distances ``0 .. length - 1`` (what a causal sequence of ``length`` reads)."""
        distance = -torch.arange(length)
        return set(relative_position_bucket(distance, self.num_buckets, self.max_distance).tolist())

    def untrained_at_test(self, train_length: int, max_length: int) -> list[str]:
        untrained = sorted(self.used_buckets(max_length) - self.used_buckets(train_length))
        if not untrained:
            return []
        return [
            f"T5 buckets {untrained} (distances past {train_length - 1}, max_distance={self.max_distance}) are used "
            f"up to length {max_length} but never in training at length {train_length}: they keep their initial values."
        ]

    def score_bias(self, length: int, device: torch.device) -> Tensor:
        return self.table.float()[self.buckets(length, device)].permute(2, 0, 1)  # [T, T, H] -> [H, T, T]

    def score_mod(self) -> ScoreMod:
        """The same lookup inside FlexAttention: the bucket of ``kv_idx - q_idx``, then the table."""
        table, buckets, distance = self.table, self.num_buckets, self.max_distance

        def t5(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            return score + table[relative_position_bucket(kv_idx - q_idx, buckets, distance), h].float()

        return t5

    def label(self) -> str:
        if {"num_buckets", "max_distance"} <= set(self.filled_settings):  # both follow the training length
            return self.name  # type: ignore[attr-defined]
        return f"{self.name}:{self.num_buckets}x{self.max_distance}"  # type: ignore[attr-defined]
