"""FoPE, Fourier position embedding (Hua et al., 2024, "Fourier Position Embedding: Enhancing Attention's Periodic
Extension for Length Generalization"): each rotated pair of a head is no longer one frequency but a Fourier series
over all of RoPE's frequencies, and the frequencies too slow to be trained are clipped to zero.

As the authors' code (github.com/TsinghuaC3I/Fourier-Position-Embedding, stored as yiju-zhao/...; ``olmo/model.py``:
``RotaryEmbedding.get_inv_freq``, ``FourierEmbedding.__init__``, ``reset_parameters``, ``apply_rotary_pos_emb``, with
their configs' settings ``rope_clamp_floor_freq``, ``rope_clamp_floor_to_zero``, ``fourier_ignore_zero``,
``fourier_separate_basis``, ``fourier_separate_head``, ``fourier_init: eye_xavier_norm``), per layer::

    theta_j = base ** (-2j / head_dim), set to 0 where theta_j < 2 pi / L (a wavelength longer than the training
              length L: under-trained), and the zeros dropped: D frequencies left
    d = min(D, head_dim / 4) output pairs
    fcos[t, h, i] = sum_j cos(t theta_j) C_cos[h, j, i]      fsin likewise with C_sin (each [H, D, d])
    fcos, fsin padded with the value 1 to head_dim / 2 pairs (the authors' F.pad(..., value=1))
    q' = q * fcos + rotate_half(q) * fsin                    (the same for k; pairs (i, i + head_dim / 2))

``C = eye + xavier_normal(gain)`` at init (a "step eye" when D > d: column i has its 1 at row ``i * ceil(D / d)``),
one draw per head and layer; the authors' default ``fourier_learnable: False`` keeps it fixed (a buffer, saved
with the model); ``learnable: true`` trains it. The transform is not a rotation: ``fope.FourierTransform``, a
``QueryKeyTransform`` of its own, computed in fp32 (the authors' ``rope_full_precision``). Frequencies from
``rotary.inverse_frequencies``; RoPE's scaling rules are not offered (the authors' YaRN / PI variants act on the
frequencies before the Fourier mix: not built here).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from poslab.config.settings import check_whole
from poslab.encodings.base import (
    LayerContext,
    ModelShape,
    PositionEncoding,
    QueryKeyTransform,
    register,
)
from poslab.encodings.rotary import inverse_frequencies, rotation_angles
from poslab.errors import ConfigError


def clipped_frequencies(head_dim: int, base: float, clip_length: int) -> Tensor:
    """RoPE's frequencies with those below ``2 pi / clip_length`` (under-trained) dropped (fp32)."""
    theta = inverse_frequencies(head_dim, base)
    return theta[theta >= 2 * math.pi / clip_length]


def step_eye(n_in: int, n_out: int) -> Tensor:
    """``[n_in, n_out]``: column i has a 1 at row ``i * ceil(n_in / n_out)`` (the identity when they are equal)."""
    eye = torch.zeros(n_in, n_out)
    step = math.ceil(n_in / n_out)
    for i in range(n_out):
        if i * step < n_in:
            eye[i * step, i] = 1.0
    return eye


class FourierCoefficients(nn.Module):
    """One layer's ``C_sin``, ``C_cos`` ``[H, D, d]``: eye plus Xavier-normal noise, trained or fixed."""

    def __init__(self, heads: int, n_in: int, n_out: int, gain: float, learnable: bool) -> None:
        super().__init__()
        for name in ("sin_coef", "cos_coef"):
            coef = torch.empty(heads, n_in, n_out)
            nn.init.xavier_normal_(coef, gain=gain)  # fans of the 3-d tensor, as the authors' call computes them
            coef += step_eye(n_in, n_out)
            if learnable:
                setattr(self, name, nn.Parameter(coef))
            else:
                self.register_buffer(name, coef)


class FourierTransform(QueryKeyTransform):
    """Queries and keys mixed by one layer's Fourier sines and cosines ``[B or 1, H, T, head_dim]`` (fp32)."""

    def __init__(self, fsin: Tensor, fcos: Tensor, positions: Tensor) -> None:
        self.fsin, self.fcos, self.positions = fsin, fcos, positions

    def apply(self, x: Tensor) -> Tensor:
        with torch.autocast(x.device.type, enabled=False):
            xf = x.float()
            x1, x2 = xf.chunk(2, dim=-1)
            return (xf * self.fcos + torch.cat((-x2, x1), dim=-1) * self.fsin).to(x.dtype)

    def queries(self, q: Tensor) -> Tensor:
        return self.apply(q)

    def keys(self, k: Tensor) -> Tensor:
        return self.apply(k)


@register("fope")
class FopeEncoding(PositionEncoding):
    """FoPE (the module docstring): per layer and head, Fourier series of RoPE's trained frequencies."""

    summary = (
        "FoPE: each query/key pair is mixed by a fixed random (or learned) Fourier series over RoPE's frequencies, "
        "with the frequencies slower than the training length clipped to zero."
    )
    attention_paths = ("sdpa", "explicit", "flex")  # q and k transformed before any kernel
    train_length_settings = {"clip_length": (1.0, 0)}  # null: the training length (the authors' max_sequence_length)

    def __init__(self, shape: ModelShape, base: float, clip_length: int, init_gain: float, learnable: bool) -> None:
        super().__init__(shape)
        self.base, self.clip_length, self.learnable = float(base), int(clip_length), bool(learnable)
        self.register_buffer(
            "theta", clipped_frequencies(shape.head_dim, self.base, self.clip_length), persistent=False
        )
        n_in = len(self.theta)
        self.n_out = min(n_in, shape.head_dim // 4)
        self.layers = nn.ModuleList(
            FourierCoefficients(shape.n_heads, n_in, self.n_out, float(init_gain), self.learnable)
            for _ in range(shape.n_layers)
        )

    @classmethod
    def validate(cls, settings: dict[str, Any], shape: ModelShape, max_length: int) -> None:
        base = settings["base"]
        if not base or float(base) <= 1.0:
            raise ConfigError(f"encoding.base={base!r} must be a number greater than 1 (RoPE's 10000).")
        if shape.head_dim % 4:
            raise ConfigError(
                f"FoPE needs a head dimension divisible by 4 (it mixes head_dim / 4 of its head_dim / 2 pairs); "
                f"d_model {shape.d_model} / {shape.n_heads} heads gives {shape.head_dim}."
            )
        clip = settings.get("clip_length")
        if clip is not None:
            check_whole("encoding.clip_length", clip, 1, "frequencies slower than 2 pi / clip_length are zeroed")
            if not (inverse_frequencies(shape.head_dim, float(base)) >= 2 * math.pi / clip).any():
                raise ConfigError(
                    f"encoding.clip_length={clip} clips every one of RoPE's frequencies (base {base}, head dimension "
                    f"{shape.head_dim}); FoPE needs at least one faster than 2 pi / clip_length: raise it."
                )
        if not float(settings["init_gain"]) >= 0:
            raise ConfigError(f"encoding.init_gain={settings['init_gain']!r} must be >= 0 (the authors' 0.3).")

    def extra_flops_per_token(self, length: int, batch: int) -> float:
        """Per layer, the Fourier sums ``fsin`` and ``fcos`` (two products ``[T, D] x [H, D, d]``), once per forward
        pass for positions the batch shares (``arange``: every run here) and divided among its ``batch * T``
        tokens; times 3 for training where the coefficients are learned (``learnable``), once where they are fixed
        (no gradient)."""
        per_pass = 2 * 2.0 * self.shape.n_heads * length * len(self.theta) * self.n_out
        passes = 3.0 if self.learnable else 1.0
        return passes * self.shape.n_layers * per_pass / (batch * length)

    def query_key_transform(
        self, context: LayerContext, previous: QueryKeyTransform | None
    ) -> QueryKeyTransform | None:
        positions = context.inputs.positions
        coefficients = self.layers[context.layer]
        pad = self.shape.head_dim // 2 - self.n_out
        with torch.autocast(positions.device.type, enabled=False):
            angles = rotation_angles(positions, self.theta)[:, None]  # [B or 1, 1, T, D]
            fsin = torch.einsum("bhtD,hDd->bhtd", angles.sin(), coefficients.sin_coef.float())
            fcos = torch.einsum("bhtD,hDd->bhtd", angles.cos(), coefficients.cos_coef.float())
            fsin, fcos = (F.pad(f, (0, pad), value=1.0) for f in (fsin, fcos))  # the authors pad with ones
        return FourierTransform(torch.cat((fsin, fsin), -1), torch.cat((fcos, fcos), -1), positions)
