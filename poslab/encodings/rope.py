"""RoPE (Su et al., 2021): rotate queries and keys by the token index, optionally under a scaling rule.

The scaling rules (``rope_scaling.RULES``: linear, ntk, dynamic, yarn, llama3) are settings of this encoding,
not encodings of their own: each only changes ``rope``'s inverse frequencies (and YaRN's attention factor), and
every other setting (base, pairing, rotary_dim) means the same under each. Two ways to use one:

- in training, ``scaling=<rule>`` with ``scaling_factor=s`` (and ``original_length`` for the rules that read it):
  the rule's frequencies everywhere (``dynamic`` recomputes them from each forward pass's length);
- at test time, ``test_scaling=<rule>``: plain RoPE up to ``original_length`` (the training length; null: taken
  from ``task.train_length`` or ``task.context_length``), and at a longer sequence of ``n`` tokens the rule with
  factor ``s = n / original_length``, so each evaluation length gets its own factor ``L_test / L_train``.

The settings are ``rope``'s, not the shared rotary file's: the other rotary encodings rotate by learned or
hierarchical coordinates, where "the training length" and a factor ``L_test / L_train`` have no single meaning.

p-RoPE (``partial_fraction < 1``) is a setting too, applied after the rule (``rope_scaling.keep_fraction``).
YaRN's attention factor ``m`` multiplies queries and keys (``Scaled``): the scores by ``m^2``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor

from poslab.encodings.base import LayerContext, ModelShape, QueryKeyTransform, Scaled, register
from poslab.encodings.rope_scaling import RULES, keep_fraction, scaled_frequencies, validate_rule
from poslab.encodings.rotary import RotaryEncoding, Rotation, rotation_angles
from poslab.errors import ConfigError
from poslab.settings import check_choice

TEST_RULES = ("none", "linear", "ntk", "yarn", "llama3")  # dynamic is itself a length-dependent rule


@register("rope")
class RopeEncoding(RotaryEncoding):
    """Integer token positions; ``base`` and ``pairing`` as in ``RotaryEncoding``; the scaling settings above."""

    summary = (
        "Rotary embeddings: queries and keys rotated by angles proportional to the token index; optional scaling "
        "rule (linear, ntk, dynamic, yarn, llama3) in training or at test time, and p-RoPE (partial_fraction)."
    )

    def __init__(
        self,
        shape: ModelShape,
        scaling: str = "none",
        scaling_factor: float = 1.0,
        original_length: int | None = None,
        beta_fast: float = 32.0,
        beta_slow: float = 1.0,
        low_freq_factor: float = 1.0,
        high_freq_factor: float = 4.0,
        partial_fraction: float = 1.0,
        test_scaling: str = "none",
        **rotary: Any,
    ) -> None:
        super().__init__(shape, **rotary)  # base, pairing, rotary_dim
        self.scaling, self.scaling_factor, self.test_scaling = scaling, float(scaling_factor), test_scaling
        self.original_length = None if original_length is None else int(original_length)
        self.partial_fraction = float(partial_fraction)
        self.rule_settings = dict(
            beta_fast=float(beta_fast),
            beta_slow=float(beta_slow),
            low_freq_factor=float(low_freq_factor),
            high_freq_factor=float(high_freq_factor),
        )
        inv_freq, self.attention_factor = self.frequencies(None)
        self.inv_freq = inv_freq

    @classmethod
    def validate(cls, settings: dict[str, Any], shape: ModelShape, max_length: int) -> None:
        super().validate(settings, shape, max_length)
        scaling, test = settings.get("scaling", "none"), settings.get("test_scaling", "none")
        validate_rule(scaling, settings, "encoding.scaling")
        check_choice("encoding.test_scaling", test, TEST_RULES)
        if test != "none":
            if scaling != "none":
                raise ConfigError(
                    f"encoding.test_scaling={test} and encoding.scaling={scaling}: give one scaling rule, in "
                    f"training (scaling) or at test time (test_scaling); set the other to none."
                )
            validate_rule(test, {**settings, "scaling_factor": 1.0}, "encoding.test_scaling")
            RULES["dynamic"].validate(settings, f"test-time {test}")  # needs original_length in every case
        fraction = settings.get("partial_fraction", 1.0)
        try:
            ok = 0.0 < float(fraction) <= 1.0
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise ConfigError(
                f"encoding.partial_fraction={fraction!r} must be a number in (0, 1]: the fraction of the "
                f"frequencies p-RoPE rotates (1: all of them, plain RoPE)."
            )

    def frequencies(self, length: int | None) -> tuple[Tensor, float]:
        """Inverse frequencies (fp32) and attention factor for a forward pass over ``length`` tokens (None: at
        build time)."""
        rule, factor = self.scaling, self.scaling_factor
        if self.test_scaling != "none":
            n = length or 0
            if n > self.original_length:  # type: ignore[operator]
                rule, factor = self.test_scaling, n / self.original_length  # type: ignore[operator]
            else:
                rule, factor = "none", 1.0
        inv, attention = scaled_frequencies(
            rule, self.rotary_dim, self.base, factor, self.original_length, length, **self.rule_settings
        )
        if self.partial_fraction < 1.0:
            inv = keep_fraction(inv, self.partial_fraction)
        return inv, attention

    def query_key_transform(self, context: LayerContext, previous: QueryKeyTransform | None) -> QueryKeyTransform:
        positions = context.state
        if previous is not None and previous.positions is positions:
            return previous  # the same for every layer: built once per forward pass
        inv_freq, attention = self.inv_freq, self.attention_factor
        if self.scaling == "dynamic" or self.test_scaling != "none":
            inv_freq, attention = self.frequencies(int(positions.shape[-1]))
            inv_freq = inv_freq.to(self.inv_freq.device)
        rotation = Rotation(rotation_angles(positions, inv_freq), self.pairing, positions)
        if attention == 1.0:
            return rotation
        scale = torch.ones(self.shape.head_dim, device=positions.device)
        scale[: self.rotary_dim] = attention  # the rotated features only, as transformers scales cos and sin
        return Scaled(rotation, scale, scale)

    def test_time_variants(self) -> tuple[str, ...]:
        """Each test-time rule, for a model trained without one (and with ``original_length`` known): the same
        trained model evaluated at every longer length with factor ``L_test / L_train``."""
        if self.scaling != "none" or self.test_scaling != "none" or self.original_length is None:
            return ()
        return tuple(f"test_{rule}" for rule in TEST_RULES if rule != "none")

    @contextmanager
    def evaluated_as(self, variant: str) -> Iterator[None]:
        if variant not in self.test_time_variants():
            raise ValueError(f"encoding rope has no test-time variant {variant!r}: {self.test_time_variants()}")
        self.test_scaling = variant.removeprefix("test_")
        try:
            yield
        finally:
            self.test_scaling = "none"

    def label(self) -> str:
        label = super().label()
        if self.scaling != "none":
            label += f":{self.scaling}{self.scaling_factor:g}"
        if self.test_scaling != "none":
            label += f":test_{self.test_scaling}"
        if self.partial_fraction < 1.0:
            label += f":p{self.partial_fraction:g}"
        return label
