"""Next-symbol prediction on a corpus: loss, and bits per byte on validation."""

from __future__ import annotations

import math
from typing import Any

import torch.nn.functional as F
from torch import Tensor
from torchmetrics import MeanMetric

from poslab.lightning_modules.base import TransformerModule
from poslab.model import ModelConfig


class LanguageModelModule(TransformerModule):
    """With the byte tokenizer every symbol is one byte (the document separator counts as one), so bits per
    byte is the validation loss in nats divided by ln 2; with bpe it is further divided by the validation
    split's bytes per token (the datamodule's ``bytes_per_token``)."""

    def __init__(
        self, model: ModelConfig, optimizer: dict[str, Any], max_length: int, bytes_per_token: float = 1.0
    ) -> None:
        super().__init__(model, optimizer, max_length)
        self.bytes_per_token = float(bytes_per_token)
        self.val_loss = MeanMetric()
        self.figures: dict[str, float] = {}

    def loss(self, batch: dict[str, Tensor]) -> Tensor:
        """Windows of context + 1 tokens: predict each of the last context tokens from those before it."""
        tokens = batch["tokens"]
        needed = self.model.encoding.required_coordinates
        coordinates = {name: batch[name][:, :-1] for name in needed} if needed else None
        logits = self.model(tokens[:, :-1], self.with_row_seeds(coordinates, len(tokens))).logits
        return F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self.val_loss.update(self.loss(batch), weight=batch["tokens"][:, 1:].numel())

    def on_validation_epoch_end(self) -> None:
        loss = float(self.val_loss.compute())
        self.val_loss.reset()
        bpb = loss / math.log(2) / self.bytes_per_token
        self.figures = {"val_loss": loss, "val_bpb": bpb, "step": int(self.global_step)}
        self.log("val/loss", loss, prog_bar=True, sync_dist=False)
        self.log("val/bpb", bpb, sync_dist=False)

    test_step = validation_step
    on_test_epoch_end = on_validation_epoch_end
