"""xPos (Sun et al., 2023, "A Length-Extrapolatable Transformer"): RoPE with a per-pair exponential decay.

Pair ``i`` of the rotated features (``P = rotary_dim / 2`` pairs) has ``zeta_i = (2i / rotary_dim + r) / (1 + r)``
in ``(0, 1)`` (``r = zeta_ratio``, the paper's 0.4). Queries and keys are rotated as RoPE, then scaled::

    queries(q)_n = rot(q)_n * zeta ** ((n - c) / gamma)        keys(k)_n = rot(k)_n * zeta ** (-(n - c) / gamma)

per pair (both features of pair ``i`` by ``zeta_i``; unrotated features, with ``rotary_dim < head_dim``, unscaled),
``gamma = scale_base`` (512 in the paper and x-transformers), so each pair's contribution to ``score[t, s]`` carries
``zeta_i ** ((t - s) / gamma)``: it depends only on the distance and decays with it (``zeta_i < 1``, ``t >= s``).

The reference compared with (tests/encodings/test_rotary_variants.py, to 1e-5): x-transformers' ``RotaryEmbedding(dim,
use_xpos=True, scale_base=gamma)`` and ``apply_rotary_pos_emb`` (keys with ``scale ** -1``). Its conventions:

- the centre ``c = (max position + 1) // 2``, here as there: the score does not depend on ``c`` (it cancels in
  ``t - s``), but the factors of the single queries and keys do, and centring halves the largest exponent
  ``|n - c| / gamma``, which is what can overflow (below). ``c`` is taken over the whole batch's positions.
- x-transformers 2.31 pairs features ``(2i, 2i+1)`` (its ``rotate_half`` splits ``'(d r)'`` with ``r = 2``): poslab's
  ``pairing=interleaved``; ``pairing=half`` gives the same scores with the features permuted (tested too).
- the scale multiplies the rotated features only (``t[..., :rot_dim]``), as here.

Precision: the scales are computed in fp32 from fp32 positions and applied in fp32 (``Scaled``), under bf16
autocast too. The largest factor, ``zeta_0 ** (-(L / 2) / gamma)`` for ``L`` positions, grows exponentially with
``L``: ``validate`` refuses a ``max_length`` for which it would pass ``2**64`` (fp32 and bf16 hold up to ``2**128``;
the other half of the range is left for the features' own size and the dot product's sum); with the paper's
settings that is ``L`` up to about 36,000. A longer forward pass stops with the same message instead of giving
infinite keys (x-transformers has the same limit and does not check it). ``zeta_ratio`` must be greater than 0:
at 0 the first pair's ``zeta_0`` is 0, so its factors would be 0 and infinity.

The authors' code (microsoft/torchscale ``torchscale/component/xpos_relative_position.py``, class ``XPOS``) gives the
same factors: ``scale = (arange(0, head_dim, 2) + 0.4 head_dim) / (1.4 head_dim)`` (``zeta`` with ``r = 0.4``,
``rotary_dim = head_dim``), raised to ``n / scale_base`` with ``scale_base = 512`` (a constant there, not learned and
not tied to the length), queries by it and keys by its reciprocal (``downscale=True``), pairs ``(2i, 2i+1)``
(``rotate_every_two``). Its centre is ``-(L // 2)`` rounded down, ``ceil(L / 2)``, where x-transformers' and
poslab's is ``L // 2``: for odd ``L`` the single factors differ by ``zeta ** (1 / gamma)``, the scores not (both tested
in tests/encodings/test_rotary_variants.py against a copy of ``XPOS``, to 1e-5). ``gamma = 512`` is the authors'
constant, kept: with their 1024-token training it decays each pair over one context by ``zeta ** 2``, at poslab's
shorter contexts far less (``zeta ** (L / 512)``); ``scale_base`` is the named setting to change that.

Blockwise causal attention (``blockwise``; the paper's section 3.3): the authors train with plain causal attention
and, past the pre-training length ``l``, evaluate with blockwise causal attention: "we divide the query as blocks
with l/2 length, and each query interacts with its own block and the last block". Here: a query at ``t >= l`` sees
the key at ``s <= t`` only when ``s // b >= t // b - 1``, ``b = l // 2``; a query at ``t < l`` sees every earlier key,
as in training (for even ``l`` this is the paper's rule exactly: those queries are in blocks 0 and 1; for odd ``l``
it keeps the query at ``t = l - 1``, which training showed all ``l`` keys, as trained). So within the training length
nothing changes (training is plain causal attention), and past it each query sees between ``b`` and ``2b`` keys.
It is a score bias (``-inf`` on the hidden keys) on sdpa and explicit, and the same rule as a ``score_mod`` on flex.
``blockwise_length`` is ``l``: null, the run's training length (``train_length_settings``). ``blockwise: false``
evaluates with plain causal attention at every length (poslab's earlier xPos; x-transformers has no blockwise
attention), a named deviation from the authors' evaluation.

Scaling rules (``scaling``, ``test_scaling``, the test-time variants; ``rotary.RotaryEncoding``): the rotation
only. The rule maps RoPE's frequencies as for ``rope`` (YaRN's attention factor on the rotated features too);
the decay ``zeta ** ((t - s) / gamma)`` keeps its positions and ``scale_base``, so a longer sequence decays
further, as it does without a rule (interpolating the decay too would be another method, not one of these).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from poslab.config.settings import check_number, check_whole
from poslab.encodings.base import LayerContext, ModelShape, QueryKeyTransform, Scaled, register
from poslab.encodings.rotary import RotaryEncoding, exact_positions
from poslab.errors import ConfigError

#: the largest factor a query or key may be scaled by (fp32 and bf16 hold up to 2**128)
LARGEST_FACTOR = 2.0**64


def xpos_zeta(rotary_dim: int, zeta_ratio: float, device: torch.device | None = None) -> Tensor:
    """``zeta_i = (2i / rotary_dim + r) / (1 + r)`` for the ``rotary_dim // 2`` pairs, in fp32 (computed in fp64)."""
    pair_start = torch.arange(0, rotary_dim, 2, dtype=torch.float64, device=device)  # 2i
    return ((pair_start / rotary_dim + zeta_ratio) / (1 + zeta_ratio)).float()


def longest_length(scale_base: float, zeta_ratio: float) -> int:
    """The most positions ``L`` whose largest factor ``zeta_0 ** (-(L / 2) / gamma)`` stays within LARGEST_FACTOR."""
    zeta_0 = zeta_ratio / (1 + zeta_ratio)
    return int(2 * scale_base * math.log(LARGEST_FACTOR) / math.log(1 / zeta_0))


def too_long(length: int, scale_base: float, zeta_ratio: float) -> ConfigError:
    return ConfigError(
        f"xpos with encoding.scale_base={scale_base:g} and encoding.zeta_ratio={zeta_ratio:g} can scale at most "
        f"{longest_length(scale_base, zeta_ratio)} positions before its largest factor zeta ** (-n / scale_base) "
        f"passes 2**64 (fp32 and bf16 hold up to 2**128), not {length}: raise encoding.scale_base (or zeta_ratio), "
        f"or use shorter sequences."
    )


@register("xpos")
class XposEncoding(RotaryEncoding):
    """RoPE whose queries are scaled by ``zeta ** (n / gamma)`` and keys by ``zeta ** (-n / gamma)`` per pair."""

    summary = (
        "xPos: RoPE with queries scaled by zeta^(n/scale_base) and keys by zeta^(-n/scale_base) per rotated pair, "
        "so each pair's score decays as zeta^(distance/scale_base)."
    )

    train_length_settings = {"blockwise_length": (1.0, 0)}  # null: the training length, the paper's l
    extension_settings = {"blockwise_length": "refilled"}  # an extension masks past its own context, not its parent's

    def __init__(
        self,
        shape: ModelShape,
        scale_base: float,
        zeta_ratio: float,
        blockwise: bool,
        blockwise_length: int,  # null in the YAML: filled with the training length (train_length_settings)
        **rotary: Any,
    ) -> None:
        super().__init__(shape, **rotary)  # base, pairing, rotary_dim
        self.scale_base, self.zeta_ratio = float(scale_base), float(zeta_ratio)
        self.longest = longest_length(self.scale_base, self.zeta_ratio)
        self.blockwise, self.blockwise_length = bool(blockwise), int(blockwise_length)
        self.block = self.blockwise_length // 2  # the paper's blocks of l / 2

    @classmethod
    def validate(cls, settings: dict[str, Any], shape: ModelShape, max_length: int) -> None:
        super().validate(settings, shape, max_length)
        scale_base = check_number("encoding.scale_base", settings["scale_base"], 0)
        zeta_ratio = check_number("encoding.zeta_ratio", settings["zeta_ratio"], 0)
        if max_length > longest_length(scale_base, zeta_ratio):
            raise too_long(max_length, scale_base, zeta_ratio)
        if not isinstance(settings["blockwise"], bool):
            raise ConfigError(f"encoding.blockwise={settings['blockwise']!r} must be true or false.")
        meaning = "the pre-training length l: blocks of l // 2 past it; null: the training length"
        check_whole("encoding.blockwise_length", settings["blockwise_length"], 2, meaning)

    def visible(self, query: Tensor, key: Tensor) -> Tensor:
        """Blockwise causal attention: whether the query at ``query`` sees the key at ``key`` (the causal mask
        hides later keys apart): always within the pre-training length, else in its own block or the one before."""
        return (query < self.blockwise_length) | (key // self.block >= query // self.block - 1)

    def score_bias(self, length: int, device: torch.device) -> Tensor | None:
        """``[1, T, T]``: ``-inf`` on the keys blockwise causal attention hides, past the pre-training length only."""
        if not self.blockwise or length <= self.blockwise_length:
            return None
        position = torch.arange(length, device=device)
        hidden = ~self.visible(position[:, None], position[None, :])
        return torch.zeros(length, length, device=device).masked_fill(hidden, float("-inf"))[None]

    def score_mod(self) -> Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor] | None:
        if not self.blockwise:
            return None

        def blockwise(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            return torch.where(self.visible(q_idx, kv_idx), score, -float("inf"))

        return blockwise

    def scales(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """The query and key scales ``[B or 1, 1, T, head_dim]`` (fp32) at positions ``[B or 1, T]``."""
        if positions.shape[-1] > self.longest:  # a Python int: no device sync
            raise too_long(positions.shape[-1], self.scale_base, self.zeta_ratio)
        positions = exact_positions(positions)
        centre = torch.div(positions.max() + 1, 2, rounding_mode="floor")  # x-transformers' max_pos // 2
        power = (positions - centre) / self.scale_base  # [B, T]
        pair_scale = xpos_zeta(self.rotary_dim, self.zeta_ratio, positions.device) ** power[..., None]  # [B, T, P]
        if self.pairing == "interleaved":
            feature_scale = pair_scale.repeat_interleave(2, dim=-1)  # features 2i, 2i+1
        else:
            feature_scale = torch.cat((pair_scale, pair_scale), dim=-1)  # features i, i + P
        unrotated = self.shape.head_dim - self.rotary_dim
        if unrotated:
            feature_scale = torch.cat((feature_scale, feature_scale.new_ones(*power.shape, unrotated)), dim=-1)
        query_scale = feature_scale[:, None]
        return query_scale, query_scale.reciprocal()  # as x-transformers: keys by scale ** -1

    def query_key_transform(self, context: LayerContext, previous: QueryKeyTransform | None) -> QueryKeyTransform:
        positions = context.state
        if isinstance(previous, Scaled) and previous.positions is positions:
            return previous  # the same positions in every layer: built once per forward pass
        rotation = super().query_key_transform(context, None)
        assert rotation is not None
        return Scaled(rotation, *self.scales(positions))

    def label(self) -> str:
        label = super().label()
        if self.scale_base != 512.0:
            label += f":gamma{self.scale_base:g}"
        if self.zeta_ratio != 0.4:
            label += f":zeta{self.zeta_ratio:g}"
        if not self.blockwise:
            label += ":causal"  # plain causal attention past the training length, not the authors' blockwise
        return label
