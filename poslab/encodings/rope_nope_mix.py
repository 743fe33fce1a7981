"""RoPE/NoPE layer mix: RoPE in most layers, no position encoding in every ``nope_every``-th layer.

Layer ``l`` (0-based) is NoPE when ``(l + 1) % k == 0`` (``k = nope_every``): layers ``k-1, 2k-1, ...``, the last
of each group of ``k``, as Llama 4's iRoPE (every 4th layer without RoPE; its NoPE layers also scale their
attention temperature with length, which is not done here) and Yang et al., 2025, "Rope to Nope and Back
Again: A New Hybrid Attention Strategy" (RNoPE: the NoPE layers interleaved with RoPE ones). ``k = 1``: NoPE in
every layer; ``k > n_layers``: plain RoPE. A NoPE layer's queries and keys are left as they are (no transform).

``base`` is given once or once per layer (``per_layer``: ``base: [10000, 500000]``): RoPE layer ``l`` rotates by
``theta_i = base_l ** (-2i / rotary_dim)``; a NoPE layer's base is unused. The frequencies of every layer are one
``[n_layers, P]`` fp32 buffer (``inv_freq``, kept fp32 by ``RotaryEncoding._apply``). A layer reuses the layer
before's rotation when both rotate with the same base; after a NoPE layer the rotation is built again (cos and
sin of ``[1, T, P]`` angles: negligible).

Scaling rules (``scaling``, ``test_scaling``, the test-time variants; ``rotary.RotaryEncoding``): each RoPE layer's
ladder under the rule, as ``rope`` with that layer's base (NTK's new base and YaRN's ramp read on it), YaRN's
attention factor on the RoPE layers' queries and keys; the NoPE layers are left as they are (Llama 4 also scales
its NoPE layers' attention temperature with the length; poslab's log-length ``score_scale`` is the evaluation's
nearest, on every layer).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from poslab.config.settings import yaml_defaults
from poslab.encodings.base import LayerContext, ModelShape, PositionInputs, QueryKeyTransform, per_layer, register
from poslab.encodings.rope_scaling import plain
from poslab.encodings.rotary import RotaryEncoding
from poslab.errors import ConfigError


def rope_base() -> float:
    """RoPE's base, what ``base: null`` means: the value ``conf/encoding/shared/rotary.yaml`` gives (10000)."""
    return float(yaml_defaults("encoding", "shared/rotary")["base"])


def layer_bases(base: Any, n_layers: int) -> list[Any]:
    """``base`` (null: RoPE's, ``rope_base``) as one value per layer."""
    return per_layer("encoding.base", rope_base() if base is None else base, n_layers)


@register("rope_nope_mix")
class RopeNopeMixEncoding(RotaryEncoding):
    """RoPE with a NoPE layer every ``nope_every`` layers (the last of each group); ``base`` per layer or once."""

    summary = (
        "RoPE/NoPE mix (iRoPE, RNoPE): RoPE in most layers, no rotation in every nope_every-th layer; "
        "base once or per layer."
    )

    def __init__(self, shape: ModelShape, nope_every: int, base: Any, **rotary: Any) -> None:
        bases = [float(b) for b in layer_bases(base, shape.n_layers)]
        super().__init__(shape, base=bases[0], **rotary)  # pairing, rotary_dim
        self.bases = bases
        self.nope_every = int(nope_every)
        self.set_frequencies(torch.stack([plain(self.rotary_dim, b) for b in self.bases]), self.bases)  # [L, P]

    @classmethod
    def validate(cls, settings: dict[str, Any], shape: ModelShape, max_length: int) -> None:
        nope_every = settings["nope_every"]
        whole = isinstance(nope_every, int) or (isinstance(nope_every, float) and nope_every.is_integer())
        if isinstance(nope_every, bool) or not whole or nope_every < 1:
            raise ConfigError(
                f"encoding.nope_every={nope_every!r} must be an integer of at least 1: every nope_every-th layer is "
                f"NoPE (1: every layer; more than the {shape.n_layers} layers: none, plain RoPE)."
            )
        for base in layer_bases(settings["base"], shape.n_layers):
            super().validate({**settings, "base": base}, shape, max_length)

    def is_nope(self, layer: int) -> bool:
        return (layer + 1) % self.nope_every == 0

    def layer_positions(self, layer: int, hidden: Tensor, state: Any, inputs: PositionInputs) -> Tensor | None:
        return None if self.is_nope(layer) else state

    def rotates(self) -> bool:
        return not all(self.is_nope(layer) for layer in range(self.shape.n_layers))

    def query_key_transform(
        self, context: LayerContext, previous: QueryKeyTransform | None
    ) -> QueryKeyTransform | None:
        layer = context.layer
        positions = self.layer_positions(layer, context.hidden, context.state, context.inputs)
        if positions is None:
            return None
        same_base = layer > 0 and self.bases[layer - 1] == self.bases[layer]
        if previous is not None and previous.positions is positions and same_base:
            return previous  # the layer before rotated alike
        inv_freq, attention = self.frequencies_at(context.hidden.shape[1])
        return self.rotation(positions, inv_freq[layer], attention)

    def label(self) -> str:
        label = f"{self.name}:nope{self.nope_every}"
        if any(b != rope_base() for b in self.bases):
            label += ":" + "/".join(f"{b:g}" for b in dict.fromkeys(self.bases))  # the distinct bases, in order
        return label + self.scaling_label()
