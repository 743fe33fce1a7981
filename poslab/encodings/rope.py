"""RoPE (Su et al., 2021): rotate queries and keys by the token index, optionally under a scaling rule.

The scaling rules (``rope_scaling.RULES``: linear, ntk, dynamic, yarn, llama3) are settings of every rotary
encoding (``rotary.RotaryEncoding``: ``scaling`` with ``scaling_factor`` in training, ``test_scaling`` or the
test-time variants at longer lengths, factor ``L_test / L_train``); here they change RoPE's ladder
``theta_i = base^(-2i/d)``, as ``transformers`` does (``tests/encodings/test_rope_scaling.py``), and every other setting
(base, pairing, rotary_dim) means the same under each.

p-RoPE (``partial_fraction < 1``) is ``rope``'s own setting (``rope_scaling.keep_fraction``): the lowest
frequencies set to 0. Every rule acts on each frequency alone and keeps a 0 at 0, so p-RoPE composes with each
the same whether it is taken before the rule or after it (Gemma 3: p-RoPE after linear scaling).
YaRN's attention factor ``m`` multiplies queries and keys (``Scaled``): the scores by ``m^2``.
"""

from __future__ import annotations

from typing import Any

from poslab.encodings.base import ModelShape, register
from poslab.encodings.rope_scaling import keep_fraction, plain
from poslab.encodings.rotary import RotaryEncoding
from poslab.errors import ConfigError


@register("rope")
class RopeEncoding(RotaryEncoding):
    """Integer token positions; ``base``, ``pairing`` and the scaling rules as in ``RotaryEncoding``; p-RoPE."""

    summary = (
        "Rotary embeddings: queries and keys rotated by angles proportional to the token index; optional scaling "
        "rule (linear, ntk, dynamic, yarn, llama3) in training or at test time, and p-RoPE (partial_fraction)."
    )

    def __init__(self, shape: ModelShape, partial_fraction: float, **rotary: Any) -> None:
        super().__init__(shape, **rotary)  # base, pairing, rotary_dim, the scaling rules
        self.partial_fraction = float(partial_fraction)
        if self.partial_fraction < 1.0:
            self.set_frequencies(keep_fraction(plain(self.rotary_dim, self.base), self.partial_fraction))

    @classmethod
    def validate(cls, settings: dict[str, Any], shape: ModelShape, max_length: int) -> None:
        super().validate(settings, shape, max_length)
        fraction = settings["partial_fraction"]
        try:
            ok = 0.0 < float(fraction) <= 1.0
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise ConfigError(
                f"encoding.partial_fraction={fraction!r} must be a number in (0, 1]: the fraction of the "
                f"frequencies p-RoPE rotates (1: all of them, plain RoPE)."
            )

    def label(self) -> str:
        label = super().label()
        return label + f":p{self.partial_fraction:g}" if self.partial_fraction < 1.0 else label
