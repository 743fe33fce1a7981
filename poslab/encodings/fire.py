"""FIRE (Li et al., 2023, "Functional Interpolation for Relative Positions Improves Long Context Transformers",
ICLR 2024): a learned function of the distance divided by the query's position ("progressive interpolation").

For a query at ``t`` (0-based) and a key at ``s <= t``, per head ``h``::

    psi(x) = log(c * x + 1)
    bias[t, s] = f_theta( psi(t - s) / (psi(max(L, t)) + eps) )[h]

``f_theta`` an MLP ``1 -> hidden (32) -> H`` with ReLU, ``c > 0`` and the threshold ``L > 0`` learned. The input
lies in ``[0, 1]`` for every query at every length (``t - s <= t <= max(L, t)``): a longer sequence asks ``f_theta``
for no input it was not trained on, once training reached queries past ``L``. ``L`` keeps short queries from
stretching a few tokens over the whole range.

The normaliser is the paper's ``max(L, i)`` with ``i`` the query index (0-based in the paper's PyTorch listing,
``torch.max(positions, threshold)`` over ``arange``), not ``i + 1``. Parametrisation and initialisation as that
listing: ``c`` learned from 0.1 (``init_c``) and used as ``|c * x|``; ``L = |m * L0|`` with ``L0 = 512`` fixed
(``init_L``) and the multiplier ``m`` learned from 1; ``eps = 1e-6``; the MLP with PyTorch's default init.

The threshold is tied to the training length ``T`` (``train_length_settings``): null (the default) starts ``L`` at
``T / 2``. Then every training query from ``L`` on is normalised by its own position, so training shows ``f_theta``
the whole input range ``[0, 1]``, and every longer query, normalised by its own position, asks for inputs inside
it: the progressive interpolation the method is, within the training length. Half, not ``T - 1``: ``L`` is
learned, and at ``T - 1`` a small rise (seen in 20 steps) leaves the last training query short of 1 while every
longer one reaches it; at ``T / 2`` it would have to double. A fixed 512 at poslab's training length 32
normalised every query by ``psi(512)`` (training inputs up to 0.36, up to 0.83 at 256: a ReLU MLP extrapolated,
the opposite of the method). An explicit ``threshold`` is kept; ``untrained_at_test`` says when evaluation
reaches inputs past the range training showed.

Layers: the paper's listing is one module, which its models use per layer (each layer its own ``f_theta, c, L``),
so ``per_layer: true`` (the default) gives each layer its own module through ``score_term``; ``per_layer: false``
(label ``fire:shared``, a named deviation: the setting of poslab's zoo runs before issue 37) is one FIRE shared by
the layers, poslab's ``score_bias`` (computed once per forward, as every other distance bias here). Neither has
``flex``: a 32-wide MLP per score is no pointwise ``score_mod``. The bias is computed in fp32 with autocast off (a
bf16 MLP input would round the normalised distances, spaced ``~1/T``, to 8 bits).

The threshold's start is a named deviation from the listing's fixed 512 (``threshold: 512`` restores it): at
poslab's training lengths (32 to 512) a start of 512 normalises every training query by ``psi(512)`` and leaves
the method's interpolation unused, as the paragraph above measures; half the training length keeps the authors'
mechanism (a learned floor under the query's own position) at these lengths. docs/authors_settings.md.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from poslab.config.settings import check_number, check_whole
from poslab.encodings.base import LayerContext, ModelShape, PositionEncoding, register
from poslab.errors import ConfigError

EPS = 1e-6  # the paper's listing: added to the normaliser


class FireBias(nn.Module):
    """One FIRE: ``f_theta``, ``c`` and the threshold ``L``, and the bias ``[H, T, T]`` they give."""

    def __init__(self, n_heads: int, hidden: int, c: float, threshold: float) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(1, hidden), nn.ReLU(), nn.Linear(hidden, n_heads))
        self.c = nn.Parameter(torch.tensor(float(c)))
        self.register_buffer("threshold_init", torch.tensor(float(threshold)))  # L0, fixed
        self.threshold_multiplier = nn.Parameter(torch.tensor(1.0))  # m: L = |m * L0| learns at the scale of m
        self._last: tuple[tuple, Tensor] | None = None  # (length, device, parameter versions), the bias: see forward

    def normalised_distance(self, length: int, device: torch.device) -> Tensor:
        """``psi(t - s) / (psi(max(L, t)) + eps)`` ``[T, T]`` in fp32 (keys after the query: ``|t - s|``, finite)."""
        position = torch.arange(length, device=device, dtype=torch.float32)
        threshold = (self.threshold_multiplier.float() * self.threshold_init.float()).abs()
        normaliser = torch.maximum(position, threshold)[:, None]
        c = self.c.float()
        psi = lambda x: torch.log(torch.abs(c * x) + 1)  # noqa: E731
        return psi(position[:, None] - position[None, :]) / (psi(normaliser) + EPS)

    def largest_input(self, length: int) -> float:
        """The largest MLP input at ``length``: the key 0 seen from the last query (``psi(t) / psi(max(L, t))``)."""
        return float(self.normalised_distance(length, torch.device("cpu"))[-1, 0])

    def forward(self, length: int, device: torch.device) -> Tensor:
        """The bias ``[H, T, T]``; outside training (no gradient, eval mode) the last one is reused while the length
        and the parameters are unchanged: the MLP over every ``T x T`` input costs ~14x a whole lm_zoo model's
        forward at 2,048, and an evaluation asks for it once per batch and way at the same length and weights."""
        if self.training or torch.is_grad_enabled() or torch.compiler.is_compiling():
            return self._bias(length, device)
        # an in-place update bumps a parameter's _version; a replaced one (.data = ...) moves its data_ptr
        key = (length, str(device), tuple((p.data_ptr(), p._version) for p in self.parameters()))
        if self._last is None or self._last[0] != key:
            self._last = (key, self._bias(length, device))
        return self._last[1]

    def _bias(self, length: int, device: torch.device) -> Tensor:
        with torch.autocast(device.type, enabled=False):
            x = self.normalised_distance(length, device)
            return self.mlp(x[..., None]).permute(2, 0, 1)  # [T, T, H] -> [H, T, T]

    def train(self, mode: bool = True) -> FireBias:
        self._last = None  # a reused bias belongs to one stretch of evaluation
        return super().train(mode)


@register("fire")
class FireEncoding(PositionEncoding):
    """FIRE (the module docstring): one ``FireBias`` for all layers, or one per layer (``per_layer``)."""

    summary = (
        "FIRE: an MLP of log-distance divided by the log of the query's position (at least a learned threshold), "
        "one bias per head; shared by the layers or per layer."
    )
    attention_paths = ("sdpa", "explicit")  # an MLP per score: no pointwise score_mod
    train_length_settings = {"threshold": (0.5, 0)}  # null: half the training length (the module docstring)

    def __init__(
        self,
        shape: ModelShape,
        hidden: int,
        c: float,
        threshold: float,  # null in the YAML: filled with half the training length (train_length_settings)
        per_layer: bool,
    ) -> None:
        super().__init__(shape)
        self.per_layer = bool(per_layer)
        count = shape.n_layers if self.per_layer else 1
        self.fire = nn.ModuleList(FireBias(shape.n_heads, int(hidden), c, threshold) for _ in range(count))

    @classmethod
    def validate(cls, settings: dict[str, Any], shape: ModelShape, max_length: int) -> None:
        check_whole("encoding.hidden", settings["hidden"], 1, "the MLP's width; the paper: 32")
        check_number("encoding.c", settings["c"], 0, meaning="psi(x) = log(c x + 1); the paper starts at 0.1")
        threshold = settings["threshold"]
        meaning = "L, the normaliser's floor; null: half the training length (the paper: 512)"
        check_number("encoding.threshold", threshold, 0, meaning=meaning)
        per_layer = settings["per_layer"]
        if not isinstance(per_layer, bool):
            raise ConfigError(f"encoding.per_layer={per_layer!r} must be true (one FIRE per layer) or false (shared).")

    def score_bias(self, length: int, device: torch.device) -> Tensor | None:
        return None if self.per_layer else self.fire[0](length, device)

    def untrained_at_test(self, train_length: int, max_length: int) -> list[str]:
        notes = []
        with torch.no_grad():
            for index, fire in enumerate(self.fire):
                trained, tested = fire.largest_input(train_length), fire.largest_input(max_length)
                if tested > trained + 1e-3:  # past the range training showed, beyond rounding
                    which = f"layer {index}'s FIRE" if self.per_layer else "FIRE"
                    threshold = float((fire.threshold_multiplier * fire.threshold_init).abs())
                    notes.append(
                        f"{which} MLP sees inputs up to {trained:.3f} in training (length {train_length}, threshold "
                        f"{threshold:.1f}) and up to {tested:.3f} at length {max_length}: it extrapolates there."
                    )
        return notes

    def extra_flops_per_token(self, length: int, batch: int) -> float:
        """The MLP ``1 -> hidden -> H`` at each of the ``T x T`` pairs (``2 hidden (1 + H)`` each), once per forward
        pass and FIRE (one, or one per layer) and shared by the batch's ``batch * T`` tokens; times 3 for training."""
        fire = self.fire[0]
        hidden, heads = fire.mlp[0].out_features, fire.mlp[2].out_features
        per_pass = 2.0 * length * length * hidden * (1 + heads)
        return 3.0 * len(self.fire) * per_pass / (batch * length)

    def score_term(self, context: LayerContext, q: Tensor, k: Tensor) -> Tensor | None:
        if not self.per_layer:
            return None
        return self.fire[context.layer](q.shape[-2], q.device)[None]  # [1, H, T, T]

    def label(self) -> str:
        return "fire" if self.per_layer else "fire:shared"  # the authors' per-layer FIRE is the plain name
