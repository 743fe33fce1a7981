"""CoPE, Contextual Position Encoding (Golovneva et al., 2024, "Contextual Position Encoding: Learning to Count
What's Important", arXiv 2405.18719): a key's position is counted by gates that read the content.

Per layer and head, for a query at ``t`` and a key at ``s <= t`` (``q``, ``k`` after the inner transform)::

    g[t, j] = sigmoid(q_t . k_j / sqrt(head_dim))          gates, 0 for keys after the query (j > t)
    p[t, s] = min(sum_{j=s}^{t} g[t, j], max_pos - 1)      the contextual position of key s seen from t
    z[t, e] = q_t . E[e]                                    e = 0 .. max_pos - 1, E a learned [max_pos, head_dim]
    term[t, s] = (p - floor p) * z[t, ceil p] + (1 - (p - floor p)) * z[t, floor p]

The gates take the attention logits themselves, scaled by ``1 / sqrt(head_dim)`` as the paper's code (Appendix B:
``attn_logits / sqrt(head_dim)``, then ``sigmoid``) and x-transformers (``Attend`` hands its scaled logits to
``CoPE``). The test-time ``score_scale`` (log-length scaling) multiplies the attention scores only: the gates,
like every ``term``, keep the training scale. Keys after the query get gate 0 before the sum (the paper adds
``mask.log()``, -inf, to the logits; x-transformers fills them with ``-finfo.max``), so they are never counted,
and their term is a finite ``z[t, 0]`` that the causal mask then hides. With every gate 1, ``p = t - s + 1``:
relative positions, the paper's remark.

``E`` is one table per layer, shared by the heads, starting at zero (the paper's code and x-transformers'): the
term is 0 and the model NoPE (``inner: none``, the paper's CoPE-only runs) or RoPE (``inner: rope``) at start. The
tables are out of weight decay (``table_weight_decay: false``, the default), as the authors train them (RAM's
``run.sh`` takes its trainer's default ``--optimizer adam``: ``torch.optim.Adam``, no decay) and as every other
position table here is; ``true`` decays them with the model's weights, what poslab did before the setting existed
(a named deviation; a run recorded without the setting reads as ``true``:
``poslab.config.targets.ADDED_ENCODING_SETTINGS``).

As the authors run it (facebookresearch/RAM ``projects/cope/src/cope/context_position.py``, run by its
``run.sh``), the default: the position logits are added *before* the division by ``sqrt(head_dim)``
(``attn_logits += pos_logits; attn_logits /= sqrt(head_dim)``), so the term is ``term / sqrt(head_dim)``
(``position_logits: before_scale``), and the table has ``npos = block_size + 1`` rows: ``max_pos`` null is the
training length + 1 (``train_length_settings``), every count a training sequence can reach. poslab's earlier
variant, the term added after the scaling (the authors' ``--cope-nodiv``, x-transformers' placement), is
``position_logits: after_scale``; with ``max_pos: 16`` it is the zoo's first CoPE.

Compared with x-transformers' ``CoPE(dim=head_dim, heads=H, max_pos)`` (the default interpolation, not
``soft_onehot``): the same term for every ``(t, s <= t)`` (``tests/encodings/test_content_positions.py``). poslab
writes the interpolation as ``z[floor p] + (p - floor p) * (z[floor p + 1] - z[floor p])``, the same number (``ceil p
= floor p + 1`` whenever ``p`` is not whole, and the weight is 0 when it is), so one index tensor serves both reads.
Everything is computed in fp32 with autocast off: a bf16 sum of 100 gates moves in steps of 0.5.

Scaling rules (``scaling``, ``test_scaling``, the test-time variants; ``rotary.RotaryEncoding``), with ``inner:
rope``: the rotation's frequencies only, as ``rope``'s. The gates read the rotated queries and keys, so they see
the rule's rotation; the table ``E`` and ``max_pos`` are as without a rule. With ``inner: none``: no rule.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from poslab.config.settings import check_choice, check_whole
from poslab.encodings.base import LayerContext, ModelShape, register
from poslab.encodings.rotary import OptionalRotation
from poslab.errors import ConfigError


class ContentTermEncoding(OptionalRotation):
    """Base of the content-dependent score terms (``cope``, ``forget_gate``): a ``score_term`` per layer, over NoPE
    (the default) or RoPE (``OptionalRotation``)."""

    attention_paths = ("sdpa", "explicit")  # a [B, H, T, T] term per layer: an additive mask, no score_mod


#: where the position logits join the attention logits: before their 1/sqrt(head_dim) (the authors' default) or
#: after it (their ``--cope-nodiv``; x-transformers)
PLACEMENTS = ("before_scale", "after_scale")


class ContextualPositions(nn.Module):
    """One layer's CoPE: the position table ``E [max_pos, head_dim]`` (shared by the heads) and its term."""

    def __init__(self, max_pos: int, head_dim: int, position_logits: str) -> None:
        super().__init__()
        self.max_pos = max_pos
        self.table = nn.Parameter(torch.zeros(max_pos, head_dim))  # zero: no term at start, as the paper's code
        # the model adds every term after the score scaling: a term meant before it is divided here
        self.term_scale = 1 / math.sqrt(head_dim) if position_logits == "before_scale" else 1.0

    def positions(self, q: Tensor, k: Tensor) -> Tensor:
        """``p [B, H, T, T]`` (fp32): the gates of keys ``s..t`` summed, clamped to ``max_pos - 1``; keys after the
        query have gate 0."""
        logits = (q.float() @ k.float().transpose(-2, -1)) / math.sqrt(q.shape[-1])
        gates = logits.sigmoid().tril()  # 0 above the diagonal: keys after the query are not counted
        # p[t, s] = sum over j >= s of g[t, j]: a cumulative sum from the query back along the keys
        return gates.flip(-1).cumsum(dim=-1).flip(-1).clamp(max=self.max_pos - 1)

    def forward(self, q: Tensor, k: Tensor) -> Tensor:
        """``term [B, H, T, T]`` (fp32) from this layer's queries and keys ``[B, H, T, head_dim]``."""
        with torch.autocast(q.device.type, enabled=False):
            p = self.positions(q, k)
            z = q.float() @ self.table.float().T  # [B, H, T, max_pos]: q_t . E[e] at every integer position
            step = torch.diff(z, dim=-1, append=z[..., -1:])  # z[e + 1] - z[e]; 0 past the last row
            floor = p.floor()
            index = floor.long()
            return (z.gather(-1, index) + (p - floor) * step.gather(-1, index)) * self.term_scale


@register("cope")
class CopeEncoding(ContentTermEncoding):
    """CoPE (the module docstring): each layer's own table ``E``; over NoPE or RoPE (``inner``)."""

    summary = (
        "CoPE: a key's position is the number of keys up to the query whose gate sigmoid(q.k) opens, read from "
        "learned interpolated position embeddings; per layer, over NoPE or RoPE (inner)."
    )

    train_length_settings = {"max_pos": (1.0, 1)}  # null: the training length + 1, the authors' block_size + 1

    def __init__(
        self,
        shape: ModelShape,
        max_pos: int,
        position_logits: str,
        table_weight_decay: bool,
        **inner_and_rotary: Any,
    ) -> None:
        super().__init__(shape, **inner_and_rotary)  # inner; base, pairing, rotary_dim
        self.max_pos, self.position_logits = int(max_pos), position_logits
        self.table_weight_decay = bool(table_weight_decay)
        self.layers = nn.ModuleList(
            ContextualPositions(self.max_pos, shape.head_dim, position_logits) for _ in range(shape.n_layers)
        )
        # the authors' Adam decays nothing; true: the tables with the model's weights (poslab before the setting)
        tables = tuple(f"layers.{layer}.table" for layer in range(shape.n_layers))
        self.no_weight_decay = () if self.table_weight_decay else tables  # type: ignore[misc]

    @classmethod
    def validate(cls, settings: dict[str, Any], shape: ModelShape, max_length: int) -> None:
        super().validate(settings, shape, max_length)
        meaning = (
            "the rows of each layer's position table; contextual positions past max_pos - 1 share the last row; "
            "null: the training length + 1 (the authors' block_size + 1)"
        )
        check_whole("encoding.max_pos", settings["max_pos"], 1, meaning)
        check_choice("encoding.position_logits", settings["position_logits"], PLACEMENTS)
        decay = settings["table_weight_decay"]
        if not isinstance(decay, bool):
            raise ConfigError(
                f"encoding.table_weight_decay={decay!r} must be false (the position tables out of weight decay, as "
                f"the authors' Adam) or true (decayed with the model's weights, poslab before the setting)."
            )

    def score_term(self, context: LayerContext, q: Tensor, k: Tensor) -> Tensor:
        return self.layers[context.layer](q, k)

    def extra_flops_per_token(self, length: int, batch: int) -> float:
        """Per layer and token, the gates' own ``q k^T`` over every head (``2 d_model T``) and ``z = q E^T`` over the
        table's rows (``2 d_model max_pos``); times 3 for training."""
        return 6.0 * self.shape.n_layers * self.shape.d_model * (length + self.max_pos)

    def untrained_at_test(self, train_length: int, max_length: int) -> list[str]:
        # a count p[t, s] <= t - s + 1 <= the length: training reaches rows up to train_length at most
        last = self.max_pos - 1
        reached, trained = min(max_length, last), min(train_length, last)
        notes = []
        if reached > trained:
            notes.append(
                f"CoPE position rows {trained + 1}..{reached} can be read in evaluation (length {max_length}) but "
                f"never in training (length {train_length}): they keep their initial zeros."
            )
        if max_length > last:
            notes.append(f"CoPE counts past {last} (max_pos={self.max_pos}) share the last row at length {max_length}.")
        return notes

    def label(self) -> str:
        placement = (
            "" if self.position_logits == self.yaml_settings()["position_logits"] else f":{self.position_logits}"
        )
        return f"cope:{self.max_pos}{placement}{self.inner_label()}"
