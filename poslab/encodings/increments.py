"""Learned per-token position increments: RoPE at learned real positions.

A small DeltaMLP (Linear -> GELU -> Linear -> softplus) emits an increment
δ > 0 per token; a token's position is the cumulative sum of δ up to and
including it, and queries and keys are rotated by ordinary RoPE at those
positions. The score between a query and a key still depends only on the
difference of their positions, i.e. on the sum of the increments between them.

The last Linear starts with zero weights and a bias solved so that δ = 1 for
every token (to fp32 rounding, one ulp): positions are 1, 2, 3, ... and the
model starts as integer-position RoPE (positions are shifted by one from
``rope``'s 0, 1, 2, ..., which RoPE cannot see). Any deviation from +1 is learned.

``increments_shared``: one DeltaMLP reads the token embeddings; δ depends on the token only, the same in every layer.
``increments_layer``: each layer has its own DeltaMLP reading that layer's RMS-normed residual stream, with δ bounded
by ``max_delta`` (the write-up: learned positions tend to explode without it).

δ and the positions are computed in fp32 with autocast off: in bf16 a position near 512 has a spacing of 2 between
representable numbers, so neighbouring tokens would collide.

Scaling rules (``scaling``, ``test_scaling``, the test-time variants; ``rotary.RotaryEncoding``): the rule maps
RoPE's frequencies as for ``rope``, and the learned positions are rotated at the mapped frequencies (linear: the
learned positions divided by ``s``). The factor is ``L_test / L_train`` in tokens, which is the ratio of the
position ranges while the mean increment does not change with the length; YaRN and Llama 3 count a pair's
rotations over ``original_length`` as if the mean increment were 1 (its start): a model whose increments grew
turned its pairs more than that in training, one whose increments shrank fewer.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from poslab.encodings.base import ModelShape, PositionInputs, register
from poslab.encodings.rotary import RotaryEncoding
from poslab.errors import ConfigError

#: floor added to softplus: softplus underflows to exactly 0 in fp32 for very negative inputs, and an increment
#: below half the fp32 spacing of the position (about 2.4e-4 at position 4096) does not move the cumulative sum,
#: so without it two tokens could share a position. 1e-3 keeps positions strictly increasing; it is far below
#: any increment the write-up reports (smallest: 0.68).
MIN_DELTA = 1e-3


class DeltaMLP(nn.Module):
    """``[B, T, d_in]`` -> increments ``δ [B, T]`` in fp32, 1 at initialisation (to one fp32 ulp).

    ``u = MIN_DELTA + softplus(W2 gelu(W1 norm(x)) + b2)`` and ``δ = u``, or with ``max_delta``
    ``δ = max_delta * tanh(u / max_delta)``: a smooth bound that is the identity near 0 (slope 1) and saturates
    at ``max_delta``, so small increments train as unbounded softplus would. ``b2`` is solved so that ``δ = 1``:
    ``u0 = max_delta * atanh(1 / max_delta)`` (``u0 = 1`` unbounded), ``b2 = log(exp(u0 - MIN_DELTA) - 1)``.
    """

    def __init__(self, d_in: int, hidden: int, max_delta: float | None = None, norm: bool = False) -> None:
        super().__init__()
        self.max_delta = max_delta
        self.norm = nn.RMSNorm(d_in) if norm else nn.Identity()
        self.up = nn.Linear(d_in, hidden)
        self.out = nn.Linear(hidden, 1)
        nn.init.zeros_(self.out.weight)  # δ does not depend on the input at first: integer RoPE
        nn.init.constant_(self.out.bias, self.initial_bias(max_delta))

    @staticmethod
    def initial_bias(max_delta: float | None) -> float:
        """The output bias for which δ = 1 (computed in float64)."""
        u0 = 1.0 if max_delta is None else max_delta * math.atanh(1.0 / max_delta)
        return math.log(math.expm1(u0 - MIN_DELTA))

    def flops_per_token(self) -> float:
        """Training FLOPs of its two matrix products on one token (6 per weight)."""
        return 6.0 * (self.up.weight.numel() + self.out.weight.numel())

    def forward(self, x: Tensor) -> Tensor:
        with torch.autocast(x.device.type, enabled=False):  # bf16 would round δ and so the positions
            z = self.out(F.gelu(self.up(self.norm(x.float())))).squeeze(-1)
            u = MIN_DELTA + F.softplus(z)
            return u if self.max_delta is None else self.max_delta * torch.tanh(u / self.max_delta)


def increments_from_positions(positions: Tensor) -> Tensor:
    """Invert the cumulative sum along the last (token) axis: ``δ_0 = p_0``, ``δ_t = p_t - p_{t-1}``."""
    return torch.diff(positions, dim=-1, prepend=torch.zeros_like(positions[..., :1]))


def check_delta_hidden(settings: dict[str, Any]) -> None:
    hidden = settings["delta_hidden"]
    if isinstance(hidden, bool) or not isinstance(hidden, int) or hidden < 1:
        raise ConfigError(
            f"encoding.delta_hidden={hidden!r} must be a whole number of at least 1 "
            f"(the width of the DeltaMLP's hidden layer)."
        )


@register("increments_shared")
class IncrementsSharedEncoding(RotaryEncoding):
    """RoPE at learned positions: one DeltaMLP on the token embeddings, the same positions in every layer."""

    summary = "RoPE at learned positions: a small network gives each token a step, the same in every layer."

    def __init__(self, shape: ModelShape, delta_hidden: int, **rotary: Any) -> None:
        super().__init__(shape, **rotary)  # base, pairing, rotary_dim
        self.delta = DeltaMLP(shape.d_model, delta_hidden)

    @classmethod
    def validate(cls, settings: dict[str, Any], shape: ModelShape, max_length: int) -> None:
        super().validate(settings, shape, max_length)
        check_delta_hidden(settings)

    def extra_flops_per_token(self, length: int, batch: int) -> float:
        """The DeltaMLP on every token, once (its two matrix products)."""
        return self.delta.flops_per_token()

    def positions(self, token_embeddings: Tensor, inputs: PositionInputs) -> Tensor:
        # [B, T] fp32; begin() hands this one tensor to every layer, so one rotation is built per forward
        return self.delta(token_embeddings).cumsum(dim=-1)


@register("increments_layer")
class IncrementsLayerEncoding(RotaryEncoding):
    """RoPE at learned positions: each layer's own DeltaMLP reads its RMS-normed residual stream; δ <= max_delta."""

    summary = "RoPE at learned positions: each layer's own small network steps from its hidden state, capped."

    optional_settings = ("max_delta",)  # null: no bound (the write-up: positions then tend to explode)

    def __init__(
        self,
        shape: ModelShape,
        delta_hidden: int,
        max_delta: float | None,  # null: no bound
        **rotary: Any,
    ) -> None:
        super().__init__(shape, **rotary)  # base, pairing, rotary_dim
        self.max_delta = None if max_delta is None else float(max_delta)
        # the norm is the DeltaMLP's own (not the block's norm1): hidden-state norms grow with depth
        self.deltas = nn.ModuleList(
            DeltaMLP(shape.d_model, delta_hidden, max_delta=self.max_delta, norm=True) for _ in range(shape.n_layers)
        )

    @classmethod
    def validate(cls, settings: dict[str, Any], shape: ModelShape, max_length: int) -> None:
        super().validate(settings, shape, max_length)
        check_delta_hidden(settings)
        max_delta = settings["max_delta"]
        if max_delta is None:
            return  # unbounded: softplus alone
        if isinstance(max_delta, bool) or not isinstance(max_delta, (int, float)) or not 1 < max_delta < math.inf:
            raise ConfigError(
                f"encoding.max_delta={max_delta!r} must be a finite number greater than 1: "
                f"the increments start at δ=1, which the bound must allow (the write-up uses 10)."
            )

    def begin(self, token_embeddings: Tensor, inputs: PositionInputs) -> tuple[Tensor, Any]:
        return token_embeddings, None  # positions come from each layer's hidden state

    def extra_flops_per_token(self, length: int, batch: int) -> float:
        """Each layer's DeltaMLP on every token (its two matrix products)."""
        return sum(delta.flops_per_token() for delta in self.deltas)

    def label(self) -> str:
        return super().label() + (":unbounded" if self.max_delta is None else "")

    def layer_positions(self, layer: int, hidden: Tensor, state: Any, inputs: PositionInputs) -> Tensor:
        return self.deltas[layer](hidden).cumsum(dim=-1)  # [B, T] fp32, a new tensor per layer
