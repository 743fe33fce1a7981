"""A learned absolute position table added to the embeddings (GPT-2).

Rows past the training length are never indexed during training, get no
gradient and are excluded from weight decay, so they stay exactly at their
initial values: the write-up's point is what a model does with such rows.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from poslab.encodings.base import ModelShape, PositionEncoding, PositionInputs, register
from poslab.errors import ConfigError


@register("learned")
class LearnedEncoding(PositionEncoding):
    summary = "A learned table of absolute position vectors added to the token embeddings (as in GPT-2)."
    no_weight_decay = ("table.weight",)
    attention_paths = ("sdpa", "explicit", "flex")  # added before the layers: attention is plain
    length_settings = ("max_positions",)  # null: as many rows as the longest sequence the run uses

    def __init__(self, shape: ModelShape, max_positions: int, init_std: float | None) -> None:
        super().__init__(shape)
        self.table = nn.Embedding(max_positions, shape.d_model)
        if init_std is not None:  # None keeps PyTorch's N(0, 1), as the write-up's model does
            nn.init.normal_(self.table.weight, std=init_std)

    @classmethod
    def validate(cls, settings: dict[str, Any], shape: ModelShape, max_length: int) -> None:
        rows = settings.get("max_positions")
        if rows is None:
            return  # filled in with max_length when built
        if rows < max_length:
            raise ConfigError(
                f"encoding.max_positions={rows} is shorter than the longest sequence the run uses ({max_length}); "
                f"a learned table has no row for those positions: set encoding.max_positions >= {max_length}."
            )

    def untrained_at_test(self, train_length: int, max_length: int) -> list[str]:
        if max_length <= train_length:
            return []
        return [
            f"learned position rows {train_length}..{max_length - 1} are read in evaluation but never in training "
            f"(length {train_length}): they keep their initial values."
        ]

    def begin(self, token_embeddings: Tensor, inputs: PositionInputs) -> tuple[Tensor, Any]:
        return token_embeddings + self.table(inputs.positions.long()), None
