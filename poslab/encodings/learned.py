"""A learned absolute position table added to the embeddings (GPT-2).

Rows past the training length are never indexed during training, get no
gradient and are excluded from weight decay, so they stay exactly at their
initial values: the write-up's point is what a model does with such rows.

The table starts as the token embeddings do (``init_std: null``), as
GPT-2's Hugging Face and nanoGPT code initialise ``wpe`` and ``wte`` alike:
N(0, model.init_std), or PyTorch's N(0, 1) in a model that keeps PyTorch's
initialisation (the where_am_i model). A table of N(0, 1) rows beside token
embeddings of N(0, 0.02) swamps them fifty-fold and cost the lm_zoo model a
bit per byte at its own length (docs/absolute_scale.md).
"""

from __future__ import annotations

from typing import Any, ClassVar

from torch import Tensor

from poslab.encodings.base import (
    TABLE_LIKE_TOKENS,
    ModelShape,
    PositionEncoding,
    PositionInputs,
    register,
)
from poslab.errors import ConfigError


@register("learned")
class LearnedEncoding(PositionEncoding):
    summary = "A learned table of absolute position vectors added to the token embeddings (as in GPT-2)."
    no_weight_decay = ("table.weight",)
    attention_paths = ("sdpa", "explicit", "flex")  # added before the layers: attention is plain
    length_settings = ("max_positions",)  # null: as many rows as the longest sequence the run uses
    model_setting_kinds: ClassVar[dict[str, str]] = TABLE_LIKE_TOKENS

    def __init__(self, shape: ModelShape, max_positions: int, init_std: float | None) -> None:
        super().__init__(shape)
        self.table = self.table_like_tokens(max_positions, init_std)  # null: as the token embeddings

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
