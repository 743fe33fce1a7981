"""Rotary position embeddings: the shared rotation, and the base class of the rotary family.

The rotation is applied to real-valued per-token coordinates, never to an
integer table: ``angle[b, t, i] = position[b, t] * theta_i`` in fp32, with
``theta_i = base ** (-2i / rotary_dim)``. Learned positions (increments) and
hierarchical coordinates (hRoPE) reuse the same path. A ``Rotation`` is the
family's ``QueryKeyTransform`` (``base.py``): queries and keys rotated alike.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor

from poslab.encodings.base import LayerContext, ModelShape, PositionEncoding, PositionInputs, QueryKeyTransform
from poslab.errors import ConfigError
from poslab.settings import check_choice

PAIRINGS = ("interleaved", "half")


def inverse_frequencies(rotary_dim: int, base: float) -> Tensor:
    """``theta_i = base^(-2i/rotary_dim)`` for the ``rotary_dim // 2`` pairs, in fp32."""
    return base ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim).float()


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
        rot = x[..., :n_rot].float()
        if self.pairing == "interleaved":
            rotated = torch.view_as_real(torch.view_as_complex(rot.unflatten(-1, (self.pairs, 2))) * self.cis)
            rotated = rotated.flatten(-2)
        else:
            x1, x2 = rot[..., : self.pairs], rot[..., self.pairs :]
            rotated = torch.cat((x1 * self.cos - x2 * self.sin, x1 * self.sin + x2 * self.cos), dim=-1)
        rotated = rotated.to(x.dtype)
        return rotated if n_rot == x.shape[-1] else torch.cat((rotated, x[..., n_rot:]), dim=-1)

    def queries(self, q: Tensor) -> Tensor:
        return self.apply(q)

    def keys(self, k: Tensor) -> Tensor:
        return self.apply(k)


def apply_rotary(x: Tensor, angles: Tensor, pairing: str) -> Tensor:
    """Rotate ``x [B, H, T, hd]`` by ``angles [B, T, P]`` (a one-off; the model precomputes a ``Rotation``)."""
    return Rotation(angles, pairing).apply(x)


class RotaryEncoding(PositionEncoding):
    """Base of the rotary family: frequencies, pairing and partial rotation, validated in one place.

    Each layer's ``query_key_transform`` is a ``Rotation`` by ``angles(layer_positions(...))``. Subclasses decide
    which per-token coordinates the angles come from by overriding ``positions`` (the same in every layer) or
    ``layer_positions`` (per layer; None: no rotation in that layer), and ``angles`` for several axes.
    """

    attention_paths = ("sdpa", "explicit", "flex")  # q and k rotated before any kernel: every path
    #: rotate (q, k) pairs as RoFormer does (2i, 2i+1) or as HF Llama does (i, i + d/2)
    pairing: str = "interleaved"

    def __init__(
        self,
        shape: ModelShape,
        base: float = 10_000.0,
        pairing: str = "interleaved",
        rotary_dim: int | None = None,
    ) -> None:
        super().__init__(shape)
        self.base = float(base)
        self.pairing = pairing
        self.rotary_dim = rotary_dim or shape.head_dim
        self.register_buffer("inv_freq", inverse_frequencies(self.rotary_dim, self.base), persistent=False)

    @classmethod
    def validate(cls, settings: dict[str, Any], shape: ModelShape, max_length: int) -> None:
        pairing = settings.get("pairing", "interleaved")
        check_choice("encoding.pairing", pairing, PAIRINGS)
        base = settings.get("base", 10_000.0)
        if not base or float(base) <= 1.0:
            raise ConfigError(f"encoding.base={base!r} must be a number greater than 1 (e.g. 10000 or 1000000).")
        rotary_dim = settings.get("rotary_dim") or shape.head_dim
        if rotary_dim % 2 or not 0 < rotary_dim <= shape.head_dim:
            raise ConfigError(
                f"the rotated dimension {rotary_dim} must be even and between 2 and the head dimension "
                f"{shape.head_dim} (d_model {shape.d_model} / {shape.n_heads} heads): RoPE rotates pairs of features."
            )

    def _apply(self, fn: Any, recurse: bool = True) -> RotaryEncoding:
        # a cast of the whole model (.half(), .to(torch.bfloat16)) moves the frequencies but keeps them fp32: a
        # bf16 θ is off by up to 2^-9 of itself, so the angle at position 4000 would be off by radians
        exact = self.inv_freq
        super()._apply(fn, recurse)
        if self.inv_freq.dtype != exact.dtype:
            self.inv_freq = exact.to(self.inv_freq.device)
        return self

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

    def angles(self, positions: Tensor) -> Tensor:
        """Rotation angles ``[B or 1, T, n_pairs]`` in fp32 from what ``layer_positions`` returned."""
        return rotation_angles(positions, self.inv_freq)

    def query_key_transform(self, context: LayerContext, previous: QueryKeyTransform | None) -> Rotation | None:
        positions = self.layer_positions(context.layer, context.hidden, context.state, context.inputs)
        if positions is None:
            return None
        if isinstance(previous, Rotation) and previous.positions is positions:
            return previous  # the same coordinates as the layer before: rotate by the same angles
        return Rotation(self.angles(positions), self.pairing, positions)

    def label(self) -> str:
        if self.base == 10_000.0:
            return self.name
        return f"{self.name}:{int(self.base) if self.base.is_integer() else self.base}"


#: what an encoding of ``OptionalRotation`` sits on
INNERS = ("none", "rope")


class OptionalRotation(RotaryEncoding):
    """Base of the encodings that add a mechanism of their own (a score term, a score scale) over NoPE or RoPE:
    ``inner: none`` transforms nothing, ``inner: rope`` rotates by the token index as ``RotaryEncoding`` does (its
    ``base``, ``pairing``, ``rotary_dim``, read only then). ``default_inner``: each encoding's paper's choice."""

    default_inner: ClassVar[str] = "none"

    def __init__(self, shape: ModelShape, inner: str | None = None, **rotary: Any) -> None:
        super().__init__(shape, **rotary)
        self.inner = self.default_inner if inner is None else inner

    @classmethod
    def validate(cls, settings: dict[str, Any], shape: ModelShape, max_length: int) -> None:
        super().validate(settings, shape, max_length)
        allowed = (cls.default_inner, *(inner for inner in INNERS if inner != cls.default_inner))  # the default first
        check_choice("encoding.inner", settings.get("inner", cls.default_inner), allowed)

    def query_key_transform(self, context: LayerContext, previous: QueryKeyTransform | None) -> Rotation | None:
        return None if self.inner == "none" else super().query_key_transform(context, previous)

    def inner_label(self) -> str:
        """The inner's name only where it is not the default (``":rope"`` on a NoPE default, ``":none"`` on a RoPE
        one), and RoPE's base where it is not 10,000 (``":rope:500000"``; ``":500000"`` on a RoPE default)."""
        named = "" if self.inner == self.default_inner else f":{self.inner}"
        if self.inner == "none":
            return named
        return named + RotaryEncoding.label(self).removeprefix(self.name)  # type: ignore[attr-defined]

    def label(self) -> str:
        return self.name + self.inner_label()  # type: ignore[attr-defined]
