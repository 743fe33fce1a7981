"""Rotary position embeddings: the shared rotation, and the base class of the rotary family.

The rotation is applied to real-valued per-token coordinates, never to an
integer table: ``angle[b, t, i] = position[b, t] * theta_i`` in fp32, with
``theta_i = base ** (-2i / rotary_dim)``. Learned positions (increments) and
hierarchical coordinates (hRoPE) reuse the same path. A ``Rotation`` is the
family's ``QueryKeyTransform`` (``base.py``): queries and keys rotated alike.

The RoPE scaling rules (``rope_scaling.py``: linear, ntk, dynamic, yarn, llama3) are settings of every rotary
encoding, here once: each rule maps the frequencies the encoding rotates by (its own: RoPE's ladder, hRoPE's
bands, one ladder per layer) and may add YaRN's attention factor (``Scaled``, on the rotated features). Two ways:

- in training, ``scaling=<rule>`` with ``scaling_factor=s`` (and ``original_length`` for the rules that read it):
  the rule's frequencies everywhere (``dynamic`` recomputes them from each forward pass's length);
- at test time, ``test_scaling=<rule>``: the encoding's own frequencies up to ``original_length`` (the training
  length; null: ``task.train_length`` or ``task.context_length``), and at a longer sequence of ``n`` tokens the
  rule with factor ``s = n / original_length``. ``test_time_variants()`` offers each rule
  (``test_linear``, ``test_ntk``, ``test_yarn``, ``test_llama3``) on the trained weights, ``evaluated_as(variant)``
  computes as ``test_scaling=<rule>`` would: the same model built with that setting, without training again.

Only the rotation changes: what an encoding adds to it (xPos's decay, SSMax's log-length scale, CoPE's and the
forget gate's terms, learned or hierarchical positions) is computed as without a rule; each encoding's docstring
says what the rule means there.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor

from poslab.config.settings import check_choice, yaml_defaults
from poslab.encodings.base import (
    LayerContext,
    ModelShape,
    PositionEncoding,
    PositionInputs,
    QueryKeyTransform,
    Scaled,
)
from poslab.encodings.rope_scaling import RULE_SETTINGS, TEST_RULES, plain, scaled_frequencies, validate_scaling
from poslab.errors import ConfigError

PAIRINGS = ("interleaved", "half")


def inverse_frequencies(rotary_dim: int, base: float) -> Tensor:
    """``theta_i = base^(-2i/rotary_dim)`` for the ``rotary_dim // 2`` pairs, in fp32."""
    return plain(rotary_dim, base).float()


LOW_PRECISION = (torch.bfloat16, torch.float16)


def exact_positions(positions: Tensor) -> Tensor:
    """``positions`` as fp32, refusing 16-bit floats: converting them would hide that they were already rounded
    (bf16 keeps 8 significant bits: above 256 neighbouring integer positions collide)."""
    if positions.dtype in LOW_PRECISION:
        raise TypeError(
            f"rotary positions must be integers or fp32, not {positions.dtype}: compute them in fp32 "
            f"(with autocast disabled where a layer computes them, as the increments' DeltaMLP does)."
        )
    return positions.float()


def rotation_angles(positions: Tensor, inv_freq: Tensor) -> Tensor:
    """``[B, T]`` real positions times ``[P]`` frequencies -> ``[B, T, P]`` angles, in fp32 (an elementwise
    product: autocast leaves it in fp32)."""
    return exact_positions(positions)[..., None] * inv_freq.float()


class Rotation(QueryKeyTransform):
    """The rotation of one forward pass, precomputed once from angles ``[B, T, P]`` (fp32) and shared by the
    queries and keys of every layer that uses the same angles; ``positions``: the coordinates they came from.

    ``interleaved`` pairs feature 2i with 2i+1 (RoFormer): each pair is a complex number, rotated by one
    complex multiplication with ``exp(i * angle)`` (a view, no copy; a single kernel forward and backward).
    ``half`` pairs i with i+P (HF Llama's rotate_half) and uses cos/sin.
    """

    def __init__(self, angles: Tensor, pairing: str, positions: Tensor | None = None) -> None:
        if angles.dtype not in (torch.float32, torch.float64):
            # .float() here would hide the loss: a bf16 angle (or position) near 1000 is a multiple of 4
            raise TypeError(
                f"rotation angles must be fp32 (or fp64), not {angles.dtype}: compute positions and angles in fp32 "
                f"(autocast leaves elementwise products in fp32; a bf16 position above 256 is rounded)."
            )
        self.pairing = pairing
        self.positions = positions
        self.pairs = angles.shape[-1]
        # [B, 1, T, P] fp32, broadcast over heads. cis/cos/sin stay fp32 (not cast to q's bf16 as HF Llama does):
        # the product below is computed in fp32 and rounded to bf16 once, like any bf16 activation.
        angles = angles.float()[:, None]
        if pairing == "interleaved":
            self.cis = torch.polar(torch.ones_like(angles), angles)
        else:
            self.cos, self.sin = angles.cos(), angles.sin()

    def apply(self, x: Tensor) -> Tensor:
        """Rotate the first ``2P`` features of ``x [B, H, T, hd]``; features past ``2P`` (partial rotary) pass."""
        n_rot = 2 * self.pairs
        whole = n_rot == x.shape[-1]
        # x itself when every feature rotates: a slice, even a full one, costs a zeroed tensor and a copy backward
        rot = (x if whole else x[..., :n_rot]).float()
        if self.pairing == "interleaved":
            rotated = torch.view_as_real(torch.view_as_complex(rot.unflatten(-1, (self.pairs, 2))) * self.cis)
            rotated = rotated.flatten(-2)
        else:
            x1, x2 = rot[..., : self.pairs], rot[..., self.pairs :]
            rotated = torch.cat((x1 * self.cos - x2 * self.sin, x1 * self.sin + x2 * self.cos), dim=-1)
        rotated = rotated.to(x.dtype)
        return rotated if whole else torch.cat((rotated, x[..., n_rot:]), dim=-1)

    def queries(self, q: Tensor) -> Tensor:
        return self.apply(q)

    def keys(self, k: Tensor) -> Tensor:
        return self.apply(k)


def apply_rotary(x: Tensor, angles: Tensor, pairing: str) -> Tensor:
    """Rotate ``x [B, H, T, hd]`` by ``angles [B, T, P]`` (a one-off; the model precomputes a ``Rotation``)."""
    return Rotation(angles, pairing).apply(x)


class RotaryEncoding(PositionEncoding):
    """Base of the rotary family: frequencies, pairing, partial rotation and the scaling rules, validated in one
    place (the module docstring says how the rules apply).

    Each layer's ``query_key_transform`` is a ``Rotation`` by ``angles(layer_positions(...), inv_freq)``.
    Subclasses decide which per-token coordinates the angles come from by overriding ``positions`` (the same in
    every layer) or ``layer_positions`` (per layer; None: no rotation in that layer), and ``angles`` for several
    axes. One whose frequencies are not RoPE's ladder hands them to ``set_frequencies`` at the end of its
    ``__init__``: the rules then act on them.
    """

    attention_paths = ("sdpa", "explicit", "flex")  # q and k rotated before any kernel: every path
    shared_settings = "shared/rotary"  # conf/encoding/shared/rotary.yaml: every rotary encoding's YAML includes it

    def __init__(
        self,
        shape: ModelShape,
        base: float,
        pairing: str,  # rotate (q, k) pairs as RoFormer does (2i, 2i+1), or as HF Llama does (i, i + d/2)
        rotary_dim: int | None,  # null: the whole head dimension
        scaling: str,
        scaling_factor: float,
        original_length: int | None,  # null: unknown (a model built outside a run, with no rule that reads it)
        beta_fast: float,
        beta_slow: float,
        low_freq_factor: float,
        high_freq_factor: float,
        test_scaling: str,
    ) -> None:
        """Every setting comes from the config (``build_encoding`` fills those it leaves out from the YAML, their
        one home: ``conf/encoding/shared/rotary.yaml``), so none has a default here."""
        super().__init__(shape)
        self.base = float(base)
        self.pairing = pairing
        self.rotary_dim = rotary_dim or shape.head_dim
        self.scaling, self.scaling_factor, self.test_scaling = scaling, float(scaling_factor), test_scaling
        self.original_length = None if original_length is None else int(original_length)
        given = {"beta_fast": beta_fast, "beta_slow": beta_slow}
        given |= {"low_freq_factor": low_freq_factor, "high_freq_factor": high_freq_factor}
        self.rule_settings = {key: float(given[key]) for key in RULE_SETTINGS}
        self.register_buffer("inv_freq", inverse_frequencies(self.rotary_dim, self.base), persistent=False)
        self.set_frequencies(plain(self.rotary_dim, self.base))

    @classmethod
    def validate(cls, settings: dict[str, Any], shape: ModelShape, max_length: int) -> None:
        pairing = settings["pairing"]
        check_choice("encoding.pairing", pairing, PAIRINGS)
        base = settings["base"]
        if not base or float(base) <= 1.0:
            raise ConfigError(f"encoding.base={base!r} must be a number greater than 1 (e.g. 10000 or 1000000).")
        rotary_dim = settings.get("rotary_dim") or shape.head_dim
        if rotary_dim % 2 or not 0 < rotary_dim <= shape.head_dim:
            raise ConfigError(
                f"the rotated dimension {rotary_dim} must be even and between 2 and the head dimension "
                f"{shape.head_dim} (d_model {shape.d_model} / {shape.n_heads} heads): RoPE rotates pairs of features."
            )
        validate_scaling(settings)

    def _apply(self, fn: Any, recurse: bool = True) -> RotaryEncoding:
        # a cast of the whole model (.half(), .to(torch.bfloat16)) moves the frequencies but keeps them fp32: a
        # bf16 θ is off by up to 2^-9 of itself, so the angle at position 4000 would be off by radians
        exact = self.inv_freq
        super()._apply(fn, recurse)
        if self.inv_freq.dtype != exact.dtype:
            self.inv_freq = exact.to(self.inv_freq.device)
        return self

    # ---- frequencies and the scaling rules ---------------------------------------------------------------------
    def set_frequencies(self, own: Tensor, bases: Sequence[float] | None = None) -> None:
        """The frequencies this encoding rotates by before any rule: ``own`` (fp64) ``[P]``, or ``[layers, P]`` with
        one ``base`` per row (``bases``; None: ``self.base``), which is the ladder the rules read a pair's index on.
        ``inv_freq`` (fp32) becomes them under the training rule: what a forward pass rotates by when nothing
        depends on its length."""
        self.own_freq = own.double().cpu()  # kept for the rules, never moved: they compute on the CPU in fp64
        self.own_bases = [self.base] * (len(own) if own.dim() == 2 else 1) if bases is None else list(bases)
        self.last_frequencies: tuple[Any, tuple[Tensor, float]] | None = None  # one forward pass's, reused by layers
        inv_freq, self.attention_factor = self.rule_frequencies(None)
        self.inv_freq = inv_freq.to(self.inv_freq.device)

    def rule_at(self, length: int | None) -> tuple[str, float]:
        """The rule and factor of a forward pass over ``length`` tokens (None: no length, at build): the test-time
        rule with factor ``length / original_length`` past the training length and nothing up to it, else the
        training rule."""
        if self.test_scaling == "none":
            return self.scaling, self.scaling_factor
        if length is not None and length > self.original_length:  # type: ignore[operator]
            return self.test_scaling, length / self.original_length  # type: ignore[operator]
        return "none", 1.0

    def rule_frequencies(self, length: int | None) -> tuple[Tensor, float]:
        """The inverse frequencies (fp32, CPU, shaped as ``own_freq``) and attention factor of a forward pass over
        ``length`` tokens: the rule in effect (``rule_at``) applied to the encoding's own frequencies, row by row."""
        rule, factor = self.rule_at(length)
        rows = self.own_freq if self.own_freq.dim() == 2 else self.own_freq[None]
        scaled = [
            scaled_frequencies(
                rule, self.rotary_dim, base, factor, self.original_length, length, theta=row, **self.rule_settings
            )
            for row, base in zip(rows, self.own_bases, strict=True)
        ]
        inv_freq = torch.stack([inv for inv, _ in scaled])
        return (inv_freq if self.own_freq.dim() == 2 else inv_freq[0]), scaled[0][1]  # one factor: it reads s only

    def frequencies_at(self, length: int) -> tuple[Tensor, float]:
        """``rule_frequencies(length)`` on ``inv_freq``'s device: ``inv_freq`` itself unless the rule depends on the
        length (dynamic NTK, a test-time rule), then computed once per forward pass (layers reuse it)."""
        if self.scaling != "dynamic" and self.test_scaling == "none":
            return self.inv_freq, self.attention_factor
        key = (self.rule_at(length), length, self.inv_freq.device)
        if self.last_frequencies is None or self.last_frequencies[0] != key:
            inv_freq, attention = self.rule_frequencies(length)
            self.last_frequencies = (key, (inv_freq.to(self.inv_freq.device), attention))
        return self.last_frequencies[1]

    def rotates(self) -> bool:
        """Whether any layer rotates (a rule changes nothing where none does)."""
        return True

    def test_time_variants(self) -> tuple[str, ...]:
        """Each test-time rule (``TEST_RULES``), for a model trained without one and with ``original_length``
        known: the same trained model evaluated at every longer length with factor ``L_test / L_train``."""
        trained_plain = self.scaling == "none" and self.test_scaling == "none"
        if not trained_plain or self.original_length is None or not self.rotates():
            return ()
        return tuple(f"test_{rule}" for rule in TEST_RULES if rule != "none")

    @contextmanager
    def evaluated_as(self, variant: str) -> Iterator[None]:
        """Within the block the encoding computes as if built with ``test_scaling=<rule>`` (``variant`` is
        ``test_<rule>``); outside it, as before."""
        if variant not in self.test_time_variants():
            raise ValueError(
                f"encoding {self.name!r} has no test-time variant {variant!r}: {self.test_time_variants()}"  # type: ignore[attr-defined]
            )
        self.test_scaling = variant.removeprefix("test_")
        try:
            yield
        finally:
            self.test_scaling = "none"

    # ---- coordinates and rotations ------------------------------------------------------------------------------
    def positions(self, token_embeddings: Tensor, inputs: PositionInputs) -> Tensor:
        """Real-valued per-token positions ``[B or 1, T]``, the same in every layer (the token index here)."""
        return inputs.positions

    def begin(self, token_embeddings: Tensor, inputs: PositionInputs) -> tuple[Tensor, Any]:
        return token_embeddings, self.positions(token_embeddings, inputs)

    def layer_positions(self, layer: int, hidden: Tensor, state: Any, inputs: PositionInputs) -> Tensor | None:
        """Per-token coordinates ``[B or 1, T]`` (or ``[B, T, axes]``) this layer rotates by; None: no rotation.

        ``hidden`` is the layer's input, the residual stream ``[B, T, D]``. Return the same tensor object for
        every layer when the coordinates do not depend on the layer: one rotation is then built per forward
        pass. Analyses read these coordinates (``Transformer.forward(..., return_positions=True)``).
        """
        return state  # the positions begin() computed: one tensor for all layers

    def angles(self, positions: Tensor, inv_freq: Tensor | None = None) -> Tensor:
        """Rotation angles ``[B or 1, T, n_pairs]`` in fp32 from what ``layer_positions`` returned, at the
        frequencies ``inv_freq`` (None: ``self.inv_freq``)."""
        return rotation_angles(positions, self.inv_freq if inv_freq is None else inv_freq)

    def rotation(self, positions: Tensor, inv_freq: Tensor, attention: float) -> QueryKeyTransform:
        """The rotation by ``positions`` at ``inv_freq``, with the rule's attention factor on its features."""
        rotation = Rotation(self.angles(positions, inv_freq), self.pairing, positions)
        if attention == 1.0:
            return rotation
        # YaRN's m on queries and keys alike (the scores times m^2), the rotated features only, as transformers
        # multiplies cos and sin
        scale = torch.ones(self.shape.head_dim, device=positions.device)
        scale[: self.rotary_dim] = attention
        return Scaled(rotation, scale, scale)

    def query_key_transform(
        self, context: LayerContext, previous: QueryKeyTransform | None
    ) -> QueryKeyTransform | None:
        positions = self.layer_positions(context.layer, context.hidden, context.state, context.inputs)
        if positions is None:
            return None
        if previous is not None and previous.positions is positions:
            return previous  # the same coordinates as the layer before: rotate by the same angles
        return self.rotation(positions, *self.frequencies_at(context.hidden.shape[1]))

    def scaling_label(self) -> str:
        """``:yarn4`` for a training rule with its factor, ``:test_yarn`` for a test-time one, else nothing."""
        if self.scaling != "none":
            return f":{self.scaling}{self.scaling_factor:g}"
        return f":test_{self.test_scaling}" if self.test_scaling != "none" else ""

    def label(self) -> str:
        """The name, the base where it is not the YAML's (``:500000``), and the rule (``scaling_label``)."""
        usual = float(yaml_defaults("encoding", "shared/rotary")["base"])
        base = "" if self.base == usual else f":{int(self.base) if self.base.is_integer() else self.base}"
        return f"{self.name}{base}{self.scaling_label()}"  # type: ignore[attr-defined]


#: what an encoding of ``OptionalRotation`` sits on
INNERS = ("none", "rope")


class OptionalRotation(RotaryEncoding):
    """Base of the encodings that add a mechanism of their own (a score term, a score scale) over NoPE or RoPE:
    ``inner: none`` transforms nothing, ``inner: rope`` rotates by the token index as ``RotaryEncoding`` does (its
    ``base``, ``pairing``, ``rotary_dim`` and scaling rules, read only then). ``default_inner()``: the ``inner``
    each encoding's YAML gives (its paper's choice). A scaling rule changes the rotation only; over NoPE there is
    none to change, so no rule is offered (``test_time_variants``) and one asked for stops at build."""

    def __init__(self, shape: ModelShape, inner: str, **rotary: Any) -> None:
        super().__init__(shape, **rotary)
        self.inner = inner

    @classmethod
    def default_inner(cls) -> str:
        """The ``inner`` the encoding's YAML gives, its one home (``conf/encoding/<name>.yaml``)."""
        return str(cls.yaml_settings()["inner"])

    @classmethod
    def validate(cls, settings: dict[str, Any], shape: ModelShape, max_length: int) -> None:
        super().validate(settings, shape, max_length)
        usual = cls.default_inner()
        allowed = (usual, *(inner for inner in INNERS if inner != usual))  # the default first
        inner = settings["inner"]
        check_choice("encoding.inner", inner, allowed)
        rules = {key: settings[key] for key in ("scaling", "test_scaling")}
        asked = [f"encoding.{key}={rule}" for key, rule in rules.items() if rule != "none"]
        if inner == "none" and asked:
            verb = "rescales" if len(asked) == 1 else "rescale"
            raise ConfigError(
                f"{' and '.join(asked)} {verb} RoPE's frequencies, but encoding.inner=none rotates nothing: set "
                f"encoding.inner=rope, or leave scaling and test_scaling at none."
            )

    def rotates(self) -> bool:
        return self.inner != "none"

    def query_key_transform(
        self, context: LayerContext, previous: QueryKeyTransform | None
    ) -> QueryKeyTransform | None:
        return None if self.inner == "none" else super().query_key_transform(context, previous)

    def inner_label(self) -> str:
        """The inner's name only where it is not the default (``":rope"`` on a NoPE default, ``":none"`` on a RoPE
        one), RoPE's base where it is not 10,000 (``":rope:500000"``; ``":500000"`` on a RoPE default) and its
        scaling rule (``":rope:yarn4"``)."""
        named = "" if self.inner == self.default_inner() else f":{self.inner}"
        if self.inner == "none":
            return named
        return named + RotaryEncoding.label(self).removeprefix(self.name)  # type: ignore[attr-defined]

    def label(self) -> str:
        return self.name + self.inner_label()  # type: ignore[attr-defined]
