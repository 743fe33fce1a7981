"""KERPLE (Chi, Fan, Ramadge & Rudnicky, 2022, "KERPLE: Kernelized Relative Positional Embedding for Length
Extrapolation", NeurIPS 2022): a learned, conditionally positive definite kernel of the distance as the bias.

Per head, with learned ``r1, r2 > 0`` and the distance ``d = t - s`` of a query at ``t`` and a key at ``s <= t``::

    kerple_log:    bias[t, s] = -r1 * log(1 + r2 * d)
    kerple_power:  bias[t, s] = -r1 * d ** r2            (0 < r2 <= 2)

Both are ``-k(d)`` for a conditionally positive definite kernel ``k`` shifted to 0 at ``d = 0``: ``bias <= 0``, 0 on
the diagonal, non-increasing in the distance. ``kerple_power`` with ``r2 = 1`` is ALiBi with slope ``r1``; the log
variant penalises distance only logarithmically (doubling a long distance costs ``r1 * log 2``, whatever the distance).

As the paper's code (github.com/chijames/KERPLE, ``megatron/mpu/layers.py``: ``ParallelKerpleLog`` and
``ParallelKerplePower`` with ``pos-emb kerple_power_ap_``): one module shared by all layers; ``r1, r2`` drawn
uniformly per head, log ``r1 ~ U(0, 2)``, ``r2 ~ U(0, 1)``; power ``r1 ~ U(0, 1)``, ``r2 ~ U(0, 2)``; positivity by
clamping the parameters themselves in every forward pass (``.data.clamp_``: a projection, the gradient passes as if
unclamped) to ``>= 0.01``, and the power's ``r2`` to ``<= 2``. Their weight decay is 0 (the paper's config has
none at all); here the scalars are kept out of it. Biases in fp32; keys after the query get ``d = 0`` (masked).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from poslab.encodings.base import ModelShape, PositionEncoding, ScoreMod, causal_distance, register

EPS = 1e-2  # the paper's code clamps r1, r2 to at least this


class KerpleEncoding(PositionEncoding):
    """The shared part of the two variants: ``r1, r2`` per head, projected into range, and the bias from ``kernel``."""

    attention_paths = ("sdpa", "explicit", "flex")  # a closed form of the distance: a score_mod
    no_weight_decay = ("r1", "r2")
    #: the upper bound on r2 (None: none), and the ranges r1, r2 are drawn from uniformly at init
    r2_max: float | None = None
    r1_init: float = 1.0
    r2_init: float = 1.0

    def __init__(self, shape: ModelShape) -> None:
        super().__init__(shape)
        self.r1 = nn.Parameter(torch.rand(shape.n_heads) * self.r1_init)
        self.r2 = nn.Parameter(torch.rand(shape.n_heads) * self.r2_init)
        self.project()

    @staticmethod
    def kernel(distance: Tensor, r1: Tensor, r2: Tensor) -> Tensor:
        """The bias ``-k(distance)`` for broadcastable ``distance`` and per-head ``r1``, ``r2``."""
        raise NotImplementedError

    def project(self) -> None:
        """Clamp ``r1, r2`` into range in place, as the paper's code does before each use (``.data``: autograd and
        the optimizer's state see an ordinary parameter)."""
        self.r1.data.clamp_(min=EPS)
        self.r2.data.clamp_(min=EPS, max=self.r2_max)

    def score_bias(self, length: int, device: torch.device) -> Tensor:
        self.project()
        distance = causal_distance(length, device)
        return self.kernel(distance[None], self.r1.float()[:, None, None], self.r2.float()[:, None, None])

    def score_mod(self) -> ScoreMod:
        """The same bias inside FlexAttention, from ``q_idx - kv_idx`` (clamped at 0, so keys after the query,
        which the block mask drops, stay finite)."""
        self.project()
        r1, r2, kernel = self.r1, self.r2, self.kernel

        def kerple(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            return score + kernel((q_idx - kv_idx).clamp(min=0).float(), r1[h].float(), r2[h].float())

        return kerple


@register("kerple_log")
class KerpleLogEncoding(KerpleEncoding):
    summary = "KERPLE (log): each head adds -r1 * log(1 + r2 * distance) to the scores, r1 and r2 learned."
    r1_init, r2_init = 2.0, 1.0  # the paper's code: bias_p ~ U(0, 2) (r1), bias_a ~ U(0, 1) (r2)

    @staticmethod
    def kernel(distance: Tensor, r1: Tensor, r2: Tensor) -> Tensor:
        return -r1 * torch.log1p(r2 * distance)


@register("kerple_power")
class KerplePowerEncoding(KerpleEncoding):
    summary = "KERPLE (power): each head adds -r1 * distance ** r2 to the scores, r1 > 0 and 0 < r2 <= 2 learned."
    r2_max = 2.0  # the power kernel is conditionally positive definite for 0 < r2 <= 2
    r1_init, r2_init = 1.0, 2.0  # the paper's code: bias_a ~ U(0, 1) (r1), bias_p ~ U(0, 2) (r2)

    @staticmethod
    def kernel(distance: Tensor, r1: Tensor, r2: Tensor) -> Tensor:
        return -r1 * distance.pow(r2)
